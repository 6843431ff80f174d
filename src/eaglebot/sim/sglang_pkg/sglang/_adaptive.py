"""SIMULATED SGLang adaptive speculative steps: SGLang 0.5.23's own rule
(sglang/srt/speculative/adaptive_spec_params.py), so the simulated server switches tiers exactly
when the real one would for the same accepted-draft counts.

Standard library only (it runs on the GPU host with whatever Python is there). eaglebot's
facts/sglang/adaptive.py states the same rule; a test replays traces through both and through the
real file (tests/fixtures/sglang/0.5.23/adaptive_spec_params.py) and compares every decision.
"""
from __future__ import annotations

import bisect
import json
import math
from typing import Any

DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}


def load(path: str | None) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """(config, slots) as `_load_adaptive_config`; raises ValueError with SGLang's words."""
    if path is not None:
        with open(path) as f:
            cfg = json.load(f)
    else:
        cfg = DEFAULT_CONFIG
    entries: dict[int, dict[str, Any]] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps")
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise ValueError(f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}")
        entries[int(key)] = entry
    if not entries:
        raise ValueError("speculative_adaptive_config must contain at least one integer-string BS key, "
                         'e.g. {"1": {"candidate_steps": [1,3,7]}}. ' f"Got keys: {list(cfg.keys())}")
    return cfg, entries


def candidate_steps(path: str | None) -> list[int]:
    _, entries = load(path)
    return sorted({s for e in entries.values() for s in e["candidate_steps"]})


class Slot:
    def __init__(self, initial_steps: int, cfg: dict[str, Any]):
        self.candidate_steps = sorted(set(cfg["candidate_steps"]))
        self.ema_alpha = cfg.get("ema_alpha", 0.2)
        self.update_interval = cfg.get("update_interval", 5)
        self.warmup_batches = cfg.get("warmup_batches", 10)
        self.down_hysteresis = cfg.get("down_hysteresis", -0.25)
        self.up_hysteresis = cfg.get("up_hysteresis", 0.0)
        self.ceiling_coeff = cfg.get("ceiling_coeff", 0)
        self.current_steps = (initial_steps if initial_steps in self.candidate_steps
                              else self.candidate_steps[len(self.candidate_steps) // 2])
        self.ema_accept_len = float(self.current_steps - 1)
        self._batch_count = 0

    def update(self, correct: list[int]) -> tuple[int, int] | None:
        """Feed one verify batch; (old, new) steps when the slot switched."""
        if not correct:
            return None
        if self.current_steps > 0:
            self.ema_accept_len = (1 - self.ema_alpha) * self.ema_accept_len + self.ema_alpha * (
                sum(correct) / len(correct))
        self._batch_count += 1
        if self._batch_count <= self.warmup_batches:
            return None
        if (self._batch_count - self.warmup_batches) % self.update_interval != 0:
            return None
        return self._recompute()

    def _recompute(self) -> tuple[int, int] | None:
        old = self.current_steps
        idx = old_idx = self.candidate_steps.index(old)
        if old == 0:
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
        else:
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
        if target != old:
            self.current_steps = target
            return old, target
        return None


class Policy:
    def __init__(self, initial_steps: int, path: str | None, cuda_graph_bs: list[int] | None):
        cfg, entries = load(path)
        self.bs_list = sorted(entries)
        self.slots = {bs: Slot(initial_steps, {**cfg, **e}) for bs, e in sorted(entries.items())}
        self.cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    def route(self, batch_size: int) -> Slot:
        padded = batch_size
        if self.cuda_graph_bs is not None:
            i = bisect.bisect_left(self.cuda_graph_bs, batch_size)
            padded = self.cuda_graph_bs[i] if i < len(self.cuda_graph_bs) else batch_size
        i = bisect.bisect_right(self.bs_list, padded) - 1
        return self.slots[self.bs_list[max(0, i)]]
