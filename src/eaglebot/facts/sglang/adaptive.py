"""SGLang's adaptive speculative steps, as 0.5.23 (and 0.5.17) implement them: the config file's
format, what the server refuses, and the switching rule, read from
`sglang/srt/speculative/adaptive_spec_params.py` (tests/fixtures/sglang/0.5.23/adaptive_spec_params.py
holds that file; a test replays traces through it and through `Slot` and compares every decision).

`--speculative-adaptive --speculative-adaptive-config FILE` (topk 1 only, EAGLE/EAGLE3 only: any
other topk turns it off with a WARNING and the static flags run). FILE is a JSON object; each key
that is all digits is a batch-size slot `{"candidate_steps": [ints >= 0], ...}`, other keys are
defaults every slot inherits (`{**cfg, **entry}`). Per slot: `ema_alpha` (0.2), `update_interval`
(5), `warmup_batches` (10), `down_hysteresis` (-0.25), `up_hysteresis` (0.0), `ceiling_coeff` (0).
A running batch is padded to the next CUDA-graph batch size, then served by the slot with the
largest key not above it (the smallest slot below all keys). Each slot keeps an EMA of the drafts
accepted per request per verify; after `warmup_batches`, every `update_interval` batches it steps
down while `ema <= prev - 0.5 + down_hysteresis` (0.5 + down when prev is 0), else up while
`ema > current - 0.5 + up_hysteresis`. `--speculative-num-steps` must be one of the union of the
candidates (else ValueError at start-up); unset, it is the union's middle element; draft tokens
become steps + 1. Every switch is logged: `Adaptive spec params updated: steps 3 -> 5
(ema_accept_len=3.61)`. /server_info reports the launch's `speculative_num_steps`, not the tier
now in use (0.5.23's `get_internal_state` reads the resolved server args), so the log is the
record of switches on a real server.
"""
from __future__ import annotations

import bisect
import math
import re
from typing import Any

DEFAULTS: dict[str, float] = {"ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10,
                              "down_hysteresis": -0.25, "up_hysteresis": 0.0, "ceiling_coeff": 0}
SWITCH = re.compile(r"Adaptive spec params updated: steps (\d+) -> (\d+) \(ema_accept_len=(-?[\d.]+)\)")
DISABLED = re.compile(r"speculative_adaptive disabled: (.*?)\. Falling back to static speculative params")


def slots(cfg: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The batch-size slots, each with the defaults and the file's top-level keys merged in."""
    top = {k: v for k, v in cfg.items() if not k.isdigit()}
    return {int(k): {**DEFAULTS, **top, **v} for k, v in cfg.items() if k.isdigit() and isinstance(v, dict)}


def problems(cfg: object, num_steps: int | None = None, topk: int | None = None) -> list[str]:
    """Why SGLang would refuse this config or ignore it (empty when it would run it)."""
    if not isinstance(cfg, dict):
        return ["the adaptive config must be a JSON object of batch-size slots, e.g. "
                '{"1": {"candidate_steps": [3, 5]}}']
    out = []
    keys = [k for k in cfg if isinstance(k, str) and k.isdigit()]
    for k in keys:
        entry = cfg[k]
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if not isinstance(steps, list) or not steps or not all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps):
            out.append(f"BS {k}: candidate_steps must be a list of non-negative ints, got {steps!r}")
    if not keys:
        out.append("speculative_adaptive_config must contain at least one integer-string BS key, "
                   f'e.g. {{"1": {{"candidate_steps": [1,3,7]}}}}; got keys {list(cfg)[:8]}')
    if out:
        return out
    union = candidate_steps(cfg)
    if num_steps is not None and num_steps not in union:
        out.append(f"--speculative-num-steps={num_steps} is not in the adaptive config candidate_steps {union}")
    if topk is not None and topk != 1:
        out.append(f"speculative_eagle_topk={topk}: SGLang runs adaptive steps with topk 1 only "
                   "(it would turn them off and run the static flags)")
    return out


# The built-in ladder (`--speculative-adaptive` without a config file): adaptive_spec_params.py's
# DEFAULT_ADAPTIVE_CONFIG, 0.5.23 (0.5.17: BS1 [1, 3, 7], the rest the same). Its batch-64 slot is
# step 0 alone: "A zero-step candidate disables drafting".
BUILTIN: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0}}


