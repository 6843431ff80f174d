#!/usr/bin/env bash
# Record the surface eaglebot relies on (flags, env vars, field names, capture hooks, adaptive
# defaults) of each SGLang release it knows, from the REAL wheel, into
# src/eaglebot/facts/data/sglang-surface-<version>.json (the version-drift sentinel's records). By hand; no
# install, no torch: the wheel is unpacked (tests/support/sglang_source.py --full) and read by the sentinel.
#   scripts/capture/surface.sh [VERSION ...]        (default: 0.5.10 0.5.17 0.5.23)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
for version in ${@:-0.5.10 0.5.17 0.5.23}; do
  root=$("$PY" tests/support/sglang_source.py --full "$version")
  "$PY" scripts/capture/surface_capture.py "$root" "src/eaglebot/facts/data/sglang-surface-$version.json"
done
