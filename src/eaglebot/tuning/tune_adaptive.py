"""An adaptive-steps config for SGLang (`--speculative-adaptive-config`) from a tuning's profile,
with its hysteresis placed away from the EMA band the profile observed.

One slot per tuned batch size, keyed at the geometric midpoint between it and the next smaller
tuned size (SGLang serves a batch by the slot with the largest key not above it): a batch that
wavers around a tuned size (60-64 running requests of a load of 64) stays in that size's slot, where
keys at the tuned sizes themselves would swing it between two slots. Its top tier is the chain the
tuning found best there; under it,
when one fits, a fallback tier: the chain that would be best were acceptance to sag (each draft
position accepted f times as often, f < 1: a prompt mix that drafts worse). SGLang's slot steps
down when its EMA of accepted drafts falls to `prev - 0.5 + down_hysteresis` and up when it
passes `current - 0.5 + up_hysteresis`; both thresholds are put in the middle of the gap between
the EMA band at the profiled acceptance and the band at the sagged one, so at the acceptance the
profile saw the slot stays on its tier (no flapping), and only a real sag moves it. The band is
the EMA's mean +- Z standard deviations: one verify's accepted-draft count varies (a truncated
count), prompts differ (the profile's per-request means), a batch averages its requests, and
the EMA averages alpha / (2 - alpha) of its past. When no gap fits, the slot keeps its one tier.
`replay` then runs SGLang's own rule (facts/sglang/adaptive.py) on drawn counts as a check before
the flap test on the server.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Any

from eaglebot.facts.sglang import adaptive as sa
from eaglebot.tuning.tune_model import ChainModel, depth_moments

Z = 4.0                  # band half-width in standard deviations of the EMA
SAG = (0.85, 0.75, 0.65)  # acceptance factors tried for the fallback tier, mildest first
ALPHA = 0.2


@dataclass
class SlotPlan:
    batch: int
    top: int
    key: int = 1
    fallback: int | None = None
    up: float = 0.0
    down: float = -0.25
    band: tuple[float, float] = (0.0, 0.0)
    why: str = ""


@dataclass
class AdaptivePlan:
    config: dict[str, Any]
    initial_steps: int
    slots: list[SlotPlan] = field(default_factory=list)

    def summary(self) -> str:
        parts = []
        for s in self.slots:
            tiers = f"{s.fallback},{s.top}" if s.fallback is not None else f"{s.top}"
            parts.append(f"bs {s.batch} (slot {s.key}+): steps [{tiers}]" + (f" (down {s.down:+.2f}, up {s.up:+.2f})"
                                                               if s.fallback is not None else ""))
        return "; ".join(parts)


def _sagged(chains: ChainModel, d: int, f: float) -> float:
    """Mean accepted drafts per verify at depth d when every position accepts f times as often."""
    return sum(p * f ** k for k, p in enumerate(chains.prefix[:d], start=1))


def _half_width(chains: ChainModel, d: int, batch: int, f: float = 1.0) -> float:
    prefix = [p * f ** k for k, p in enumerate(chains.prefix, start=1)]
    mean, var_verify = depth_moments(prefix, d)
    spread = statistics.pstdev(chains.request_means) if len(chains.request_means) > 1 else 0.0
    full = sum(prefix[:chains.max_depth]) or 1.0
    var_prompt = (spread * mean / full) ** 2      # prompts' spread, scaled to this depth
    var = ALPHA / (2 - ALPHA) * var_verify / batch + var_prompt / batch
    return Z * math.sqrt(var)


def best_depth(chains: ChainModel, batch: int, depths: list[int], f: float = 1.0) -> int:
    def tok(d: int) -> float:
        return batch * (1.0 + _sagged(chains, d, f)) / chains.step_s(batch, d)
    return max(depths, key=tok)


def plan_slot(chains: ChainModel, batch: int, top: int, depths: list[int]) -> SlotPlan:
    mean = _sagged(chains, top, 1.0)
    w1 = _half_width(chains, top, batch)
    plan = SlotPlan(batch, top, band=(mean - w1, mean + w1))
    for f in SAG:
        fb = best_depth(chains, batch, [d for d in depths if d < top], f) if any(d < top for d in depths) else None
        if fb is None:
            plan.why = "no shorter chain to fall back to"
            return plan
        # the drop from `top` and the rise from `fb`, each in the gap between the sagged band and the profiled one
        hi_top, lo_top = _sagged(chains, top, f) + _half_width(chains, top, batch, f), mean - w1
        hi_fb = _sagged(chains, fb, f) + _half_width(chains, fb, batch, f)
        lo_fb = _sagged(chains, fb, 1.0) - _half_width(chains, fb, batch)
        if hi_top < lo_top and hi_fb < lo_fb:
            theta_down, theta_up = (hi_top + lo_top) / 2, (hi_fb + lo_fb) / 2
            plan.fallback = fb
            plan.down, plan.up = theta_down - fb + 0.5, theta_up - fb + 0.5
            plan.why = (f"falls back to {fb} steps when acceptance sags to {f:.2f}x; "
                        f"EMA band at {top} steps {plan.band[0]:.2f}-{plan.band[1]:.2f}, "
                        f"drop at {theta_down:.2f}, rise from {fb} at {theta_up:.2f}")
            return plan
    plan.why = (f"one tier: the EMA band at {top} steps ({plan.band[0]:.2f}-{plan.band[1]:.2f}) leaves no gap "
                "for a fallback's thresholds")
    return plan


def build(chains: ChainModel, tops: dict[int, int], depths: list[int]) -> AdaptivePlan:
    """The config for per-batch-size top tiers `tops` (batch size -> steps), chains of `depths`."""
    sizes = sorted(tops)
    slots = [plan_slot(chains, b, tops[b], depths) for b in sizes]
    for i, s in enumerate(slots):
        s.key = 1 if i == 0 else max(sizes[i - 1] + 1, math.ceil(math.sqrt(sizes[i - 1] * sizes[i])))
    cfg: dict[str, Any] = {"ema_alpha": ALPHA, "update_interval": int(sa.DEFAULTS["update_interval"]),
                           "warmup_batches": int(sa.DEFAULTS["warmup_batches"])}
    for s in slots:
        entry: dict[str, Any] = {"candidate_steps": sorted({s.top, *([s.fallback] if s.fallback is not None else [])})}
        entry.update(up_hysteresis=round(s.up, 3), down_hysteresis=round(s.down, 3), ceiling_coeff=0)
        cfg[str(s.key)] = entry
    return AdaptivePlan(cfg, slots[0].top if slots else 1, slots)


def replay(plan: AdaptivePlan, chains: ChainModel, batch: int, batches: int = 2000, f: float = 1.0,
           seed: int = 0) -> tuple[int, int]:
    """(tier switches after the first tenth, the tier at the end) of SGLang's rule fed counts drawn
    at this batch size and acceptance factor: the offline check before the server's flap test."""
    rng = random.Random(seed)
    policy = sa.Policy(plan.initial_steps, plan.config)
    slot = policy.route(batch)
    cond = []
    before = 1.0
    for p in chains.prefix:
        cond.append(min(1.0, p / before * f) if before > 0 else 0.0)
        before = p
    spread = statistics.pstdev(chains.request_means) if len(chains.request_means) > 1 else 0.0
    mean_full = sum(chains.prefix) or 1.0
    scales = [max(0.0, 1.0 + rng.gauss(0.0, spread / mean_full)) for _ in range(batch)]
    switched = 0
    for i in range(batches):
        d = slot.current_steps
        counts = []
        for s in scales:
            k = 0
            while k < d and rng.random() < min(1.0, cond[k] * s):
                k += 1
            counts.append(k)
        if slot.update(counts) and i > batches // 10:
            switched += 1
    return switched, slot.current_steps
