#!/usr/bin/env bash
# Capture what each architecture's set_eagle3_layers_to_capture does, from the REAL SGLang wheel,
# into src/eaglebot/facts/data/eagle3-capture-<version>.json (the table draft.check falls back to when a
# host's SGLang cannot be asked). By hand, for each release eaglebot knows; no install, no torch:
# the wheel is unpacked (tests/support/sglang_source.py) and read by eaglebot's own host program.
#   scripts/capture/eagle3.sh [VERSION ...]        (default: 0.5.23 0.5.17 0.5.10)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
for v in "${@:-0.5.23 0.5.17 0.5.10}"; do
  for version in $v; do
    root=$("$PY" tests/support/sglang_source.py "$version")
    "$PY" scripts/capture/eagle3_capture.py "$root" "src/eaglebot/facts/data/eagle3-capture-$version.json"
  done
done
