"""Change points of a metric's series: E-divisive means with a Student t-test (Hunter/Otava).

Pure math over a list of values (oldest first). Hunter (MongoDB, now Apache Otava) splits a
series where the energy distance between the two sides is largest (Matteson & James'
E-divisive with alpha = 1), keeps the split only when a two-sample t-test says the two
sides' means differ (p below a threshold; deterministic, no permutations), and recurses
into both sides. We do the same, with one difference: when the best split is not
significant we still look inside both halves. A few low runs at one end (a cold first
night, a reference run) pull the top split beside them, where the t-test fails; Hunter then
stops and a lasting step elsewhere in the series goes unseen. And the t-test is run on each
side with its outliers trimmed (beyond TRIM_SIGMA robust sigmas of the side's median): three
one-night dips before a 10% step made the before side's variance so large that no split was
ever significant. Every split kept is re-tested against its neighbours at the end, so
looking further adds no point that is not significant.

Written here rather than taken from Otava because Otava is an application (a CLI with its
own storage and config) whose package pins an old Python stack; the method is ~100 lines.
numpy makes the energy statistic O(n^2) per level through 2-D prefix sums over the
pairwise-distance matrix, which matters: the post-run check runs it for every metric of
every run.

A slow drift has no single step, but E-divisive still splits it where the two halves'
means differ most, and with enough runs the t-test is significant: that is how a decline
of under 1% a night is caught. Noise alone rarely passes p < 0.001 and never passes the
`min_pct` size floor the caller applies.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_P = 0.001        # Otava's default significance threshold
MIN_SEGMENT = 3          # fewest points on either side of a split
TRIM_SIGMA = 4.0         # a point this many robust sigmas (1.4826·MAD) from its side's median: an outlier
TRIM_MIN = 5             # sides shorter than this are tested as they are


def delta_pct(before: float, after: float) -> float:
    """The change from before to after in percent of before (0 when before is 0)."""
    return 0.0 if before == 0 else 100.0 * (after - before) / abs(before)


@dataclass(frozen=True)
class ChangePoint:
    index: int            # first index of the new segment
    before_mean: float
    after_mean: float
    pvalue: float

    @property
    def delta_pct(self) -> float:
        return delta_pct(self.before_mean, self.after_mean)

    @property
    def confidence(self) -> float:
        return 1.0 - self.pvalue


def _energy_split(x: np.ndarray, min_seg: int) -> tuple[int, float] | None:
    """The split index maximising E-divisive's Q statistic (alpha = 1), and Q."""
    n = len(x)
    if n < 2 * min_seg:
        return None
    d = np.abs(x[:, None] - x[None, :])
    # P[i, j] = sum of d[:i, :j]
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    best: tuple[int, float] | None = None
    for t in range(min_seg, n - min_seg + 1):
        m = n - t
        between = p[t, n] - p[t, 0] - p[0, n] + p[0, 0] - (p[t, t] - p[0, t])   # sum d[:t, t:]
        within_l = p[t, t]                                                     # sum d[:t, :t]
        within_r = p[n, n] - p[t, n] - p[n, t] + p[t, t]                       # sum d[t:, t:]
        e = 2.0 * between / (t * m) - within_l / (t * (t - 1)) - within_r / (m * (m - 1))
        q = e * t * m / n
        if best is None or q > best[1]:
            best = (t, float(q))
    return best


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (Numerical Recipes 6.4)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / c if abs(c) > 1e-300 else 1.0 + aa / 1e-300
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + aa / c if abs(c) > 1e-300 else 1.0 + aa / 1e-300
        de = d * c
        h *= de
        if abs(de - 1.0) < 1e-12:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1.0 - x)
    front = math.exp(lbeta)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_test_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of Welch's t-test (no scipy: the t CDF via the incomplete beta)."""
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return 1.0
    va, vb = float(a.var(ddof=1)), float(b.var(ddof=1))
    diff = float(a.mean() - b.mean())
    se2 = va / na + vb / nb
    if se2 <= 0:
        return 0.0 if diff != 0 else 1.0
    t = diff / math.sqrt(se2)
    df = se2 ** 2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)) if va > 0 and vb > 0 \
        else float(na + nb - 2)
    return _betai(df / 2.0, 0.5, df / (df + t * t))


def trimmed(x: np.ndarray) -> np.ndarray:
    """`x` without its outliers (beyond TRIM_SIGMA robust sigmas of its median), for the t-test."""
    if len(x) < TRIM_MIN:
        return x
    med = float(np.median(x))
    mad = 1.4826 * float(np.median(np.abs(x - med)))
    if mad == 0:
        return x
    kept = x[np.abs(x - med) <= TRIM_SIGMA * mad]
    return kept if len(kept) >= 2 else x


def split_p(a: np.ndarray, b: np.ndarray) -> float:
    """The p-value a split is judged by: Welch's t-test on both sides, outliers trimmed."""
    return t_test_p(trimmed(a), trimmed(b))


def change_points(values: list[float], pvalue: float = DEFAULT_P,
                  min_segment: int = MIN_SEGMENT) -> list[ChangePoint]:
    """Significant change points of `values` (oldest first), in order."""
    x = np.asarray(values, dtype=float)
    found: list[int] = []

    def split(lo: int, hi: int) -> None:
        seg = x[lo:hi]
        res = _energy_split(seg, min_segment)
        if res is None:
            return
        t, _q = res
        if split_p(seg[:t], seg[t:]) < pvalue:
            found.append(lo + t)
        split(lo, lo + t)
        split(lo + t, hi)

    split(0, len(x))
    found.sort()
    while True:     # drop the least significant point between its neighbours until all pass
        bounds = [0, *found, len(x)]
        ps = [split_p(x[bounds[i]:idx], x[idx:bounds[i + 2]]) for i, idx in enumerate(found)]
        worst = max(range(len(ps)), key=ps.__getitem__, default=None)
        if worst is None or ps[worst] < pvalue:
            break
        del found[worst]
    out: list[ChangePoint] = []
    bounds = [0, *found, len(x)]
    for i, idx in enumerate(found):
        before, after = x[bounds[i]:idx], x[idx:bounds[i + 2]]
        out.append(ChangePoint(idx, float(before.mean()), float(after.mean()), split_p(before, after)))
    return out


@dataclass(frozen=True)
class Shift:
    """Where the newest level began: a run of same-direction change points is one shift
    (a slow drift splits into several small steps), measured from the level before the
    first of them to the level the newest value is on."""

    start: int            # index of the first change point of the chain
    points: tuple[ChangePoint, ...]
    before_mean: float
    after_mean: float

    @property
    def delta_pct(self) -> float:
        return delta_pct(self.before_mean, self.after_mean)

    @property
    def pvalue(self) -> float:
        return max(c.pvalue for c in self.points)

    @property
    def confidence(self) -> float:
        return 1.0 - self.pvalue


def latest_shift(values: list[float], pvalue: float = DEFAULT_P) -> Shift | None:
    """The shift that the newest value sits after, or None when the series has no
    significant change point."""
    cps = change_points(values, pvalue)
    if not cps:
        return None
    chain = [cps[-1]]
    up = cps[-1].after_mean > cps[-1].before_mean
    for c in reversed(cps[:-1]):
        if (c.after_mean > c.before_mean) != up:
            break
        chain.insert(0, c)
    first = chain[0]
    prev_idx = cps[cps.index(first) - 1].index if cps.index(first) > 0 else 0
    x = np.asarray(values, dtype=float)
    return Shift(first.index, tuple(chain), float(x[prev_idx:first.index].mean()),
                 float(x[chain[-1].index:].mean()))
