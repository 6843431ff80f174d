#!/usr/bin/env bash
# The GPU suite (tests/gpu) with a REAL SGLang 0.5.17, in ONE device call, on the GPU test machine
# (one H200, Python 3.12, torch 2.11, no package registry), from the repo root:
#     bash scripts/gpu/real-sglang.sh
# with, carried along (git-ignored; see docs/gpu-validation.md for the exact device call):
#   .sgstage/  the staged tree: ../shared/sglang-gpu/sg1 and sg_stage.sh (52.5 MB, one xz chunk)
#   .whl/      the project's wheel and the runtime wheels the machine lacks (scripts/gpu/wheels.sh)
# It unpacks SGLang into /tmp/site and the tiny dummy-weight model into /tmp/sgmodel (sg_stage.sh),
# writes /tmp/sgpy (that tree ALONE on the path), installs the bot into its own /tmp/botsite (never
# /tmp/site: the bot and the GPU host's SGLang do not share a site folder), runs the suite as ONE
# pytest invocation, and leaves the GPU free. In $OUT: gpu-suite.log (pytest -v, unbuffered),
# real-sglang.json (what the real-SGLang sequence measured), real-sglang.db (its audit trail),
# server-logs.tgz (every SGLang log of the run), steps.log (this script's steps and times),
# nvidia-smi.txt (the GPU before and after). EAGLE_GPU_STAGE_ONLY=1: staging alone (steps 1-2), for
# scripts/gpu/real-tune.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/eagle-gpu-out}
mkdir -p "$OUT"
export OUT
T0=$SECONDS
say() { echo "[real-sglang $(date -u +%H:%M:%S) +$((SECONDS - T0))s] $*" | tee -a "$OUT/steps.log" >&2; }
SUITE_LIMIT_S=${EAGLE_GPU_SUITE_LIMIT_S:-565}   # the device call has 600 s: staging (~16 s), the 10 s grace and cleanup fit the rest
# EAGLE_GPU_TESTS: what pytest runs (default the whole of tests/gpu; e.g. one module to re-run it alone)
GPU_TESTS=${EAGLE_GPU_TESTS:-tests/gpu}
SITE=/tmp/site BOT=/tmp/botsite PYC=/tmp/sgpyc

nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv > "$OUT/nvidia-smi.txt" 2>&1

# -- 1. the real SGLang tree and the model (sg_stage.sh: verify the chunk, unpack, copy the model)
[ -f .sgstage/sg_stage.sh ] && [ -d .sgstage/sg1 ] || {
  say "no .sgstage/: copy ../shared/sglang-gpu/sg1 and sg_stage.sh into .sgstage/ and carry it"; exit 2; }
[ -d .whl ] && ls .whl/eaglebot-*.whl >/dev/null 2>&1 || { say "no .whl/ with eaglebot's wheel: run scripts/gpu/wheels.sh"; exit 2; }
[ "$(cat .whl/SOURCE.sha256 2>/dev/null)" = "$(python3 scripts/gpu/source_hash.py)" ] \
  || { say ".whl/'s eaglebot wheel was built from other sources than this tree: run scripts/gpu/wheels.sh"; exit 2; }
bash .sgstage/sg_stage.sh gpu-stage 1 && bash .sgstage/sg_stage.sh gpu-install || { say "staging failed"; exit 3; }
# The model's tokenizer may travel xz-compressed (2.2 MB -> ~0.5 MB: the call's 64 MiB carry limit):
#     xz -9 .sgstage/sg1/model/target/tokenizer.json
tok=/tmp/sgmodel/target/tokenizer.json
if [ ! -f "$tok" ] && [ -f "$tok.xz" ]; then
  python3 -c 'import lzma, sys; open(sys.argv[1], "wb").write(lzma.open(sys.argv[1] + ".xz").read())' "$tok" \
    || { say "unpacking $tok.xz failed"; exit 3; }
fi
say "SGLang tree in $SITE ($(du -sh $SITE | cut -f1)), model in /tmp/sgmodel"

# Bytecode once, in parallel, under a prefix of its own: the machine's Python writes none
# (every sglang process would compile ~3,000 files again), and relaunch's pycache.clear, which
# clears sglang's own __pycache__ on every relaunch, leaves a prefix alone.
PY3=$(python3 -c 'import sys; print(sys.executable)')   # the interpreter itself, not a shim
torch_dir=$("$PY3" -c 'import importlib.util as u; s = u.find_spec("torch"); print(s.submodule_search_locations[0] if s else "")')
PYTHONPYCACHEPREFIX=$PYC "$PY3" -m compileall -q -j 0 "$SITE" ${torch_dir:+"$torch_dir"} > /dev/null 2>&1
say "bytecode compiled into $PYC ($(du -sh $PYC 2>/dev/null | cut -f1))"

