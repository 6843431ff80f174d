"""What the REAL SGLang speculative hook makes of `--speculative-adaptive` (run by hand with the
capture venv's Python, never by CI: it needs sglang and torch installed):

    /tmp/sglang-capture-0.5.23/bin/python scripts/capture/adaptive_capture.py tests/fixtures/sglang/0.5.23

Writes adaptive_resolution.json: for each case, the argv tail, the effective [steps, topk, draft
tokens] and whether adaptive stays on, or the error the hook raised, and the WARNINGs it logged.
The simulator's `resolve_speculative` is held to it (tests/test_adaptive_fidelity.py).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _torchvision_stand_in  # noqa: E402,F401  (see its docstring)

import sglang  # noqa: E402
import sglang.srt.arg_groups.speculative_hook as hook  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402

CONFIG = {"1": {"candidate_steps": [3, 5]}, "32": {"candidate_steps": [2]}}
CASES = {
    "all three, steps a candidate": ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                                     "--speculative-num-draft-tokens", "4"],
    "none set": [],
    "steps not a candidate": ["--speculative-num-steps", "4", "--speculative-eagle-topk", "1",
                              "--speculative-num-draft-tokens", "5"],
    "topk 4": ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"],
    "draft tokens other than steps + 1": ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                                          "--speculative-num-draft-tokens", "9"],
}


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def main(out_dir: str) -> None:
    hook.model_config_of = lambda sa: types.SimpleNamespace(
        hf_config=types.SimpleNamespace(architectures=["LlamaForCausalLM"]))
    cap = _Capture()
    logging.getLogger("sglang").addHandler(cap)
    logging.getLogger("sglang").setLevel(logging.WARNING)
    p = argparse.ArgumentParser()
    ServerArgs.add_cli_args(p)
    tmp = Path(tempfile.mkdtemp(prefix="adaptive-capture-"))
    for name, arch in (("target", "LlamaForCausalLM"), ("draft", "LlamaForCausalLMEagle3")):
        (tmp / name).mkdir()
        (tmp / name / "config.json").write_text(json.dumps({"architectures": [arch], "num_hidden_layers": 8,
                                                            "hidden_size": 64, "num_attention_heads": 4,
                                                            "vocab_size": 1000, "model_type": "llama"}))
    cfg = tmp / "adaptive.json"
    cfg.write_text(json.dumps(CONFIG))
    rows = {}
    for name, extra in CASES.items():
        argv = ["--model-path", str(tmp / "target"), "--speculative-algorithm", "EAGLE3",
                "--speculative-draft-model-path", str(tmp / "draft"), "--page-size", "1",
                "--speculative-adaptive", "--speculative-adaptive-config", str(cfg), *extra]
        sa = ServerArgs.from_cli_args(p.parse_args(argv))
        cap.lines.clear()
        try:
            hook.handle_speculative_decoding(sa)
            d = sa.resolved_dict()
            rows[name] = {"args": extra, "effective": [d["speculative_num_steps"], d["speculative_eagle_topk"],
                                                       d["speculative_num_draft_tokens"]],
                          "adaptive": d["speculative_adaptive"], "error": None, "warnings": list(cap.lines)}
        except Exception as e:   # what the real hook refuses, in its own words
            rows[name] = {"args": extra, "effective": None, "adaptive": None, "error": f"{type(e).__name__}: {e}",
                          "warnings": list(cap.lines)}
    doc = {"sglang": sglang.__version__, "hook": "sglang/srt/arg_groups/speculative_hook.py:handle_speculative_decoding",
           "config": CONFIG, "cases": rows}
    (Path(out_dir) / "adaptive_resolution.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
