"""What one profile tells about every speculative config: pure arithmetic, no host, no store.

A cell is (steps, topk, draft_tokens) as SGLang runs it. A launch is measured at every batch
size (`Measurement`). For a topk = 1 chain the draft's token at position k does not depend on
how many steps follow it, so the longest chain's per-position acceptance (SGLang's
`spec_correct_drafts_histogram`: verify passes that accepted k drafts) gives the accept length
of every shorter chain: L(d) = 1 + sum_{k<=d} P(accepted >= k). The cost of a step is what the
profile launches measured at each batch size, `batch * L / tok_s`, interpolated over the number
of steps between the chain depths profiled (a quadratic through three: the verify cost turns
from flat to linear in the verified tokens as the GPU becomes compute-bound). So every chain is
predicted at every batch size; trees (topk > 1) are measured, and only ranked here by a rough
surrogate (`TreeSurrogate`) that decides which ones are worth a launch.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

Cell = tuple[int, int, int]


def valid(cell: Cell) -> bool:
    """SGLang 0.5.23 runs the cell as asked: a chain verifies steps + 1 tokens (other draft token
    counts are rewritten); a tree picks draft_tokens - 1 nodes among topk + (steps-1) * topk^2
    candidates (more fails in torch.topk when the tree is built)."""
    steps, topk, n = cell
    if steps < 1 or topk < 1 or n < 2:
        return False
    if topk == 1:
        return n == steps + 1
    return n - 1 <= topk + (steps - 1) * topk * topk


def grid(steps: list[int], topks: list[int], drafts: list[int]) -> list[Cell]:
    out: list[Cell] = []
    for k in topks:
        for s in steps:
            for n in ([s + 1] if k == 1 else drafts):
                if valid((s, k, n)) and (s, k, n) not in out:
                    out.append((s, k, n))
    return out


def label(cell: Cell) -> str:
    return f"steps={cell[0]} topk={cell[1]} draft={cell[2]}"


def mad(values: list[float]) -> float:
    """Median absolute deviation (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    m = statistics.median(values)
    return statistics.median(abs(v - m) for v in values)


@dataclass
class Measurement:
    """One launch of a cell, benchmarked at each batch size (median and MAD over the repeats)."""

    cell: Cell
    tok_s: dict[int, float]
    samples: dict[int, list[float]] = field(default_factory=dict)
    accept_length: float | None = None
    histogram: list[int] | None = None          # summed over requests
    request_means: list[float] = field(default_factory=list)   # accepted drafts per verify, per request
    run_ids: list[int] = field(default_factory=list)
    seconds: float = 0.0
    phase: str = "verify"                       # profile | verify | current

    def spread(self, bs: int) -> float:
        return mad(self.samples.get(bs) or [])

    def rel_noise(self) -> float:
        """The largest MAD relative to the median over the batch sizes (the benchmark's noise)."""
        return max((self.spread(b) / v for b, v in self.tok_s.items() if v > 0), default=0.0)


# -- acceptance ---------------------------------------------------------------------------------

def prefix_acceptance(hist: list[int]) -> list[float]:
    """P(accepted >= k), k = 1..len(hist)-1, from verify passes that accepted k drafts."""
    total = sum(hist)
    if total <= 0:
        return []
    out, tail = [], total
    for c in hist[:-1]:
        tail -= c
        out.append(tail / total)
    return out


def chain_accept(prefix: list[float], d: int) -> float:
    """Accept length of a chain of d steps (tokens per verify, the bonus token included)."""
    return 1.0 + sum(prefix[:d])


def geometric_prefix(accept_length: float, depth: int) -> list[float]:
    """Where no histogram came back: the per-position acceptance p that gives this accept length
    at this depth, assumed equal at every position (1 + p + ... + p^depth = L)."""
    target = max(1.0, min(accept_length, depth + 1.0))
    lo, hi = 0.0, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        if sum(p ** k for k in range(depth + 1)) < target:
            lo = p
        else:
            hi = p
    p = (lo + hi) / 2
    return [p ** k for k in range(1, depth + 1)]


def conditional(prefix: list[float]) -> list[float]:
    """Acceptance of each position given the ones before it."""
    out, before = [], 1.0
    for p in prefix:
        out.append(p / before if before > 0 else 0.0)
        before = p
    return out


def depth_moments(prefix: list[float], d: int) -> tuple[float, float]:
    """Mean and variance of accepted drafts per verify at depth d: the EMA SGLang's adaptive
    steps tracks. The variance is of one verify of one request (a truncated count)."""
    mean = sum(prefix[:d])
    # E[min(A, d)^2] = sum_k (2k - 1) P(A >= k), k = 1..d
    second = sum((2 * k - 1) * prefix[k - 1] for k in range(1, min(d, len(prefix)) + 1))
    return mean, max(0.0, second - mean * mean)


# -- the chain model ----------------------------------------------------------------------------

def _interp(points: list[tuple[int, float]], x: int) -> float:
    """Through the points (sorted by x): a quadratic through the three nearest inside their
    range, linear from the two nearest outside it or with only two."""
    pts = sorted(points)
    if len(pts) == 1:
        return pts[0][1]
    if len(pts) >= 3 and pts[0][0] <= x <= pts[-1][0]:
        near = sorted(sorted(pts, key=lambda p: (abs(p[0] - x), p[0]))[:3])
        total = 0.0
        for i, (xi, yi) in enumerate(near):
            w = 1.0
            for j, (xj, _) in enumerate(near):
                if j != i:
                    w *= (x - xj) / (xi - xj)
            total += w * yi
        return total
    (x0, y0), (x1, y1) = (pts[:2] if x < pts[0][0] else pts[-2:] if x > pts[-1][0] else
                          min(zip(pts, pts[1:]), key=lambda ab: abs(ab[0][0] - x) + abs(ab[1][0] - x)))
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


class ChainModel:
    """Predicted tok/s of every topk = 1 chain at every batch size, from the profile launches."""

    def __init__(self, profiles: list[Measurement]):
        chains = [m for m in profiles if m.cell[1] == 1]
        if not chains:
            raise ValueError("the profile needs at least one topk = 1 chain")
        longest = max(chains, key=lambda m: m.cell[0])
        self.max_depth = longest.cell[0]
        if longest.histogram and len(longest.histogram) > 1:
            self.prefix = prefix_acceptance(longest.histogram)
            self.prefix += [0.0] * (self.max_depth - len(self.prefix))
            self.source = "histogram"
        else:
            self.prefix = geometric_prefix(longest.accept_length or 1.0, self.max_depth)
            self.source = "accept length"
        self.request_means = list(longest.request_means)
        self.batch_sizes = sorted(set.intersection(*(set(m.tok_s) for m in chains)))
        self.eff: dict[int, list[tuple[int, float]]] = {b: [] for b in self.batch_sizes}
        for m in chains:
            d = m.cell[0]
            for b in self.batch_sizes:
                if m.tok_s.get(b, 0) > 0:
                    self.eff[b].append((d, b * self.accept(d) / m.tok_s[b]))

    def accept(self, d: int) -> float:
        return chain_accept(self.prefix, d)

    def step_s(self, bs: int, d: int) -> float:
        return max(1e-9, _interp(self.eff[bs], d))

    def predict(self, bs: int, d: int) -> float:
        """Output tok/s of a chain of d steps with `bs` requests running."""
        return bs * self.accept(d) / self.step_s(bs, d)


# -- trees: a rough surrogate that only ranks them ----------------------------------------------

def tree_positions(cond: list[float], cell: Cell, gain: float) -> list[float]:
    """Per-position acceptance of a tree as SGLang builds it: of the candidates (each node's topk
    children), the draft_tokens - 1 with the highest path score are kept (`organize_draft_results`).
    Along the chain the accepted path follows, the node at depth i scores P(reach i) * c_i; its j-th
    sibling P(reach i) * (1 - c_i) * gain * (1 - gain)^(j-2), `gain` being the chance that one more
    alternative catches the target's token. A position with m kept nodes accepts with
    1 - (1 - c_i)(1 - gain)^(m - 1)."""
    steps, k, n = cell
    d = min(steps, len(cond))
    scored = []
    reach = 1.0
    for i in range(d):
        c = cond[i]
        scored.append((reach * c, i))
        for j in range(2, k + 1):
            scored.append((reach * (1.0 - c) * gain * (1.0 - gain) ** (j - 2), i))
        reach *= c
    kept = [0] * d
    for _, i in sorted(scored, key=lambda si: -si[0])[:max(0, n - 1)]:
        kept[i] += 1
    out = []
    for i in range(d):
        if kept[i] == 0:
            break
        out.append(1.0 - (1.0 - cond[i]) * (1.0 - gain) ** (kept[i] - 1))
    return out


def _length(pos: list[float]) -> float:
    total, run = 1.0, 1.0
    for a in pos:
        run *= a
        total += run
    return total


class TreeSurrogate:
    """Accept length and step time of a tree, guessed from the chain model and the trees measured:
    the acceptance by SGLang's tree construction (`tree_positions`, `gain` fitted per topk), the
    step as the chain's of the same depth plus u_b per extra verified token and w_b per extra
    branch and step (fitted per batch size, pulled towards a prior). It ranks which tree to launch
    next, with an optimism that shrinks as trees near it are measured; never a reported prediction."""

    PRIOR_GAIN = 0.25
    OPTIMISM = 0.3

    def __init__(self, chains: ChainModel, measured: list[Measurement]):
        self.chains = chains
        self.cond = conditional(chains.prefix)
        self.trees = [m for m in measured if m.cell[1] > 1]
        self.gain: dict[int, float] = {}
        for k in sorted({m.cell[1] for m in self.trees}):
            fits = [self._fit_gain(m) for m in self.trees if m.cell[1] == k and m.accept_length]
            if fits:
                self.gain[k] = statistics.median(fits)
        self.cost: dict[int, tuple[float, float]] = {}
        for b in chains.batch_sizes:
            self.cost[b] = self._fit_cost(b, [m for m in self.trees if m.tok_s.get(b, 0) > 0 and m.accept_length])

    def _gain_of(self, k: int) -> float:
        if k in self.gain:
            return self.gain[k]
        if self.gain:
            return self.gain[min(self.gain, key=lambda kk: abs(math.log2(kk) - math.log2(k)))]
        return self.PRIOR_GAIN

    def _fit_gain(self, m: Measurement) -> float:
        target = m.accept_length or 1.0
        lo, hi = 0.0, 0.999
        for _ in range(40):
            mid = (lo + hi) / 2
            if _length(tree_positions(self.cond, m.cell, mid)) < target:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def accept(self, cell: Cell) -> float:
        return _length(tree_positions(self.cond, cell, self._gain_of(cell[1])))

    def optimism(self, cell: Cell) -> float:
        """How far the guess may be off: a share of what the tree is guessed to add to its chain's
        accept length (a tree barely wider than its chain is barely uncertain), less the more
        measured trees are near it."""
        near = sum(1 for m in self.trees if m.cell[1] == cell[1] and abs(m.cell[0] - cell[0]) <= 1
                   and abs(math.log2(m.cell[2]) - math.log2(cell[2])) <= 1)
        d = max(1, min(cell[0], cell[2] - 1))
        gain = max(0.0, self.accept(cell) / self.chains.accept(d) - 1.0)
        return self.OPTIMISM * gain / (1 + 2 * near)

    def _fit_cost(self, b: int, trees: list[Measurement]) -> tuple[float, float]:
        ch = self.chains
        d_hi = min(ch.max_depth, 4)
        slope = max(1e-6, (ch.step_s(b, d_hi) - ch.step_s(b, 1)) / max(1, d_hi - 1))
        prior = (0.5 * slope, 0.1 * slope)
        if not trees:
            return prior
        # ridge regression of the trees' extra step time on (extra tokens, extra branch-steps),
        # pulled towards the prior: (X'X + lam I) [u w]' = X'e + lam [u0 w0]'
        lam = 1.0
        rows = []
        for m in trees:
            d = max(1, min(m.cell[0], m.cell[2] - 1))
            extra = b * (m.accept_length or 1.0) / m.tok_s[b] - ch.step_s(b, d)
            rows.append((float(m.cell[2] - d - 1), float(d * (m.cell[1] - 1)), extra))
        a11 = sum(x * x for x, _, _ in rows) + lam
        a12 = sum(x * y for x, y, _ in rows)
        a22 = sum(y * y for _, y, _ in rows) + lam
        r1 = sum(x * e for x, _, e in rows) + lam * prior[0]
        r2 = sum(y * e for _, y, e in rows) + lam * prior[1]
        det = a11 * a22 - a12 * a12
        u = (r1 * a22 - r2 * a12) / det
        w = (a11 * r2 - a12 * r1) / det
        return max(0.0, u), max(0.0, w)

    def step_s(self, bs: int, cell: Cell) -> float:
        d = max(1, min(cell[0], cell[2] - 1))
        u, w = self.cost[bs]
        return self.chains.step_s(bs, d) + u * (cell[2] - d - 1) + w * d * (cell[1] - 1)

    def guess(self, bs: int, cell: Cell, optimistic: bool = False) -> float:
        g = bs * self.accept(cell) / self.step_s(bs, cell)
        return g * (1.0 + self.optimism(cell)) if optimistic else g
