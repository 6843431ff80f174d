"""SIMULATED SGLang internals shared by the fake launch_server and its scheduler child.

Stand-alone (standard library only): it runs on the GPU host with whatever Python is
there. The speculative-arg resolution mirrors SGLang 0.5.23 (and eaglebot's
eaglebot.facts.sglang.release; tests/test_sglang_fidelity.py keeps them in agreement). Performance numbers are a
deterministic model, not a measurement.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO


if TYPE_CHECKING:  # mypy checks this package as eaglebot.sim.sglang_pkg.sglang; it runs as `sglang`
    from . import _adaptive, _draft_fit, _landscape, _methods, _perf_model
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
    _landscape = _sibling("_landscape")
    _adaptive = _sibling("_adaptive")
    _draft_fit = _sibling("_draft_fit")
    _methods = _sibling("_methods")

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

def auto_spec_params(architecture: str | None, algorithm: str | None = None) -> tuple[int, int, int]:
    arch = architecture or ""
    if algorithm == "STANDALONE":
        return 3, 1, 4
    if arch == "LlamaForCausalLM" or arch.startswith("Grok"):
        return 5, 4, 8
    return 3, 1, 4


class SpecError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def resolve_speculative(args: argparse.Namespace, architecture: str | None) -> list[str]:
    """Mutate args like ServerArgs.__post_init__ does; return the WARNING lines it logs. The methods
    beside the EAGLE family resolve and refuse as _methods.py says."""
    warnings: list[str] = []
    algo = args.speculative_algorithm
    if algo is None:
        return warnings
    if getattr(args, "speculative_draft_model_path", None) is not None and \
            getattr(args, "speculative_draft_model_revision", None) is None:
        args.speculative_draft_model_revision = "main"
    if (bad := _methods.unknown(algo, VERSION)) is not None:
        raise SpecError("ValueError", bad)
    algo = algo.upper()
    if algo == "NEXTN":
        algo = "EAGLE"
    args.speculative_algorithm = algo
    if getattr(args, "speculative_adaptive", False):
        _resolve_adaptive(args, warnings)
    try:
        if algo == "DFLASH":
            return warnings + _methods.handle_dflash(args, VERSION)
        if algo == "NGRAM":
            return warnings + _methods.handle_ngram(args, VERSION)
        if algo not in ("EAGLE", "EAGLE3", "STANDALONE"):
            return warnings
        if (said := _methods.eagle_family_first(args, architecture, VERSION)) is not None:
            warnings.append(said)
    except _methods.Refused as e:
        raise SpecError(e.kind, str(e)) from None
    if args.max_running_requests is None:
        args.max_running_requests = 48
        warnings.append(MAX_RUNNING_WARNING)
    if args.speculative_num_steps is None and not getattr(args, "speculative_adaptive", False):
        if args.speculative_eagle_topk is not None or args.speculative_num_draft_tokens is not None:
            raise SpecError("AssertionError", "")
        (args.speculative_num_steps, args.speculative_eagle_topk,
         args.speculative_num_draft_tokens) = auto_spec_params(architecture, algo)
        return warnings
    if args.speculative_eagle_topk is None:   # speculative_hook.py: `speculative_eagle_topk > 1`
        raise SpecError("TypeError", "'>' not supported between instances of 'NoneType' and 'int'")
    if (args.speculative_eagle_topk == 1
            and args.speculative_num_draft_tokens != args.speculative_num_steps + 1):
        warnings.append(DRAFT_TOKENS_WARNING)
        args.speculative_num_draft_tokens = args.speculative_num_steps + 1
    return warnings


def _resolve_adaptive(args: argparse.Namespace, warnings: list[str]) -> None:
    """speculative_hook.py's `_maybe_disable_adaptive` and `_init_adaptive_speculative_params`."""
    reason = None
    if args.speculative_algorithm not in ("EAGLE", "EAGLE3"):
        reason = f"speculative_algorithm={args.speculative_algorithm} (only EAGLE/EAGLE3 are supported)"
    elif args.speculative_eagle_topk is not None and args.speculative_eagle_topk != 1:
        reason = f"speculative_eagle_topk={args.speculative_eagle_topk} (only topk=1 is supported)"
    if reason:
        warnings.append(f"speculative_adaptive disabled: {reason}. Falling back to static speculative params.")
        args.speculative_adaptive = False
        return
    try:
        candidates = _adaptive.candidate_steps(args.speculative_adaptive_config)
    except (OSError, ValueError) as e:
        raise SpecError(type(e).__name__ if isinstance(e, ValueError) else "FileNotFoundError", str(e))
    if args.speculative_eagle_topk is None:
        args.speculative_eagle_topk = 1
    if args.speculative_num_steps is None:
        args.speculative_num_steps = candidates[len(candidates) // 2]
    if args.speculative_num_steps not in candidates:
        raise SpecError("ValueError", f"--speculative-num-steps={args.speculative_num_steps} is not in the adaptive "
                                      f"config candidate_steps {candidates}. Pass one of those values.")
    args.speculative_num_draft_tokens = args.speculative_num_steps + 1


# -- model files ---------------------------------------------------------------------

# A folder's JSON file as a dict ({} when missing or not an object): _methods.py's, one reader for both.
read_json = _methods.read_json


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
    """Acceptance length and per-token timings of the SIMULATED server.

    Two models: the old batch-size-blind one (`_perf_model`), and, with EAGLE_SIM_LANDSCAPE=<seed>,
    the per-batch-size landscape (`_landscape`), whose acceptance by position is multiplied by what
    the capture-layer model makes of the draft's layers (`capture_factor`)."""

    def __init__(self, args: argparse.Namespace, num_layers: int, aux_ids: list[int] | None,
                 method: "_methods.Method | None" = None):
        self.args = args
        self.method = method          # DFLASH, NGRAM, STANDALONE, MTP: their own acceptance (_methods.py)
        self.num_layers = num_layers
        self.default_ids = [2, num_layers // 2, num_layers - 3]
        self.aux_ids = aux_ids if aux_ids is not None else list(self.default_ids)
        self.epoch = 0
        seed = os.environ.get("EAGLE_SIM_LANDSCAPE")
        self.landscape = _landscape.make(int(seed)) if seed not in (None, "") else None
        # a draft folder that declares what it was trained on (SIMULATED-training.json): acceptance
        # follows how well the capture points fit it, position by position
        self.fit = _draft_fit.load(getattr(args, "speculative_draft_model_path", None), num_layers, aux_ids) \
            if args.speculative_algorithm and method is None else None
        self.accept_len = self._accept_len()

    def refresh(self) -> None:
        """The speculative settings changed (an adaptive tier switch): acceptance follows them."""
        self.accept_len = self._accept_len()

    def _accept_len(self) -> float:
        a = self.args
        if a.speculative_algorithm is None or self.step_zero():
            return 1.0          # an adaptive step-0 tier: "A zero-step candidate disables drafting"
        if self.forced() is not None:
            return round(_landscape.accept_length(self.positions()), 4)
        if getattr(a, "load_format", None) == "dummy":
            return 1.0   # random weights: the draft never proposes what the target picks (seen on a real H200)
        if self.landscape is not None or self.fit is not None or self.method is not None:
            return round(_landscape.accept_length(self.positions()), 4)
        return _perf_model.accept_length(self.settings)

    def step_zero(self) -> bool:
        """An EAGLE-family tier of 0 steps drafts nothing; NGRAM's steps are accounting only (draft tokens //
        BFS breadth: 0 under 10 draft tokens by default) and it drafts its draft tokens all the same."""
        return bool(self.args.speculative_num_steps == 0 and self.args.speculative_algorithm != "NGRAM")

    def forced(self) -> float | None:
        """SGLANG_SIMULATE_ACC_LEN (or EAGLE_SIM_ACCEPT_LEN): SGLang's default `match-expected` rule
        clamps it to [1, steps + 1] and accepts its floor or ceiling in drafts each verify
        (speculative/spec_utils.py `_sample_simulated_acc_len`)."""
        forced = os.environ.get("SGLANG_SIMULATE_ACC_LEN") or os.environ.get("EAGLE_SIM_ACCEPT_LEN")
        if not forced or float(forced) <= 0:     # SGLang: turned off when < 0
            return None
        return max(1.0, min(float(forced), self.cell[0] + 1.0))

    @property
    def cell(self) -> tuple[int, int, int]:
        a = self.args
        steps, topk = a.speculative_num_steps or 1, max(1, a.speculative_eagle_topk or 1)
        return steps, topk, a.speculative_num_draft_tokens or steps + 1

    def capture_factor(self) -> float:
        """What the draft's capture layers leave of its acceptance (1.0 when they are the defaults)."""
        s = self.settings
        matched = _perf_model.Settings(s.steps, s.topk, s.draft_tokens, list(self.default_ids),
                                       list(self.default_ids), s.tp, s.spec)
        return _perf_model.acceptance_prob(s) / _perf_model.acceptance_prob(matched)

    def positions(self, prompt: str = "") -> list[float]:
        """Acceptance of each draft position given the ones before it: a forced accept length's, none with
        random weights, the landscape's (a prompt's own, when given), a draft's declared training's, else
        the perf model's."""
        steps, _, draft = self.cell
        if self.step_zero():
            return []           # step 0: no drafts, every verify keeps only the target's token
        depth = self.method.depth(steps, draft) if self.method is not None else max(1, min(steps, draft - 1))
        forced = self.forced()
        if forced is not None:
            whole, part = divmod(forced - 1.0, 1.0)
            return ([1.0] * int(whole) + [part] + [0.0] * depth)[:depth]
        if getattr(self.args, "load_format", None) == "dummy":
            return [0.0] * depth
        if self.method is not None:
            return self.method.positions(depth, prompt)
        if self.landscape is not None:
            scale = self.capture_factor() * (_landscape.prompt_scale(self.landscape, prompt) if prompt else 1.0)
            return _landscape.positions(self.landscape, self.cell, scale)
        if self.fit is not None:
            # the tree of a topk > 1 adds what the perf model says it adds to a well-matched draft
            s = self.settings
            s.aux_ids = list(self.default_ids)
            tree = 1.0 - (1.0 - _perf_model.acceptance_prob(s)) / (1.0 - _perf_model.BASE_P)
            return self.fit.positions(depth, tree)
        return [_perf_model.acceptance_prob(self.settings)] * depth

    def spec_meta(self, out_len: int, verify_ct: int, prompt: str = "") -> dict[str, Any]:
        """A request's speculative meta_info, with SGLang's keys (tokenizer_manager.py)."""
        meta: dict[str, Any] = {"spec_verify_ct": verify_ct,
                                "spec_accept_length": round(max(0, out_len - 1) / max(1, verify_ct), 4)}
        pos = self.positions(prompt)
        hist = _landscape.histogram(verify_ct, pos)
        correct = sum(k * c for k, c in enumerate(hist))
        proposed = verify_ct * max(1, self.cell[2] - 1)
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

    def step_s(self, batch: int = 1) -> float:
        noise = _perf_model.noise_factor(self.settings)
        if self.landscape is not None:
            cell = self.cell if self.args.speculative_algorithm else None
            return _landscape.step_s(self.landscape, batch, cell) / noise
        return _perf_model.step_s(self.settings) / noise

    def ttft_s(self, input_len: int) -> float:
        return _perf_model.ttft_s(self.settings, input_len)

    def itl_s(self, batch: int = 1) -> float:
        return self.step_s(batch) / self.accept_len

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
