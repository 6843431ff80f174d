"""SIMULATED SGLang internals shared by the fake launch_server and its scheduler child.

Stand-alone (standard library only): it runs on the GPU host with whatever Python is
there. The speculative-arg resolution mirrors SGLang 0.5.23 (and eaglebot's
skills/_sglang.py; a test keeps them in agreement). Performance numbers are a
deterministic model, not a measurement.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO


if TYPE_CHECKING:  # mypy checks this package as eaglebot.sim.sglang_pkg.sglang; it runs as `sglang`
    from . import _draft_fit, _perf_model
else:
    def _sibling(name: str) -> ModuleType:
        # By path: this file also runs loaded on its own (tests, the fake nvidia-smi's helpers).
        full = f"sglang.{name}" if __name__.startswith("sglang") else f"{__name__}_{name}"
        if full in sys.modules:
            return sys.modules[full]
        spec = importlib.util.spec_from_file_location(full, Path(__file__).with_name(f"{name}.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[full] = mod  # dataclasses look their module up here
        spec.loader.exec_module(mod)
        return mod

    _perf_model = _sibling("_perf_model")
    _draft_fit = _sibling("_draft_fit")

# The simulated release (each has a captured launch table, srt/server_args-<v>.json.gz). Read here, not
# from the package: this file also runs loaded on its own by path.
VERSIONS = ("0.5.17", "0.5.23")
VERSION = os.environ.get("EAGLE_SIM_SGLANG_VERSION") or VERSIONS[-1]
if VERSION not in VERSIONS:
    raise SystemExit(f"SIMULATED sglang: no captured table of SGLang {VERSION} "
                     f"(EAGLE_SIM_SGLANG_VERSION; known: {', '.join(VERSIONS)})")
BANNER = (f"SIMULATED SGLang {VERSION} (eaglebot sandbox): no model is loaded and no tokens are generated; "
          "every number this server reports is SIMULATED.")
H200_MIB = 143771
DRAFT_TOKENS_WARNING = ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
                        "when speculative_eagle_topk == 1")
MAX_RUNNING_WARNING = ("Max running requests is reset to 48 for speculative decoding. You can override "
                       "this by explicitly setting --max-running-requests.")


def log(msg: str, rank: str | None = None, stream: TextIO | None = None) -> None:
    ts = time.strftime("%Y-%m-%d %H:%M:%S")
    tag = f"{ts} {rank}" if rank else ts
    out = stream or sys.stdout
    out.write(f"[{tag}] {msg}\n")
    out.flush()


# -- speculative resolution (SGLang 0.5.23 server_args) ------------------------------

def auto_spec_params(architecture: str | None) -> tuple[int, int, int]:
    arch = architecture or ""
    if arch == "LlamaForCausalLM" or arch.startswith("Grok"):
        return 5, 4, 8
    return 3, 1, 4


class SpecError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def resolve_speculative(args: argparse.Namespace, architecture: str | None) -> list[str]:
    """Mutate args like ServerArgs.__post_init__ does; return the WARNING lines it logs."""
    warnings: list[str] = []
    algo = args.speculative_algorithm
    if algo is None:
        return warnings
    algo = algo.upper()
    if algo == "NEXTN":
        algo = "EAGLE"
    args.speculative_algorithm = algo
    if algo not in ("EAGLE", "EAGLE3", "STANDALONE"):
        return warnings
    if args.max_running_requests is None:
        args.max_running_requests = 48
        warnings.append(MAX_RUNNING_WARNING)
    if args.speculative_num_steps is None:
        if args.speculative_eagle_topk is not None or args.speculative_num_draft_tokens is not None:
            raise SpecError("AssertionError", "")
        (args.speculative_num_steps, args.speculative_eagle_topk,
         args.speculative_num_draft_tokens) = auto_spec_params(architecture)
        return warnings
    if args.speculative_eagle_topk is None:   # speculative_hook.py: `speculative_eagle_topk > 1`
        raise SpecError("TypeError", "'>' not supported between instances of 'NoneType' and 'int'")
    if (args.speculative_eagle_topk == 1
            and args.speculative_num_draft_tokens != args.speculative_num_steps + 1):
        warnings.append(DRAFT_TOKENS_WARNING)
        args.speculative_num_draft_tokens = args.speculative_num_steps + 1
    return warnings


# -- model files ---------------------------------------------------------------------

def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def aux_layer_ids(draft_config: dict[str, Any]) -> list[int] | None:
    """EAGLE-3 capture layers: only the NESTED key counts (a top-level one is ignored)."""
    ec = draft_config.get("eagle_config")
    if isinstance(ec, dict):
        ids = ec.get("eagle_aux_hidden_state_layer_ids")
        if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
            return ids
    return None


def weights_gb(config: dict[str, Any]) -> float:
    """bf16 weights of a Llama-shaped target from its config.json (the staged real model: 0.31 GB, as
    SGLang logged); a config without the sizes counts as a ~2B model."""
    h, inter, vocab, layers = (config.get(k) for k in ("hidden_size", "intermediate_size", "vocab_size",
                                                       "num_hidden_layers"))
    if not all(isinstance(v, int) and v > 0 for v in (h, inter, vocab, layers)):
        return 4.25
    assert isinstance(h, int) and isinstance(inter, int) and isinstance(vocab, int) and isinstance(layers, int)
    heads, kv = config.get("num_attention_heads") or 1, config.get("num_key_value_heads") or 1
    kv_dim = h * kv // max(1, heads)
    per_layer = 2 * h * h + 2 * h * kv_dim + 3 * h * inter
    return round((2 * vocab * h + layers * per_layer) * 2 / 2**30, 2)


# -- performance model (deterministic) -------------------------------------------------

class PerfModel:
    """Acceptance length and per-token timings of the SIMULATED server."""

    def __init__(self, args: argparse.Namespace, num_layers: int, aux_ids: list[int] | None):
        self.args = args
        self.num_layers = num_layers
        self.default_ids = [2, num_layers // 2, num_layers - 3]
        self.aux_ids = aux_ids if aux_ids is not None else list(self.default_ids)
        self.epoch = 0
        # a draft folder that declares what it was trained on (SIMULATED-training.json): acceptance
        # follows how well the capture points fit it, position by position
        self.fit = _draft_fit.load(getattr(args, "speculative_draft_model_path", None), num_layers, aux_ids) \
            if args.speculative_algorithm else None
        self.accept_len = self._accept_len()

    def _accept_len(self) -> float:
        a = self.args
        if a.speculative_algorithm is None:
            return 1.0
        forced = os.environ.get("SGLANG_SIMULATE_ACC_LEN") or os.environ.get("EAGLE_SIM_ACCEPT_LEN")
        if forced:
            return float(forced)
        if getattr(a, "load_format", None) == "dummy":
            return 1.0   # random weights: the draft never proposes what the target picks (seen on a real H200)
        if self.fit is not None:
            return round(_draft_fit.accept_length(self.positions()), 4)
        return _perf_model.accept_length(self.settings)

    def positions(self) -> list[float]:
        """Per-position acceptance of a draft that declares its training (`fit`); the tree of a
        topk > 1 adds what the perf model says it adds to a well-matched draft."""
        assert self.fit is not None
        a = self.args
        depth = max(1, min(a.speculative_num_steps or 1, (a.speculative_num_draft_tokens or 2) - 1))
        s = self.settings
        s.aux_ids = list(self.default_ids)
        tree = 1.0 - (1.0 - _perf_model.acceptance_prob(s)) / (1.0 - _perf_model.BASE_P)
        return self.fit.positions(depth, tree)

    def spec_meta(self, out_len: int, verify_ct: int) -> dict[str, Any]:
        """A request's speculative meta_info, with SGLang's keys (tokenizer_manager.py)."""
        meta: dict[str, Any] = {"spec_verify_ct": verify_ct,
                                "spec_accept_length": round(max(0, out_len - 1) / max(1, verify_ct), 4)}
        if self.fit is not None and getattr(self.args, "load_format", None) != "dummy":
            hist = _draft_fit.histogram(verify_ct, self.positions())
            correct = sum(k * c for k, c in enumerate(hist))
            proposed = verify_ct * max(1, (self.args.speculative_num_draft_tokens or 2) - 1)
            meta.update(spec_num_correct_drafts=correct, spec_num_proposed_drafts=proposed,
                        spec_accept_rate=round(correct / proposed, 4), spec_correct_drafts_histogram=hist)
        return meta

    @property
    def settings(self) -> "_perf_model.Settings":
        a = self.args
        s = _perf_model.settings_from_env(a.speculative_num_steps, a.speculative_eagle_topk,
                                          a.speculative_num_draft_tokens, self.aux_ids, self.default_ids,
                                          max(1, a.tp_size), a.speculative_algorithm is not None)
        s.epoch = self.epoch
        return s

    def next_epoch(self) -> None:
        """A cache flush starts a new benchmark: the next draw of the seeded noise."""
        self.epoch += 1

    def step_s(self) -> float:
        return _perf_model.step_s(self.settings) / _perf_model.noise_factor(self.settings)

    def ttft_s(self, input_len: int) -> float:
        return _perf_model.ttft_s(self.settings, input_len)

    def itl_s(self) -> float:
        return self.step_s() / self.accept_len

    def verify_ct(self, output_len: int) -> int:
        return max(1, math.ceil(max(0, output_len - 1) / self.accept_len))


# -- GPU bookkeeping ---------------------------------------------------------------------

def gpu_state_module() -> ModuleType | None:
    """The simulated nvidia-smi's holder registry (gpu_state.py sits beside sglang_pkg/)."""
    path = Path(__file__).resolve().parents[2] / "gpu_state.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("eagle_sim_gpu_state", path)
    if spec is None or spec.loader is None:
        return None
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception:
        return None
    return mod


def state_dir() -> str | None:
    return os.environ.get("EAGLE_SIM_STATE") or None


def visible_gpus(tp_size: int) -> list[int]:
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None or not raw.strip():
        return list(range(max(1, tp_size)))
    out = []
    for tok in raw.split(","):
        tok = tok.strip()
        if tok.isdigit():
            out.append(int(tok))
    return out[:max(1, tp_size)] or [0]
