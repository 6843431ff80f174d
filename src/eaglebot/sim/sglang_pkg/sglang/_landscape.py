"""SIMULATED per-batch-size landscape of speculative decoding: what `eagle tune` is tested against.

Standard library only (it runs on the GPU host with whatever Python is there). On when the
server's environment has EAGLE_SIM_LANDSCAPE=<seed>; without it the simulator keeps its old,
batch-size-blind model (`_perf_model`). Every number is SIMULATED, a deterministic function of
the seed, the batch size and the speculative settings, shaped the way EAGLE decoding behaves on
a GPU:

- acceptance by draft position: position i of a chain is accepted (given the ones before it)
  with `a1 * decay**(i-1)`; a tree (topk > 1) spends its extra draft tokens on alternatives
  where the path is likeliest (the early positions), each alternative catching what the ones
  before missed with probability `alt_gain`, at most topk per position;
- the cost of a decode step: a fixed part, a part per running request, one target forward that
  verifies `batch * draft_tokens` tokens and `steps` draft forwards of `batch * topk` tokens,
  each a smooth roofline (flat while memory-bound, linear once compute-bound: `knee` tokens);
  a tree also pays for its attention mask. So at batch 1 a wide tree is nearly free and wins;
  at batch 64 every verified token costs and a short chain wins: the optimum moves with the
  batch size, as it does on real GPUs (Qwen3-235B: steps 4 at BS 1, 2 at BS 64).
`best(landscape, batch)` is the grid's true optimum (tests check the tuner finds it).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

STEPS = tuple(range(1, 9))
TOPK = (1, 2, 4, 8)
DRAFT_TOKENS = (4, 8, 16, 32)
# the decode CUDA-graph batch sizes SGLang 0.5.23 captures with speculative decoding
# (arg_groups/cuda_graph_hook.py, generate_decode_cuda_graph_batch_sizes)
CUDA_GRAPH_BS = (*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8))

Cell = tuple[int, int, int]   # (steps, topk, draft_tokens), as SGLang runs it


@dataclass(frozen=True)
class Landscape:
    seed: int
    a1: float           # acceptance of the first draft position
    decay: float        # each later position keeps this share of the one before's acceptance
    alt_gain: float     # chance that one more alternative at a position catches the target's token
    t_target: float     # one target forward while memory-bound (s)
    knee: float         # verified tokens per step where the target turns compute-bound
    sharp: float        # how sharp that turn is (the roofline's exponent)
    t_draft: float      # one draft forward while memory-bound (s)
    draft_knee: float
    t_fixed: float      # scheduling and sampling per step (s)
    t_per_req: float    # per running request per step (s)
    t_tree: float       # tree-mask attention per step, per extra branch (s)
    prompt_spread: float  # prompts differ: a prompt's acceptance is scaled within +- this


def make(seed: int) -> Landscape:
    r = random.Random(f"eagle-landscape-{seed}")
    return Landscape(seed=seed, a1=r.uniform(0.74, 0.86), decay=r.uniform(0.93, 0.98),
                     alt_gain=r.uniform(0.20, 0.34), t_target=r.uniform(0.010, 0.016),
                     knee=r.uniform(110.0, 300.0), sharp=r.uniform(2.0, 4.0), t_draft=r.uniform(0.0006, 0.0012),
                     draft_knee=r.uniform(300.0, 900.0), t_fixed=r.uniform(0.0006, 0.0014),
                     t_per_req=r.uniform(0.000008, 0.000025), t_tree=r.uniform(0.00005, 0.00025),
                     prompt_spread=r.uniform(0.03, 0.08))


def valid(cell: Cell) -> bool:
    """SGLang 0.5.23 runs the cell as asked: a chain verifies steps + 1 tokens; a tree picks its
    draft_tokens - 1 nodes among topk + (steps - 1) * topk^2 candidates (torch.topk would fail)."""
    steps, topk, n = cell
    if steps < 1 or topk < 1 or n < 2:
        return False
    if topk == 1:
        return n == steps + 1
    return n - 1 <= topk + (steps - 1) * topk * topk


def cells(steps: tuple[int, ...] = STEPS, topks: tuple[int, ...] = TOPK,
          drafts: tuple[int, ...] = DRAFT_TOKENS) -> list[Cell]:
    out: list[Cell] = []
    for k in topks:
        for s in steps:
            for n in ([s + 1] if k == 1 else drafts):
                if valid((s, k, n)) and (s, k, n) not in out:
                    out.append((s, k, n))
    return out


def depth(cell: Cell) -> int:
    steps, _, n = cell
    return max(1, min(steps, n - 1))


def positions(ls: Landscape, cell: Cell, scale: float = 1.0) -> list[float]:
    """Acceptance of each draft position given the ones before it (`scale`: a prompt's, or a
    capture-layer mismatch's, factor on the chain's acceptance)."""
    _, topk, n = cell
    d = depth(cell)
    chain = [min(0.995, ls.a1 * ls.decay ** i * scale) for i in range(d)]
    if topk == 1:
        return chain
    extra = max(0, n - 1 - d)
    path, run = [], 1.0
    for c in chain:
        path.append(run)
        run *= c
    total = sum(path)
    out = []
    for c, w in zip(chain, path):
        alts = min(float(topk), 1.0 + extra * w / total)
        out.append(1.0 - (1.0 - c) * (1.0 - ls.alt_gain) ** (alts - 1.0))
    return out


def accept_length(pos: list[float]) -> float:
    total, run = 1.0, 1.0
    for a in pos:
        run *= a
        total += run
    return total


def _roof(t0: float, tokens: float, knee: float, sharp: float) -> float:
    return float(t0 * (1.0 + (tokens / knee) ** sharp) ** (1.0 / sharp))


def step_s(ls: Landscape, batch: int, cell: Cell | None) -> float:
    """One decode step at this batch size (`cell` None: the target alone)."""
    b = max(1, batch)
    base = ls.t_fixed + ls.t_per_req * b
    if cell is None:
        return base + _roof(ls.t_target, b, ls.knee, ls.sharp)
    steps, topk, n = cell
    t = base + _roof(ls.t_target, b * n, ls.knee, ls.sharp)
    t += steps * _roof(ls.t_draft, b * topk, ls.draft_knee, ls.sharp)
    if topk > 1:
        t += ls.t_tree * (topk - 1) * steps
    return t


def tok_s(ls: Landscape, batch: int, cell: Cell) -> float:
    """Decode throughput (output tokens/s) of `batch` running requests."""
    return batch * accept_length(positions(ls, cell)) / step_s(ls, batch, cell)


def best(ls: Landscape, batch: int, grid: list[Cell] | None = None) -> tuple[Cell, float]:
    """The grid's true optimum at this batch size, and its tok/s."""
    return max(((c, tok_s(ls, batch, c)) for c in (grid or cells())), key=lambda ct: ct[1])


def pad_batch(running: int) -> int:
    """The CUDA-graph batch size SGLang pads a running batch to."""
    return next((int(b) for b in CUDA_GRAPH_BS if running <= b), running)


def prompt_scale(ls: Landscape, key: str) -> float:
    """A prompt's own acceptance factor (some prompts are easier to draft than others)."""
    u = random.Random(f"{ls.seed}|{key}").random()
    return 1.0 + (2.0 * u - 1.0) * ls.prompt_spread


def histogram(verify_ct: int, pos: list[float]) -> list[int]:
    """Verify passes that accepted k draft tokens, k = 0..depth (largest-remainder rounding), as
    SGLang's `spec_correct_drafts_histogram`."""
    shares, run = [], 1.0
    for a in pos:
        shares.append(run * (1.0 - a))
        run *= a
    shares.append(run)
    raw = [s * verify_ct for s in shares]
    counts = [math.floor(x) for x in raw]
    for i in sorted(range(len(raw)), key=lambda i: raw[i] - counts[i], reverse=True)[:verify_ct - sum(counts)]:
        counts[i] += 1
    while len(counts) > 1 and counts[-1] == 0:
        counts.pop()                    # SGLang's histogram ends at the longest acceptance seen
    return counts
