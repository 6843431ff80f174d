#!/usr/bin/env bash
# Architecture and types: the import-linter contract (.importlinter) and mypy, both over
# the package assembled as a non-editable install lays it out (bot/ -> eaglebot/,
# skills/ -> eaglebot/skills/). Needs the dev extra (scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r bot "$stage/eaglebot"
cp -r skills "$stage/eaglebot/skills"
cp -r playbooks "$stage/eaglebot/playbooks"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
PYTHONPATH="$stage" "$PY" -m importlinter.cli --config .importlinter --no-cache 2>/dev/null \
  || PYTHONPATH="$stage" "$PY" -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())' --config .importlinter --no-cache
(cd "$stage" && MYPYPATH="$stage" "$OLDPWD/$PY" -m mypy --config-file "$OLDPWD/pyproject.toml" -p eaglebot)