def drafting_off_from(cfg: dict[str, Any] | None) -> int | None:
    """The smallest batch size from which a ladder (None: the built-in one) can only run step 0, i.e.
    speculation silently off: the first slot whose candidates are [0] with none above it drafting."""
    keys = sorted(slots(cfg if cfg is not None else BUILTIN).items())
    off = None
    for bs, entry in reversed(keys):
        if [int(s) for s in entry["candidate_steps"]] != [0]:
            break
        off = bs
    return off


def candidate_steps(cfg: dict[str, Any]) -> list[int]:
    """The union of every slot's candidate steps (SGLang sizes its runtime states by it)."""
    return sorted({int(s) for e in slots(cfg).values() for s in e["candidate_steps"]})


def initial_steps(cfg: dict[str, Any]) -> int:
    """`--speculative-num-steps` when unset: the union's middle element."""
    union = candidate_steps(cfg)
    return union[len(union) // 2]


class Slot:
    """One batch-size slot (SGLang's AdaptiveStepSlot, `log_info_on_rank0` aside)."""

    def __init__(self, initial_steps: int, cfg: dict[str, Any]):
        self.candidate_steps = sorted(set(cfg["candidate_steps"]))
        self.ema_alpha = float(cfg.get("ema_alpha", 0.2))
        self.update_interval = int(cfg.get("update_interval", 5))
        self.warmup_batches = int(cfg.get("warmup_batches", 10))
        self.down_hysteresis = float(cfg.get("down_hysteresis", -0.25))
        self.up_hysteresis = float(cfg.get("up_hysteresis", 0.0))
        self.ceiling_coeff = float(cfg.get("ceiling_coeff", 0))
        self.current_steps = (initial_steps if initial_steps in self.candidate_steps
                              else self.candidate_steps[len(self.candidate_steps) // 2])
        self.ema_accept_len = float(self.current_steps - 1)
        self._batch_count = 0

    def update(self, num_correct_drafts_per_req: list[int]) -> bool:
        if not num_correct_drafts_per_req:
            return False
        if self.current_steps > 0:
            avg = sum(num_correct_drafts_per_req) / len(num_correct_drafts_per_req)
            self.ema_accept_len = (1 - self.ema_alpha) * self.ema_accept_len + self.ema_alpha * avg
        self._batch_count += 1
        if self._batch_count <= self.warmup_batches:
            return False
        if (self._batch_count - self.warmup_batches) % self.update_interval != 0:
            return False
        return self._recompute()

    def _recompute(self) -> bool:
        old = self.current_steps
        idx = old_idx = self.candidate_steps.index(old)
        if old == 0:
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            return self._apply(old, target)
        while idx > 0:
            prev = self.candidate_steps[idx - 1]
            drop = (0.5 if prev == 0 else prev - 0.5) + self.down_hysteresis
            if self.ema_accept_len <= drop:
                idx -= 1
            else:
                break
        if not idx < old_idx:
            while idx < len(self.candidate_steps) - 1:
                if self.ema_accept_len > self.candidate_steps[idx] - 0.5 + self.up_hysteresis:
                    idx += 1
                else:
                    break
        target = self.candidate_steps[idx]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and self.candidate_steps[idx] > ceiling:
                    idx -= 1
                target = self.candidate_steps[idx]
        return self._apply(old, target)

    def _apply(self, old: int, target: int) -> bool:
        if target != old:
            self.current_steps = target
            return True
        return False


class Policy:
    """All the slots, and the routing of a running batch to one (SGLang's AdaptiveSpeculativeParams)."""

    def __init__(self, initial_steps: int, cfg: dict[str, Any], cuda_graph_bs: list[int] | None = None):
        entries = slots(cfg)
        self.bs_list = sorted(entries)
        self.slots = {bs: Slot(initial_steps, e) for bs, e in entries.items()}
        self.cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    def route(self, batch_size: int) -> Slot:
        padded = batch_size
        if self.cuda_graph_bs is not None:
            i = bisect.bisect_left(self.cuda_graph_bs, batch_size)
            padded = self.cuda_graph_bs[i] if i < len(self.cuda_graph_bs) else batch_size
        i = bisect.bisect_right(self.bs_list, padded) - 1
        return self.slots[self.bs_list[max(0, i)]]


def switches(log_text: str) -> list[tuple[int, int, float]]:
    """(from, to, ema) of every `Adaptive spec params updated` line."""
    return [(int(m[1]), int(m[2]), float(m[3])) for m in SWITCH.finditer(log_text)]


def disabled_reason(log_text: str) -> str | None:
    m = DISABLED.search(log_text)
    return m[1] if m else None
