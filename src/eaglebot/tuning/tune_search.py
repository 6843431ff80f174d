"""Which cells to launch, in which order, and when to stop: the tuner's search, over a
`measure(cell, phase)` callback (a relaunch and a benchmark at every batch size on a real host; a
landscape in the tests), so the search itself has no I/O.

1. Profile: the chains at the shortest, a middle and the longest depth of the grid (the longest
   first: its per-position acceptance predicts every chain; the other two give the cost of a step).
2. Every chain is predicted at every batch size (`ChainModel`), once, before anything else is
   launched: what the report calls "predicted" is never fitted to what was verified after it.
3. Trees are measured: first one per topk (the one the surrogate ranks best), then, as for the
   chains, the cell that could stand highest above the best measured at some batch size, until
   none could beat one by more than the noise, or the budget (launches or time) is spent. Each
   launch is benchmarked at every batch size, so one launch informs them all.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from eaglebot.tuning.tune_model import Cell, ChainModel, Measurement, TreeSurrogate

Measure = Callable[[Cell, str], Awaitable["Measurement | str"]]   # a measurement, or why the launch failed

VERIFY_TOP = 1      # chains verified per batch size: the best predicted (trees take the rest of the budget)
MIN_MARGIN = 0.01   # a cell is worth a launch when it could come within 1% of a best (or the noise, if larger)


@dataclass
class Plan:
    batch_sizes: list[int]
    grid: list[Cell]
    max_launches: int
    budget_s: float | None = None
    reserve: int = 0                 # launches kept back (the flap test's)
    current: Measurement | None = None


@dataclass
class SearchResult:
    measured: dict[Cell, Measurement] = field(default_factory=dict)
    predicted: dict[Cell, dict[int, float]] = field(default_factory=dict)
    order: list[Cell] = field(default_factory=list)
    failed: dict[Cell, str] = field(default_factory=dict)
    stopped: str = ""
    launches: int = 0
    seconds: float = 0.0
    model_source: str = ""
    chains: ChainModel | None = None

    def best(self, bs: int) -> Measurement | None:
        cands = [m for m in self.measured.values() if m.tok_s.get(bs, 0) > 0]
        return max(cands, key=lambda m: m.tok_s[bs]) if cands else None


def profile_depths(grid: list[Cell]) -> list[int]:
    depths = sorted({c[0] for c in grid if c[1] == 1})
    if len(depths) <= 3:
        return depths[::-1]
    mid = min(depths, key=lambda d: (abs(d - (depths[0] + depths[-1]) / 2), d))
    return [depths[-1], depths[0], mid]


class _Clock:
    def __init__(self, plan: Plan, now: Callable[[], float]):
        self.plan, self.now, self.t0 = plan, now, now()
        self.launches = 0
        self.durations: list[float] = []

    def left(self) -> str | None:
        """Why no further launch fits the budget, or None."""
        p = self.plan
        if self.launches >= p.max_launches - p.reserve:
            return f"launch budget spent ({self.launches} of {p.max_launches}" + (
                f", {p.reserve} kept for the flap test)" if p.reserve else ")")
        if p.budget_s is not None and self.durations:
            used = self.now() - self.t0
            if used + statistics.median(self.durations) > p.budget_s:
                return f"time budget: {used:.0f} s used of {p.budget_s:.0f} s, a launch takes about " \
                       f"{statistics.median(self.durations):.0f} s"
        return None


async def search(plan: Plan, measure: Measure, now: Callable[[], float] = time.monotonic) -> SearchResult:
    res = SearchResult()
    clock = _Clock(plan, now)
    if plan.current is not None:
        res.measured[plan.current.cell] = plan.current

    async def launch(cell: Cell, phase: str) -> Measurement | None:
        t = now()
        got = await measure(cell, phase)
        clock.launches += 1
        clock.durations.append(now() - t)
        res.order.append(cell)
        if isinstance(got, str):
            res.failed[cell] = got
            return None
        got.phase = phase
        res.measured[cell] = got
        return got

    profiles: list[Measurement] = []
    for d in profile_depths(plan.grid):
        if (why := clock.left()) is not None:
            res.stopped = why
            break
        m = await launch((d, 1, d + 1), "profile")
        if m is None and not profiles:
            res.stopped = f"the profile launch of the longest chain failed: {res.failed[(d, 1, d + 1)]}"
            break
        if m is not None:
            profiles.append(m)
    if not profiles:
        return _done(res, clock, now)
    chains = ChainModel(profiles)
    res.chains, res.model_source = chains, chains.source
    sizes = [b for b in plan.batch_sizes if b in chains.batch_sizes]
    for c in plan.grid:
        if c[1] == 1:
            res.predicted[c] = {b: chains.predict(b, c[0]) for b in sizes}

    def margin() -> float:
        noise = [m.rel_noise() for m in res.measured.values()]
        return max(MIN_MARGIN, 2.0 * statistics.median(noise)) if noise else MIN_MARGIN

    def ratios(cell: Cell, tree: TreeSurrogate) -> list[float]:
        """How high the cell could stand against the best measured, at each batch size."""
        out = []
        for b in sizes:
            best = res.best(b)
            ref = best.tok_s[b] if best else 0.0
            guess = res.predicted[cell][b] if cell[1] == 1 else tree.guess(b, cell, optimistic=True)
            out.append(guess / ref if ref > 0 else float("inf"))
        return out

    def standing(cell: Cell, tree: TreeSurrogate) -> float:
        return max(ratios(cell, tree))

    def worth(cell: Cell, tree: TreeSurrogate) -> float:
        """What a launch of the cell could bring: its rise above (1 - margin) of the best measured,
        summed over the batch sizes (a cell that may win at three sizes beats one that may win at one)."""
        floor = 1.0 - margin()
        return sum(max(0.0, r - floor) for r in ratios(cell, tree))

    def open_cells() -> list[Cell]:
        return [c for c in plan.grid if c not in res.measured and c not in res.failed]

    # verify the chains predicted best at each batch size (the top VERIFY_TOP, within the margin)
    wanted: list[Cell] = []
    for b in sizes:
        ranked = sorted(res.predicted, key=lambda c: -res.predicted[c][b])
        top = res.predicted[ranked[0]][b]
        wanted += [c for c in ranked[:VERIFY_TOP] if res.predicted[c][b] >= top * (1.0 - margin())]
    for cell in sorted(dict.fromkeys(wanted), key=lambda c: -standing(c, TreeSurrogate(chains, []))):
        if cell in res.measured or cell in res.failed or res.stopped:
            continue
        if (why := clock.left()) is not None:
            res.stopped = why
            break
        await launch(cell, "verify")
    # one tree per topk next: the surrogate knows nothing of a topk until one was measured
    for k in sorted({c[1] for c in plan.grid if c[1] > 1}):
        if any(c[1] == k for c in res.measured) or res.stopped:
            continue
        tree = TreeSurrogate(chains, list(res.measured.values()))
        cands = [c for c in open_cells() if c[1] == k]
        if not cands:
            continue
        if (why := clock.left()) is not None:
            res.stopped = why
            break
        await launch(max(cands, key=lambda c: standing(c, tree)), "verify")
    while not res.stopped:
        tree = TreeSurrogate(chains, list(res.measured.values()))
        cands = open_cells()
        if not cands:
            res.stopped = "every cell of the grid was measured"
            break
        cell = max(cands, key=lambda c: (worth(c, tree), standing(c, tree)))
        top = standing(cell, tree)
        if top < 1.0 - margin():
            break
        if (why := clock.left()) is not None:
            res.stopped = why
            break
        await launch(cell, "verify")
    # Then climb: the neighbours of each batch size's best, until none is left unmeasured (a local
    # optimum the surrogate's errors cannot hide) or the budget is spent.
    while not res.stopped:
        tree = TreeSurrogate(chains, list(res.measured.values()))
        near = [c for b in sizes if (best := res.best(b)) is not None for c in neighbours(best.cell)
                if c in plan.grid and c not in res.measured and c not in res.failed]
        if not near:
            res.stopped = ("no cell left that could come within "
                           f"{margin() * 100:.1f}% of the best measured, and every neighbour of each batch size's "
                           "best was measured")
            break
        if (why := clock.left()) is not None:
            res.stopped = why
            break
        await launch(max(dict.fromkeys(near), key=lambda c: (worth(c, tree), standing(c, tree))), "verify")
    return _done(res, clock, now)


def neighbours(cell: Cell) -> list[Cell]:
    """One step along each axis: steps +-1, draft tokens x2 or /2, topk x2 or /2 (a chain's draft
    tokens follow its steps)."""
    s, k, n = cell
    out: list[Cell] = []
    for ds in (-1, 1):
        out.append((s + ds, k, n if k > 1 else s + ds + 1))
    if k > 1:
        out += [(s, k, n * 2), (s, k, n // 2), (s, k * 2, n), (s, k // 2, n if k // 2 > 1 else s + 1)]
    else:
        out.append((s, 2, max(4, 2 * (s + 1))))
    return [c for c in out if c != cell and c[0] >= 1 and c[1] >= 1 and c[2] >= 2]


def _done(res: SearchResult, clock: _Clock, now: Callable[[], float]) -> SearchResult:
    res.launches = clock.launches
    res.seconds = now() - clock.t0
    return res
