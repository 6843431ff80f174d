#!/usr/bin/env bash
# Capture SGLang facts from the REAL package into tests/fixtures/sglang/<version>/.
# Run by hand, never by CI: it installs sglang (and CPU torch) into a throwaway venv (~3 GB).
#   scripts/capture/sglang.sh [VERSION] [VENV]        # e.g. 0.5.17 /tmp/sglang-capture-0.5.17
# Version-aware: the pure-Python dependencies at the versions that sglang release pins, the capture
# code asks each release's hooks in their own shape, and the simulated server the benchmark runs
# against speaks that release (EAGLE_SIM_SGLANG_VERSION).
set -euo pipefail
VERSION=${1:-0.5.23}
VENV=${2:-/tmp/sglang-capture-$VERSION}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=$ROOT/tests/fixtures/sglang/$VERSION
MODELS=$(mktemp -d)
trap 'rm -rf "$MODELS"' EXIT

# The pure-Python packages sglang's parser, hooks and benchmark import (sglang itself goes in with
# --no-deps: no GPU kernel package, flashinfer, sglang-kernel..., is installed).
PURE="transformers tokenizers numpy aiohttp requests tqdm fastapi uvicorn orjson psutil packaging pybase64 msgspec
pydantic pyzmq setproctitle uvloop regex pillow python-multipart prometheus-client partial_json_parser interegular
einops triton IPython dill sentencepiece zstandard datasets apache-tvm-ffi compressed_tensors gguf"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  # CPU torch (no CUDA libraries): the parser and hooks never touch a GPU.
  "$VENV/bin/pip" install -q "torch==2.13.0+cpu" --find-links /opt/wheels \
    || "$VENV/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu
  "$VENV/bin/pip" install -q --no-deps "sglang==$VERSION"
fi
[ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))')" = "$VERSION" ] \
  || { echo "$VENV holds another sglang than $VERSION" >&2; exit 2; }
