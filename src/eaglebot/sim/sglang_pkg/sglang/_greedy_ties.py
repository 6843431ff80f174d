"""SIMULATED: the target's top-2 logprobs at each greedy position, and where a speculative server's
output leaves the target's at a tie.

Standard library only (it runs on the GPU host with whatever Python is there). Calibrated on a
trained EAGLE-3 pair (8-layer Llama, real SGLang 0.5.17 on an H200, 16 prompts x 128 greedy tokens;
docs/gpu-validation.md): the plain server's top-2 logprobs were under 0.01 nats apart at 0.39% of
positions and under 0.1 at 1.22% (bf16 logits: 0.0, or one step, 0.0625), the median margin was
4.1 nats; with the draft, 3 of 16 outputs differed, each from a position whose margin was 0.0 or
0.0625. So here a position's margin is 0.0 with probability TIE_ZERO, one bf16 step with TIE_STEP,
else clear (0.25 nats and up, median ~4); a speculative server emits the runner-up at a tied
position with probability FLIP: 1 - (1 - 0.0122 * 0.133) ** 128 = 0.19, the 3 of 16 measured.
"""
from __future__ import annotations

import random

TIE_ZERO = 0.0039
TIE_STEP = 0.0083
FLIP = 0.133
BF16_STEP = 0.0625
VOCAB = 32000

Row = list[tuple[float, int]]     # [(logprob, id) of the top-1, (logprob, id) of the top-2]


def top2(seed: bytes, ids: list[int]) -> list[Row]:
    """The target's top-2 at each position of a greedy output (the top-1 is the token emitted)."""
    rng = random.Random(seed + b"top2")
    rows: list[Row] = []
    for t in ids:
        u = rng.random()
        margin = 0.0 if u < TIE_ZERO else BF16_STEP if u < TIE_ZERO + TIE_STEP else \
            round(0.25 + rng.expovariate(1 / 5.6), 4)
        lp1 = -round(rng.uniform(0.0, 0.7), 4)
        rows.append([(lp1, t), (round(lp1 - margin, 4), (t + 1 + rng.randrange(VOCAB - 1)) % VOCAB)])
    return rows


def is_tie(row: Row) -> bool:
    return row[0][0] - row[1][0] <= BF16_STEP + 1e-9


def flip_at(seed: bytes, rows: list[Row]) -> int | None:
    """The first tied position where a speculative server emits the runner-up (None: nowhere)."""
    rng = random.Random(seed + b"spec")
    return next((k for k, row in enumerate(rows) if is_tie(row) and rng.random() < FLIP), None)


def branch(seed: bytes, k: int, first: int, n: int) -> list[int]:
    """The greedy continuation once position k emitted `first` instead of the target's token: another
    prefix, other tokens (n in all, `first` included)."""
    rng = random.Random(seed + b"branch" + k.to_bytes(4, "big"))
    return [first] + [rng.randrange(VOCAB) for _ in range(n - 1)]
