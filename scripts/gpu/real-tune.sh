#!/usr/bin/env bash
# One REAL `eagle tune` (issue 32) against SGLang 0.5.17 on the GPU test machine (one H200), with the
# tiny dummy-weight Llama and its EAGLE-3 draft, over the local transport, in ONE device call:
#     bash scripts/gpu/real-tune.sh
# carrying .sgstage/ and .whl/ as for scripts/gpu/real-sglang.sh (docs/gpu-validation.md), which it
# runs for the staging alone (EAGLE_GPU_STAGE_ONLY=1: the SGLang tree in /tmp/site, /tmp/sgpy, the
# bot in /tmp/botsite). Here, the SAME `eagle tune` command line against the SIMULATED SGLang 0.5.17:
#     EAGLE_REAL_TUNE_SIM=1 bash scripts/gpu/real-tune.sh      # uses .venv/bin/python (scripts/test.sh)
# so the only difference on the GPU is the server.
#
# The tuning: batch sizes 1 and 4, chains of 1-4 steps (topk 1), a budget of 5 launches and 300 s of
# the tuner's own clock (the search stops before a launch that would not fit: a cold first launch
# takes ~2-3 minutes with its pre-flight and benchmark, a warm one ~1.5), one repeat, short prompts.
# Acceptance: random weights accept nothing (accept length 1.00: every chain then predicts and
# measures alike), so by default the servers run with SGLANG_SIMULATE_ACC_LEN=2.5 (SGLang's own knob,
# `match-expected`: each verify accepts 1 or 2 drafts, never more than the chain has), which gives the
# tuner an acceptance by position to profile and predict from; EAGLE_REAL_TUNE_ACC= (empty) tunes the
# dummy weights' own ~1.00 instead. The numbers are about the mechanism, not a model.
#
# Bounded: everything (staging, the tuning, collecting, cleanup) ends within EAGLE_REAL_TUNE_LIMIT_S
# (540 s): the tuning gets what the staging left less 45 s, and is interrupted (SIGINT, then SIGKILL
# 20 s later) at its limit; what it had is collected either way. In $OUT: tune.json (`eagle tune
# --json`; absent when the tuning was cut), tune.log (its progress on stderr), tune.png (the Pareto
# plot), show.txt and show.json (`eagle show` of the tuning run: every cell measured), history.json,
# real-tune.db (the audit trail), server-logs.tgz, steps.log, nvidia-smi.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/eagle-tune-out}
mkdir -p "$OUT"
export OUT
T0=$SECONDS
LIMIT_S=${EAGLE_REAL_TUNE_LIMIT_S:-540}
SIM=${EAGLE_REAL_TUNE_SIM:-0}
ACC=${EAGLE_REAL_TUNE_ACC-2.5}
PORT=${EAGLE_REAL_TUNE_PORT:-31000}
WORK=${EAGLE_REAL_TUNE_WORK:-/tmp/eagle-real-tune}
say() { echo "[real-tune $(date -u +%H:%M:%S) +$((SECONDS - T0))s] $*" | tee -a "$OUT/steps.log" >&2; }
left() { echo $((LIMIT_S - (SECONDS - T0))); }

# -- the tuning, the same command line in both modes
TUNE=(tune relaunch -H gpu --batch-sizes 1,4 --steps 1-4 --topk 1 --max-launches 5 --budget 300s
      --repeats 1 --prompts 4 --input-len 128 --output-len 32 --flap-trace 1:15,4:15 --flap-settle 3
      -e ready_timeout_s=300 --out "$OUT/tune.png" --json)
[ -n "$ACC" ] && TUNE+=(-e "env={\"SGLANG_SIMULATE_ACC_LEN\": \"$ACC\"}")

rm -rf "$WORK" && mkdir -p "$WORK"
if [ "$SIM" = 1 ]; then
  PY=${PYTHON:-$PWD/.venv/bin/python}
  [ -x "$PY" ] || { say "no $PY: run scripts/test.sh once (it makes .venv), or set PYTHON"; exit 2; }
  STATE=$WORK/state    # here the default ~/.eaglebot may be another checkout's: the simulated run keeps its own
  # The simulated SGLang 0.5.17 and nvidia-smi, and model folders with the staged tiny model's config.json
  # (its size and layers: what the simulator sizes and checks).
  "$PY" - "$WORK" > "$WORK/hostvars.json" <<'PY' || { say "installing the simulator failed"; exit 3; }
import json, pathlib, sys
from eaglebot.sim import gpu_state, install_sim_bin
work = pathlib.Path(sys.argv[1])
tools = install_sim_bin(work / "sim-bin", work / "sim-state", version="0.5.17")
gpu_state.init_state(work / "sim-state", 1)
target = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
          "intermediate_size": 2816, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2,
          "head_dim": 128, "vocab_size": 32000, "torch_dtype": "bfloat16", "max_position_embeddings": 8192}