# The host var `python` of the tests: the staged tree alone on the path, offline, and the
# environment sg_stage.sh gives its own server (caches of compiled kernels, NVLink multicast off).
ninja_bin=$("$PY3" -c 'import ninja, sys; sys.stdout.write(ninja.BIN_DIR)' 2>/dev/null || true)
cat > /tmp/sgpy <<EOF
#!/bin/sh
# The GPU host's SGLang 0.5.17 (scripts/gpu/real-sglang.sh): the staged tree alone on the path.
export PYTHONPATH=$SITE PYTHONPYCACHEPREFIX=$PYC
unset PYTHONDONTWRITEBYTECODE
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_HOME=\${CUDA_HOME:-/usr/local/cuda} PATH=${ninja_bin:+$ninja_bin:}\$PATH:/usr/local/cuda/bin
export TVM_FFI_CACHE_DIR=/tmp/sgcache/tvm-ffi TRITON_CACHE_DIR=/tmp/sgcache/triton SGLANG_CACHE_DIR=/tmp/sgcache/sglang
exec $PY3 "\$@"
EOF
chmod 755 /tmp/sgpy
mkdir -p /tmp/sgcache
/tmp/sgpy -c 'import importlib.metadata as m; print("sglang", m.version("sglang"))' | tee -a "$OUT/steps.log" \
  || { say "/tmp/sgpy does not find sglang"; exit 3; }

# -- 2. the bot, in a folder of its own: its wheels, and the ones the staged tree has at the same
# versions (pydantic, pydantic-core, ...; scripts/gpu/wheels.sh leaves them out of .whl)
rm -rf "$BOT" && mkdir -p "$BOT"
"$PY3" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$BOT" .whl/*.whl \
  || { say "installing .whl/ failed"; exit 3; }
# Every file each one's RECORD lists (cffi's C part is a top-level _cffi_backend*.so, not in cffi/).
"$PY3" - "$SITE" "$BOT" pydantic pydantic_core annotated_types typing_inspection cffi pycparser <<'PY' \
  || { say "copying from the staged tree failed"; exit 3; }
import csv, pathlib, shutil, sys
site, bot = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for name in sys.argv[3:]:
    infos = sorted(site.glob(f"{name}-*.dist-info"))
    if not infos:
        sys.exit(f"the staged tree has no {name}: build .whl with it (take it out of TREE in scripts/gpu/wheels.sh)")
    with (infos[0] / "RECORD").open() as f:
        files = [row[0] for row in csv.reader(f) if row and not row[0].startswith("..")]
    for rel in files:
        if (site / rel).is_file():   # the pruned tree has no bin/ and no __pycache__
            (bot / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(site / rel, bot / rel)
    print(f"{infos[0].name}: {len(files)} files from {site}")
PY
"$PY3" -m compileall -q -j 0 "$BOT" > /dev/null 2>&1
export PYTHONPATH=$BOT
"$PY3" -c 'import eaglebot, pydantic, asyncssh, pytest_asyncio; print("eaglebot from", eaglebot.__file__, "pydantic",
pydantic.VERSION)' | tee -a "$OUT/steps.log" || { say "the bot does not import from $BOT"; exit 3; }
say "bot installed into $BOT"
# scripts/gpu/real-tune.sh stages the same way, then runs its own tuning instead of the suite.
[ "${EAGLE_GPU_STAGE_ONLY:-}" = 1 ] && { say "staged (EAGLE_GPU_STAGE_ONLY=1): no suite"; exit 0; }

# -- 3. the GPU suite, ONE invocation. SIGINT at the limit lets pytest tear its fixtures down (the
# real-SGLang module stops its servers there); what is left is stopped below.
# ISSUE 31 (draft-contract gate): once merged, its static check and runtime probe run inside this
# invocation (tests/gpu/test_real_sglang.py, draft_gate()); nothing to add here.
say "pytest $GPU_TESTS (limit ${SUITE_LIMIT_S}s)"
PYTHONUNBUFFERED=1 EAGLE_GPU_TEST_TIMEOUT_S=${EAGLE_GPU_TEST_TIMEOUT_S:-300} \
  timeout -s INT -k 10 "$SUITE_LIMIT_S" "$PY3" -m pytest -o addopts="" -m gpu $GPU_TESTS -v -p no:cacheprovider \
  2>&1 | tee "$OUT/gpu-suite.log"
rc=${PIPESTATUS[0]}
say "pytest exit $rc: $(grep -E '^(=+ .*(passed|failed|error).* =+)$' "$OUT/gpu-suite.log" | tail -1)"

# -- 4. leave the GPU free: servers our pid files still name, then what nvidia-smi still lists
for f in "$HOME"/.eaglebot/run/server-*.pid; do
  [ -f "$f" ] || continue
  pid=$(head -c 20 "$f" | tr -dc 0-9)
  if [ -n "$pid" ] && grep -q sglang "/proc/$pid/cmdline" 2>/dev/null; then
    say "leftover server session $pid ($f): killed"; kill -KILL -- "-$pid" 2>/dev/null
  fi
done
for _ in $(seq 60); do
  pids=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -dc '0-9\n')
  [ -z "$pids" ] && break
  for pid in $pids; do
    [ "$pid" -gt 1 ] 2>/dev/null && [ "$pid" != "$$" ] || continue   # never 0 (the whole group) or 1
    say "GPU still held by pid $pid ($(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)): killed"
    kill -KILL "$pid" 2>/dev/null
  done
  sleep 1
done
{ echo "== after"; nvidia-smi --query-gpu=index,memory.used --format=csv; } >> "$OUT/nvidia-smi.txt" 2>&1
tar -C "$HOME/.eaglebot" -czf "$OUT/server-logs.tgz" logs 2>/dev/null || true
say "done: GPU memory $(nvidia-smi --query-gpu=memory.used --format=csv,noheader | tr '\n' ' ')"
exit "$rc"
