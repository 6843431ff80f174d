#!/usr/bin/env bash
# The architecture, the types and dead code: the import-linter contract (.importlinter), mypy
# ([tool.mypy] in pyproject.toml) and vulture (scripts/vulture_whitelist.py). All three read
# the package as a non-editable install lays it out (bot/ -> eaglebot/, skills/ ->
# eaglebot/skills/): the editable install maps two folders into one package, and grimp and
# mypy each walk only one folder per package.
# Needs the dev extra (scripts/test.sh installs it into .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-$root/.venv/bin/python}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r bot "$stage/eaglebot"
cp -r skills "$stage/eaglebot/skills"
cp -r playbooks "$stage/eaglebot/playbooks"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +
echo "== import-linter (.importlinter)"
PYTHONPATH="$stage" "$py" -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())' \
  --config "$root/.importlinter" --no-cache
echo "== vulture (dead code, confidence >= 60)"
# Pydantic validators and Bolt handlers are called by their frameworks, found by decorator;
# the other names vulture cannot see used are in the whitelist, each with why.
"$py" -m vulture "$stage/eaglebot" "$root/scripts/vulture_whitelist.py" --min-confidence 60 \
  --ignore-decorators "@field_validator,@model_validator,@app.command,@app.action"
echo "== mypy (strict, bot/ and skills/)"
cd "$stage"
MYPYPATH="$stage" "$py" -m mypy --config-file "$root/pyproject.toml" --cache-dir "$stage/.mypy_cache" -p eaglebot
echo "== cog (the generated reference in docs/ is what the code declares)"
cd "$root"
"$py" -m cogapp --check -I "$root/scripts" docs/reference.md docs/configuration.md