draft = {**target, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "draft_vocab_size": 32000,
         "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "use_aux_hidden_state": True}}
for name, cfg in (("target", target), ("draft", draft)):
    (work / "models" / name).mkdir(parents=True)
    (work / "models" / name / "config.json").write_text(json.dumps(cfg, indent=1))
print(json.dumps({"python": tools["python"], "nvidia_smi": tools["nvidia_smi"], "dmesg": tools["dmesg"],
                  "model": str(work / "models/target"), "draft": str(work / "models/draft")}))
PY
  export EAGLE_SIM_STATE=$WORK/sim-state
  say "SIMULATED SGLang 0.5.17 in $WORK/sim-bin"
else
  PY=$(python3 -c 'import sys; print(sys.executable)')
  STATE=$HOME/.eaglebot    # the default state_dir, as a new user has it
  EAGLE_GPU_STAGE_ONLY=1 bash scripts/gpu/real-sglang.sh || { say "staging failed (scripts/gpu/real-sglang.sh)"; exit 3; }
  export PYTHONPATH=/tmp/botsite
  printf '{"python": "/tmp/sgpy", "model": "/tmp/sgmodel/target", "draft": "/tmp/sgmodel/draft"}\n' > "$WORK/hostvars.json"
fi

# eagle.yaml: one host over the local transport; the staged tree's launch flags (no CUDA graphs, no FA3).
"$PY" - "$WORK" "$PORT" "$SIM" <<'PY' || { say "writing eagle.yaml failed"; exit 3; }
import json, pathlib, sys
import yaml
work, port, sim = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
hv = json.loads((work / "hostvars.json").read_text())
hv.update(port=port, extra_args=["--load-format", "dummy", "--attention-backend", "triton", "--sampling-backend",
                                 "pytorch", "--disable-cuda-graph", "--dtype", "bfloat16"])
cfg = {"audit_db": str(work / "eagle.db"), "hosts": {"gpu": {"transport": "local", "vars": hv}}}
if sim:
    cfg["state_dir"] = str(work / "state")
(work / "eagle.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
PY
eagle() { timeout 30 "$PY" -m eaglebot --config "$WORK/eagle.yaml" "$@"; }

budget=$(( $(left) - 45 ))
[ "$budget" -ge 60 ] || { say "only ${budget}s left for the tuning after the staging: not started"; exit 3; }
say "eagle ${TUNE[*]} (limit ${budget}s)"
( cd "$WORK" && PYTHONUNBUFFERED=1 timeout -s INT -k 20 "$budget" "$PY" -m eaglebot --config "$WORK/eagle.yaml" \
    "${TUNE[@]}" > "$OUT/tune.json.part" 2> "$OUT/tune.log" )
rc=$?
if [ -s "$OUT/tune.json.part" ] && "$PY" -c 'import json,sys; json.load(open(sys.argv[1]))' "$OUT/tune.json.part" 2>/dev/null; then
  mv "$OUT/tune.json.part" "$OUT/tune.json"
elif [ ! -s "$OUT/tune.json.part" ]; then
  rm -f "$OUT/tune.json.part"     # cut before it printed: the audit trail (show.json) has what it did
fi
case $rc in
  124|130|137) say "eagle tune cut at its limit (exit $rc): collecting what the audit trail has" ;;
  *) say "eagle tune exit $rc" ;;
esac

# -- what was recorded: the tuning run (its id from tune.json, else the newest `tune` run)
eagle history --playbook tune --json > "$OUT/history.json" 2>> "$OUT/tune.log"
run_id=$("$PY" - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
try:
    print(json.loads((out / "tune.json").read_text())["run_id"])
except (OSError, ValueError, KeyError):
    try:
        print(json.loads((out / "history.json").read_text())[0]["run_id"])
    except (OSError, ValueError, KeyError, IndexError):
        pass
PY
)
if [ -n "$run_id" ]; then
  eagle show "$run_id" > "$OUT/show.txt" 2>&1
  eagle show "$run_id" --json > "$OUT/show.json" 2>> "$OUT/tune.log"
  say "tuning run #$run_id: $(grep -c '' "$OUT/show.txt") lines of eagle show; plot $( [ -s "$OUT/tune.png" ] && echo written || echo absent)"
else
  say "no tuning run in the audit trail"
fi
timeout 30 "$PY" - "$WORK/eagle.db" "$OUT/real-tune.db" <<'PY' 2>> "$OUT/tune.log" || cp "$WORK/eagle.db" "$OUT/real-tune.db" 2>/dev/null
import sqlite3, sys
src, dst = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
src.backup(dst)   # one consistent file, whatever a cut run left in the WAL
dst.close()
PY

# -- leave the host as found: the servers our pid files name, then (real GPU) what nvidia-smi lists
for f in "$STATE"/run/server-*.pid; do
  [ -f "$f" ] || continue
  pid=$(head -c 20 "$f" | tr -dc 0-9)
  if [ -n "$pid" ] && grep -q sglang "/proc/$pid/cmdline" 2>/dev/null; then
    say "server session $pid ($f): stopped"; kill -KILL -- "-$pid" 2>/dev/null
  fi
done
if [ "$SIM" != 1 ]; then
  for _ in $(seq 20); do
    pids=$(timeout 10 nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -dc '0-9\n')
    [ -z "$pids" ] && break
    for pid in $pids; do
      [ "$pid" -gt 1 ] 2>/dev/null && [ "$pid" != "$$" ] || continue   # never 0 (the whole group) or 1
      say "GPU still held by pid $pid ($(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)): killed"
      kill -KILL "$pid" 2>/dev/null
    done
    sleep 1
  done
  { echo "== after"; timeout 10 nvidia-smi --query-gpu=index,memory.used --format=csv; } >> "$OUT/nvidia-smi.txt" 2>&1
fi
tar -C "$STATE" -czf "$OUT/server-logs.tgz" logs 2>/dev/null || true
say "done in $((SECONDS - T0))s (limit ${LIMIT_S}s)"
exit "$rc"
