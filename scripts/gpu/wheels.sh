#!/usr/bin/env bash
# Build .whl/: the project's own wheel and the runtime wheels the GPU machine lacks, slim enough to
# travel with .sgstage/ (everything a device call carries is at most 64 MiB: the tracked tree is ~4.5
# MB, .sgstage 52.5 MB, so .whl stays under ~7 MB). Run here, from the repo root (a worktree too):
#     scripts/gpu/wheels.sh            # prints what it kept, what it dropped and the size
# Left out, because the GPU machine has them (its image: KINDS.md's package list) or the staged SGLang
# tree carries them (scripts/gpu/real-sglang.sh copies those from /tmp/site into the bot's own folder):
#   the image: pytest pluggy iniconfig pygments aiohttp and its parts, jinja2, pyyaml, numpy,
#              matplotlib and its parts, requests, packaging, prometheus-client, tzdata's zoneinfo...
#   the tree:  pydantic pydantic-core annotated-types typing-inspection cffi pycparser
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
rm -rf .whl && mkdir -p .whl
deps=$("$PY" - <<'PY'
import tomllib, pathlib
print("\n".join(tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]["dependencies"]))
PY
)
printf '%s\n' "$deps" pytest-asyncio > .whl/requirements.txt
plat=""; for n in 17 24 27 28 31 34 35; do plat="$plat --platform manylinux_2_${n}_x86_64"; done
# shellcheck disable=SC2086
"$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  $plat --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64 --platform any \
  -d .whl -r .whl/requirements.txt 2> >(grep -v "is ignored: it is neither" >&2)
rm -f .whl/requirements.txt
# The image's (KINDS.md "Python packages already there"), then the staged tree's (checked there:
# real-sglang.sh refuses to run when one it copies is missing from /tmp/site).
IMAGE="aiohttp aiosignal aiohappyeyeballs attrs frozenlist multidict yarl propcache idna typing_extensions
pyyaml PyYAML jinja2 Jinja2 markupsafe MarkupSafe click tabulate python_dateutil six pluggy packaging pip certifi
charset_normalizer requests urllib3 numpy torch triton matplotlib pillow contourpy cycler fonttools kiwisolver
pyparsing pytest iniconfig pygments Pygments prometheus_client"
TREE="pydantic pydantic_core annotated_types typing_inspection cffi pycparser"
dropped=""
for have in $IMAGE $TREE; do
  for f in .whl/"$have"-*.whl; do [ -e "$f" ] && { dropped="$dropped $(basename "$f")"; rm -f "$f"; }; done
done
"$PY" -m pip wheel -q --no-deps -w .whl . 2> >(grep -v "is ignored: it is neither" >&2)
"$PY" scripts/gpu/source_hash.py > .whl/SOURCE.sha256   # real-sglang.sh refuses a wheel older than the tree
echo "dropped (on the GPU machine already, or copied from the staged tree):$dropped"
ls -S .whl | while read -r f; do printf '  %6s KB  %s\n' "$(( $(stat -c %s ".whl/$f") / 1024 ))" "$f"; done
total=$(du -sb .whl | cut -f1)
echo ".whl: $((total / 1024)) KB ($(ls .whl | wc -l) wheels)"
[ "$total" -lt $((7 * 1024 * 1024)) ] || { echo "over 7 MB: with .sgstage (52.5 MB) and the tree it would not fit a device call's 64 MiB" >&2; exit 1; }
