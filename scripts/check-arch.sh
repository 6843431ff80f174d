#!/usr/bin/env bash
# The architecture, the types and dead code: the import-linter contracts (.importlinter), mypy
# ([tool.mypy] in pyproject.toml) and vulture (scripts/vulture_whitelist.py), over src/eaglebot as
# it installs; then cog: the generated reference in docs/ is what the code declares.
# Needs the dev extra (scripts/test.sh installs it into .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-$root/.venv/bin/python}
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
echo "== import-linter (.importlinter)"
PYTHONPATH="$root/src" "$py" -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())' \
  --config "$root/.importlinter" --no-cache
echo "== vulture (dead code, confidence >= 60)"
# Pydantic validators and Bolt handlers are called by their frameworks, found by decorator;
# the other names vulture cannot see used are in the whitelist, each with why.
"$py" -m vulture "$root/src/eaglebot" "$root/scripts/vulture_whitelist.py" --min-confidence 60 \
  --ignore-decorators "@field_validator,@model_validator,@app.command,@app.action"
echo "== mypy (strict, src/eaglebot)"
cd "$root/src"
MYPYPATH="$root/src" "$py" -m mypy --config-file "$root/pyproject.toml" --cache-dir "$cache/mypy" -p eaglebot
echo "== cog (the generated reference in docs/ is what the code declares)"
cd "$root"
"$py" -m cogapp --check -I "$root/scripts" docs/reference.md docs/configuration.md
