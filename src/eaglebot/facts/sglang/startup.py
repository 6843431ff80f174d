"""Where an SGLang start-up is, from its log, and what to try when it stalls or dies (pure).

Start-up phases in the log (SGLang 0.5.17 and 0.5.23, REFERENCE.md), in order: torch distributed / NCCL
init, loading weights, KV cache allocation, capturing CUDA graphs, the HTTP server up and
warming up, then "The server is fired up and ready to roll!". A hang is most often in CUDA
graph capture or NCCL init (SGLang issues #3547, #4007, #4417).
"""
from __future__ import annotations

import re

from eaglebot.facts.sglang.release import READY_LINE

# (line fragment, phase the server is in AFTER that line), in start-up order.
PHASES: list[tuple[str, str]] = [
    ("server_args=ServerArgs(", "starting the scheduler processes"),
    ("Init torch distributed begin", "NCCL init (torch distributed)"),
    ("Init torch distributed ends", "preparing to load weights"),
    ("Load weight begin", "loading weights"),
    ("Load weight end", "allocating the KV cache"),
    ("KV Cache is allocated", "preparing CUDA graphs"),
    # 0.5.23: "Capture target verify CUDA graph begin. ..." (cuda_graph_setup.py:759, and :685 for
    # prefill, eagle_worker_v2.py:515 for the draft; tests/fixtures/sglang/0.5.23/log_lines.json)
    (" CUDA graph begin", "capturing CUDA graphs"),
    (" CUDA graph end", "starting the HTTP server"),
    ("Uvicorn running on", "warming up (HTTP up, /health not yet 200)"),
    (READY_LINE, "ready"),
]
NCCL_LINE = re.compile(r"\bNCCL (INFO|WARN)\b|ncclUniqueId|init_process_group", re.IGNORECASE)


def phase(log_text: str) -> str:
    """The phase the last recognised log line puts the server in ("launching" before any)."""
    current = "launching (no SGLang log line yet)"
    for line in log_text.splitlines():
        for fragment, name in PHASES:
            if fragment in line:
                current = name
    return current


OOM = ("torch.OutOfMemoryError", "CUDA out of memory", "CUDA error: out of memory")
NOT_ENOUGH = ("Not enough memory. Please try to increase --mem-fraction-static",
              # 0.5.17 and 0.5.23, when the weights alone exceed the budget (kv_cache_configurator.py)
              "Loaded weights leave no GPU memory for the KV cache")


def hints(log_text: str, current: str, *, stalled: bool) -> list[str]:
    """What to try, for known fatal messages and for a stall in a known phase."""
    out: list[str] = []
    if any(m in log_text for m in NOT_ENOUGH):
        out.append("the weights leave too little memory for the KV cache: INCREASE --mem-fraction-static "
                   "(mem_fraction), or use more GPUs (tp) or a smaller model")
    elif any(m in log_text for m in OOM):
        out.append("CUDA ran out of memory outside the KV cache pool (activations, CUDA graphs): DECREASE "
                   "--mem-fraction-static (e.g. 0.85 -> 0.8), or lower --cuda-graph-max-bs-decode")
    if "capturing CUDA graphs" in current or "Capture cuda graph failed" in log_text:
        out.append("the start-up stopped in CUDA graph capture: relaunch with --disable-cuda-graph to confirm, "
                   "or a smaller --cuda-graph-max-bs-decode")
    if "NCCL" in current or (stalled and NCCL_LINE.search(log_text)):
        out.append("the start-up stopped in NCCL init: set env NCCL_P2P_DISABLE=1 to rule out P2P/NVLink, and "
                   "NCCL_DEBUG=INFO to see where it waits")
    if stalled and current == "loading weights":
        out.append("loading weights made no progress: check the model folder's disk (a network file system or a "
                   "cold cache can take minutes; raise stall_s if so)")
    return out
