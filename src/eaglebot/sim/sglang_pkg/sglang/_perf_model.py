"""SIMULATED performance model of a speculative-decoding server: worth tuning, never measured.

Standard library only (it runs on the GPU host with whatever Python is there). Every
number here is SIMULATED: a deterministic function of the speculative settings and the
draft's capture layers, plus seeded noise, so that sweeps find a real interior optimum
and bisection finds a real culprit in tests and in `eagle demo`.

The shape follows how EAGLE-style decoding behaves:
- each drafted token is accepted with probability p; the expected accept length of a
  chain of depth d is 1 + p + p^2 + ... + p^d (geometric);
- a wider tree (topk > 1) raises p, but only when there are enough draft tokens to
  verify it; draft tokens beyond steps + 1 with topk 1 are cut by SGLang anyway;
- capture layers the draft was not trained on lower p (a negative id more so);
- a decode step costs one target forward (more draft tokens to verify cost more) plus
  one small draft forward per speculative step, so more steps stop paying off.
Knobs (environment): EAGLE_SIM_SEED (default 0), EAGLE_SIM_NOISE_PCT (default 1.0).
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field

BASE_P = 0.66            # per-token acceptance of a well-matched draft, chain of width 1
TARGET_STEP_S = 0.016    # one target forward at batch 1 (s)
VERIFY_TOKEN_S = 0.0003  # extra target time per draft token verified
DRAFT_STEP_S = 0.0007    # one draft forward (s)
LAYER_PENALTY = 0.85     # p multiplier per capture layer the draft was not trained on
NEGATIVE_PENALTY = 0.80  # and again per negative id (the embeddings, after the +1 shift)


@dataclass
class Settings:
    steps: int | None
    topk: int | None
    draft_tokens: int | None
    aux_ids: list[int]
    default_ids: list[int]
    tp: int = 1
    spec: bool = True
    seed: int = 0
    noise_pct: float = 1.0
    epoch: int = field(default=0)


def acceptance_prob(s: Settings) -> float:
    steps, topk, draft = s.steps or 1, max(1, s.topk or 1), s.draft_tokens or 2
    p = BASE_P
    if topk > 1:
        # A wider tree helps only as far as the draft-token budget can verify it.
        budget = min(1.0, (draft - 1) / max(1.0, steps * math.log2(topk + 1)))
        p = 1.0 - (1.0 - p) * (1.0 - 0.42 * budget * min(1.0, math.log2(topk) / 2.0))
    mismatches = sum(1 for i in s.aux_ids if i not in s.default_ids)
    negatives = sum(1 for i in s.aux_ids if i < 0)
    return p * LAYER_PENALTY ** mismatches * NEGATIVE_PENALTY ** negatives


def accept_length(s: Settings) -> float:
    if not s.spec:
        return 1.0
    steps, draft = s.steps or 1, s.draft_tokens or 2
    depth = max(1, min(steps, draft - 1))
    p = acceptance_prob(s)
    return round(max(1.0, (1.0 - p ** (depth + 1)) / (1.0 - p)), 4)


def step_s(s: Settings) -> float:
    draft = (s.draft_tokens or 1) if s.spec else 1
    steps = (s.steps or 0) if s.spec else 0
    t = TARGET_STEP_S + VERIFY_TOKEN_S * draft * math.sqrt(max(1, s.topk or 1)) + DRAFT_STEP_S * steps
    return t / (1.0 + 0.6 * (max(1, s.tp) - 1))


def noise_factor(s: Settings) -> float:
    """Multiplicative noise of one benchmark epoch (a flush starts the next): seeded by
    EAGLE_SIM_SEED, the settings and the epoch, so the same sequence repeats run after run."""
    if s.noise_pct <= 0:
        return 1.0
    key = f"{s.seed}|{s.steps}|{s.topk}|{s.draft_tokens}|{s.aux_ids}|{s.tp}|{s.epoch}".encode()
    u = int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2.0 ** 64   # uniform [0, 1)
    return 1.0 + (2.0 * u - 1.0) * s.noise_pct / 100.0


def settings_from_env(steps: int | None, topk: int | None, draft_tokens: int | None, aux_ids: list[int],
                      default_ids: list[int], tp: int, spec: bool) -> Settings:
    return Settings(steps, topk, draft_tokens, list(aux_ids), list(default_ids), tp, spec,
                    seed=int(os.environ.get("EAGLE_SIM_SEED", "0") or 0),
                    noise_pct=float(os.environ.get("EAGLE_SIM_NOISE_PCT", "1.0") or 0))


def ttft_s(s: Settings, input_len: int) -> float:
    """Prefill of the target, plus the draft's own prefill and first speculative step."""
    t = 0.012 + 0.00002 * input_len
    if s.spec:
        t *= 1.0 + 0.03 * (s.steps or 1) + 0.015 * max(1, s.topk or 1)
    return t / (1.0 + 0.6 * (max(1, s.tp) - 1))