# Version-aware: each package at the exact version THIS sglang's METADATA pins (0.5.17 pins
# transformers==5.12.1, 0.5.23 transformers==5.19.0 and tokenizers==0.23.2), else the newest;
# a reused venv is brought to those pins too (a newer transformers breaks an older sglang's imports).
mapfile -t REQS < <("$VENV/bin/python" - $PURE <<'PY'
import importlib.metadata as m, re, sys
pins = {}
for r in m.requires("sglang") or []:
    if "extra ==" in r:
        continue
    g = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?\s*==\s*([^;\s,]+)\s*(;.*)?$", r)
    if g and not g.group(3):
        pins[re.sub(r"[-_.]+", "-", g.group(1)).lower()] = g.group(2)
for name in sys.argv[1:]:
    key = re.sub(r"[-_.]+", "-", name).lower()
    print(f"{name}=={pins[key]}" if key in pins else name)
PY
)
"$VENV/bin/pip" install -q "${REQS[@]}"
echo "capture venv: sglang $VERSION with $("$VENV/bin/python" -c 'import transformers, tokenizers, torch
print("transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "torch", torch.__version__)')"

# Two local model folders (config.json only): the hooks read the target's architecture.
mkdir -p "$MODELS/target" "$MODELS/draft"
cat > "$MODELS/target/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
 "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": 1000,
 "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}
JSON
cat > "$MODELS/draft/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
 "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1, "vocab_size": 1000,
 "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16",
 "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3], "use_aux_hidden_state": true}}
JSON

mkdir -p "$OUT"
(cd "$MODELS" && "$VENV/bin/python" "$HERE/sglang_capture.py" "$OUT" "$MODELS")
# The launch table's two copies, byte for byte: the simulator's parser of this release and the launch
# check's fallback when a host's own SGLang cannot be asked (tests/test_sglang_fidelity.py keeps them so).
cp "$OUT/server_args.json.gz" "$ROOT/bot/sim/sglang_pkg/sglang/srt/server_args-$VERSION.json.gz"
cp "$OUT/server_args.json.gz" "$ROOT/bot/facts/data/sglang-$VERSION-server_args.json.gz"
# What the real launch parser says to flags users get wrong, exactly (its last line and exit status):
# 0.5.23 refuses all four (exit 2); 0.5.17 still has --cuda-graph-bs and --cuda-graph-max-bs (accepted, exit 0).
rm -f "$OUT"/argparse-*.txt
for argv in "--cuda-graph-bs 1 2 4" "--cuda-graph-max-bs 8" "--no-such-flag 1" "--tp-size two"; do
  name=$(echo "$argv" | awk '{print $1}' | tr -d '-')
  rc=0
  # shellcheck disable=SC2086
  (cd "$MODELS" && "$VENV/bin/python" -c 'import argparse,sys
sys.path.insert(0, sys.argv[1]); import _torchvision_stand_in
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(prog="launch_server.py"); ServerArgs.add_cli_args(p)
p.parse_args(sys.argv[2:]); print("accepted")' "$HERE" --model-path "$MODELS/target" $argv) > "$MODELS/out" 2> "$MODELS/err" \
    || rc=$?
  # The usage block before an error is ~1,800 lines; the error line is what a user reads.
  if [ "$rc" = 0 ]; then last=$(tail -n 1 "$MODELS/out"); else last=$(tail -n 1 "$MODELS/err"); fi
  { echo "argv: $argv"; echo "$last"; echo "exit $rc"; } > "$OUT/argparse-$name.txt"
done
# A real `python -m sglang.bench_serving` against eaglebot's SIMULATED server (no GPU here): its JSONL
# record and its stdout, byte for byte. The tokenizer is built locally (tokenizers API, no hub).
"$VENV/bin/python" - "$MODELS/tok" <<'PY'
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {f"w{i}": i for i in range(1000)} | {"<unk>": 1000, "<s>": 1001, "</s>": 1002}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>").save_pretrained(sys.argv[1])
PY
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
EAGLE_SIM_SGLANG_VERSION="$VERSION" EAGLE_SIM_STATE="$MODELS/gpu-state" EAGLE_SIM_LOAD_S=0.05 EAGLE_SIM_WARMUP_S=0.05 \
  PYTHONPATH="$ROOT/bot/sim/sglang_pkg" setsid python3 -m sglang.launch_server --model-path "$MODELS/target" \
  --speculative-algorithm EAGLE3 --speculative-draft-model-path "$MODELS/draft" --speculative-num-steps 3 \
  --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --port "$PORT" > "$MODELS/server.log" 2>&1 &
SERVER=$!
trap 'kill -- -$SERVER 2>/dev/null; rm -rf "$MODELS"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 0.1; done
rm -f "$OUT/bench_serving.jsonl"
BENCH=(--backend sglang --base-url "http://127.0.0.1:$PORT" --dataset-name random-ids --random-input-len 128
       --random-output-len 32 --random-range-ratio 1.0 --num-prompts 8 --max-concurrency 4 --flush-cache
       --tokenizer "$MODELS/tok" --disable-stream --output-file "$OUT/bench_serving.jsonl")
(cd "$MODELS" && HF_HUB_OFFLINE=1 "$VENV/bin/python" -c 'import sys, runpy
sys.path.insert(0, sys.argv.pop(1)); import _torchvision_stand_in
sys.argv[0] = "bench_serving"; runpy.run_module("sglang.bench_serving", run_name="__main__")' "$HERE" "${BENCH[@]}") \
  > "$OUT/bench_serving_stdout.txt" 2> "$MODELS/bench.err" || { cat "$MODELS/bench.err" >&2; exit 1; }
[ -s "$OUT/bench_serving.jsonl" ] || { tail -5 "$OUT/bench_serving_stdout.txt" "$MODELS/server.log" >&2; \
  echo "bench_serving wrote no JSONL record" >&2; exit 1; }
echo "python -m sglang.bench_serving ${BENCH[*]}" | sed "s#$MODELS#MODELS#g; s#$OUT/##g" > "$OUT/bench_serving_command.txt"
echo "wrote $OUT"
