#!/usr/bin/env bash
# Capture SGLang facts from the REAL package into tests/fixtures/sglang/<version>/.
# Run by hand, never by CI: it installs sglang (and CPU torch) into a throwaway venv (~3 GB).
#   scripts/capture/sglang.sh [VERSION] [VENV]
set -euo pipefail
VERSION=${1:-0.5.23}
VENV=${2:-/tmp/sglang-capture-$VERSION}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=$ROOT/tests/fixtures/sglang/$VERSION
MODELS=$(mktemp -d)
trap 'rm -rf "$MODELS"' EXIT

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  # CPU torch (no CUDA libraries); sglang itself without its GPU kernels (flashinfer, sglang-kernel...),
  # then the pure-Python packages its argument parser, hooks and benchmark import.
  "$VENV/bin/pip" install -q "torch==2.13.0+cpu" --find-links /opt/wheels \
    || "$VENV/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu
  "$VENV/bin/pip" install -q --no-deps "sglang==$VERSION"
  "$VENV/bin/pip" install -q transformers==5.19.0 tokenizers==0.23.2 numpy aiohttp requests tqdm fastapi \
    uvicorn orjson psutil packaging pybase64 msgspec pydantic pyzmq setproctitle uvloop regex pillow \
    python-multipart prometheus-client partial_json_parser interegular einops triton IPython dill \
    sentencepiece==0.2.1 zstandard datasets apache-tvm-ffi==0.1.11 compressed_tensors gguf
fi

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
# The argparse errors a launch gets, exactly as SGLang's own parser prints them (exit 2).
for argv in "--cuda-graph-bs 1 2 4" "--cuda-graph-max-bs 8" "--no-such-flag 1" "--tp-size two"; do
  name=$(echo "$argv" | awk '{print $1}' | tr -d '-')
  # shellcheck disable=SC2086
  (cd "$MODELS" && "$VENV/bin/python" -c 'import argparse,sys
sys.path.insert(0, sys.argv[1]); import _torchvision_stand_in
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(prog="launch_server.py"); ServerArgs.add_cli_args(p)
p.parse_args(sys.argv[2:])' "$HERE" --model-path "$MODELS/target" $argv) > /dev/null 2> "$MODELS/err" \
    && { echo "expected an argparse error for $argv" >&2; exit 1; } || rc=$?
  # The usage block before it is ~1,800 lines; the error line is what a user reads.
  { echo "argv: $argv"; tail -n 1 "$MODELS/err"; echo "exit $rc"; } > "$OUT/argparse-error-$name.txt"
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
EAGLE_SIM_STATE="$MODELS/gpu-state" EAGLE_SIM_LOAD_S=0.05 EAGLE_SIM_WARMUP_S=0.05 \
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
echo "python -m sglang.bench_serving ${BENCH[*]}" | sed "s#$MODELS#MODELS#g; s#$OUT/##g" > "$OUT/bench_serving_command.txt"
echo "wrote $OUT"
