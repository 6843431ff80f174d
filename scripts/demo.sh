#!/usr/bin/env bash
# The main job end to end on a fresh machine: make a virtualenv, install eaglebot,
# then run the relaunch flow against a simulated GPU host (no Slack, no GPU, no config).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check .
exec .venv/bin/eagle demo "$@"
