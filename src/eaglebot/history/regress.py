"""Regression judgement (pure): what one metric of a finished run means, from rows.

`judge` compares a new value with the median of the same playbook + host + metric's
recent successful runs, and flags only when the change exceeds BOTH a minimum percentage
and k robust sigmas (1.4826·MAD). With too little history it says so and flags nothing
(fixed baselines, e.g. bench.compare, still apply). `decide` turns a judgement, the open
incident (if any) and the newest worse change point into a `MetricVerdict`: the finding to
report, the note for the audit trail, and the incident to open, flag or close. Nothing
here reads or writes the store: `recorder` loads the rows, calls these, and writes what
they decided, so the rules can be tested from plain rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import TYPE_CHECKING, Iterable, Literal, Sequence

from eaglebot.history.attribution import Change, attribution_sentence
from eaglebot.history.incidents import Closing, IncidentDecision, NewIncident
from eaglebot.sdk import Metric, Regression
from eaglebot.store.rows import IncidentRow

if TYPE_CHECKING:
    from eaglebot.config import RegressionConfig
    from eaglebot.history.changepoint import Shift

MAD_SCALE = 1.4826        # MAD -> sigma for normally distributed noise
MEAN_AD_SCALE = 1.2533    # mean absolute deviation -> sigma (fallback when MAD is 0)
BASELINE_SPAN_LIMIT = 500  # runs since a baseline that still count as its history
CP_WINDOW = 100            # runs of a metric's series searched for change points
CP_MIN_RUNS = 8            # fewer: no change-point search
RANGE_RUNS = 30            # runs whose range a new drop must leave (a second mode of the noise is no drop)
RANGE_ALLOWED = 3          # earlier runs of those that may have been as bad: a few low nights do not hide a drop...
OUTLIER_SIGMA = 4.0        # a value this many robust sigmas from the window's median is no measure of its noise
RANGE_SHARE = 0.15         # ... nor a share of them this small (a second mode recurs: 20-50% of the nights)

Verdict = Literal["insufficient", "ok", "regression", "improvement"]


# -- the math (pure) ------------------------------------------------------------------

def robust_sigma(values: list[float]) -> float:
    """1.4826·MAD; when more than half the values are equal (MAD 0), the scaled mean
    absolute deviation; 0 only when every value is the same."""
    if not values:
        return 0.0
    med = median(values)
    dev = [abs(v - med) for v in values]
    mad = median(dev)
    if mad > 0:
        return MAD_SCALE * mad
    return MEAN_AD_SCALE * (sum(dev) / len(dev))


def noise_sigma(values: list[float]) -> float:
    """The robust sigma of `values` without their outliers (beyond OUTLIER_SIGMA of it): two
    one-night dips in a window of 10 widen the MAD by a quarter, enough to let a 10% step
    pass as noise for three nights."""
    sigma = robust_sigma(values)
    if sigma == 0 or len(values) < 5:
        return sigma
    med = median(values)
    kept = [v for v in values if abs(v - med) <= OUTLIER_SIGMA * sigma]
    return robust_sigma(kept) if len(kept) >= 5 else sigma


@dataclass
class Judgement:
    """One value against its reference window (`judge`); `reason` is the sentence audited."""

    metric: str
    value: float
    better: str
    verdict: Verdict
    n: int                       # prior runs used
    reference: float | None = None   # their median
    sigma: float = 0.0
    delta_pct: float = 0.0
    reason: str = ""
    masked: bool = False         # beyond both thresholds but inside the range the metric has shown

    def as_regression(self, host: str, extra: str = "") -> Regression | None:
        """The finding to report (regression or improvement); None when nothing was flagged."""
        if self.verdict not in ("regression", "improvement"):
            return None
        reason = self.reason + (f"; {extra}" if extra else "")
        return Regression(self.metric, self.value, float(self.reference or 0.0), round(self.delta_pct, 2),
                          reason, kind=self.verdict, host=host)


def _num(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"


def range_allowed(n: int) -> int:
    """How many of `n` earlier runs of the regime may have been as bad before a value counts
    as inside the range the metric has shown (see `judge`)."""
    return max(RANGE_ALLOWED, int(RANGE_SHARE * n))


def judge(metric: str, value: float, history: Iterable[float], *, better: str = "higher",
          min_pct: float = 5.0, k_sigma: float = 3.0, min_history: int = 5,
          unit: str = "", what: str = "", longer: Sequence[float] = ()) -> Judgement:
    """Compare `value` with `history` (prior values, any order).

    Flag only when |change| > min_pct % of the median AND > k_sigma robust sigmas;
    when every prior value is identical (sigma 0) the percentage alone decides. `longer`: a
    longer history (the last RANGE_RUNS runs of the same class and regime); a value no worse
    than more than `range_allowed` of them is inside the range the metric has shown (bimodal
    noise: a second mode whose nights the median and MAD of the window read as outliers) and
    is not flagged; a few low nights (a cold first night, a one-night dip) are no such mode.
    """
    hist = [float(v) for v in history]
    n = len(hist)
    what = what or f"the last {n} runs"
    u = f" {unit}" if unit else ""
    if n < min_history:
        return Judgement(metric, value, better, "insufficient", n,
                         reason=f"insufficient history: {n} prior run{'s' if n != 1 else ''} "
                                f"(need {min_history}); judged by fixed baselines only")
    ref = median(hist)
    sigma = noise_sigma(hist)
    diff = value - ref
    if ref != 0:
        delta_pct = 100.0 * diff / abs(ref)
    else:
        delta_pct = 0.0 if diff == 0 else (100.0 if diff > 0 else -100.0)
    pct_ok = abs(delta_pct) > min_pct
    sigma_ok = abs(diff) > k_sigma * sigma if sigma > 0 else diff != 0
    as_far = sum(1 for v in longer if (v <= value if diff < 0 else v >= value))
    if pct_ok and sigma_ok and as_far > range_allowed(len(longer)):
        j = Judgement(metric, value, better, "ok", n, ref, sigma, delta_pct, masked=True)
        j.reason = (f"{metric} {_num(value)}{u} is {abs(delta_pct):.1f}% off the median {_num(ref)}{u} of {what} "
                    f"but inside the range of the last {len(longer)} runs: {as_far} were as far "
                    f"(more than {range_allowed(len(longer))} is a second mode of the noise, not a drop)")
        return j
    j = Judgement(metric, value, better, "ok", n, ref, sigma, delta_pct)
    spread = f"robust sigma {_num(sigma)}" if sigma > 0 else "no spread"
    if not (pct_ok and sigma_ok):
        why = []
        if not pct_ok:
            why.append(f"{abs(delta_pct):.1f}% <= {min_pct:g}%")
        if not sigma_ok:
            why.append(f"{abs(diff) / sigma if sigma else 0:.1f} sigma <= {k_sigma:g}")
        j.reason = (f"{metric} {_num(value)}{u} within noise of median {_num(ref)}{u} of {what} "
                    f"({', '.join(why)})")
        return j
    worse = diff < 0 if better == "higher" else diff > 0
    j.verdict = "regression" if worse else "improvement"
    direction = "below" if diff < 0 else "above"
    sig = f"{abs(diff) / sigma:.1f} sigma" if sigma > 0 else "all prior values equal"
    j.reason = (f"{metric} {_num(value)}{u} is {abs(delta_pct):.1f}% {direction} the median {_num(ref)}{u} "
                f"of {what} ({sig}; {spread}; {better} is better; thresholds {min_pct:g}% and "
                f"{k_sigma:g} sigma)")
    return j


# -- a finished run's metric: the verdict and what happens to its incident ----------------

@dataclass(frozen=True)
class Subject:
    """One metric of one finished run on one host."""

    playbook: str
    host: str
    run_id: int
    metric: Metric


@dataclass(frozen=True)
class Window:
    """The reference a metric is judged against: the prior values the store gave (runs an
    open incident flagged are left out), how a reason names them, and the metric's open
    incident when there is one (then the window is the runs before the drop)."""

    values: list[float]
    what: str
    incident: IncidentRow | None = None
    # With `confirm_runs` > 1: the runs just before this one (run id, value; newest first)
    # and the reference values before them, so a drop is flagged only when they were beyond
    # the thresholds too (one bad night alone is a suspect, not a regression).
    recent: tuple[tuple[int, float], ...] = ()
    before_recent: tuple[float, ...] = ()
    longer: tuple[float, ...] = ()     # the last RANGE_RUNS values of the regime (see `judge`)
    regime_start: int = 0              # index in before_recent where the current regime begins


def range_of(ref: list[float], win: Window) -> list[float]:
    """The values the range rule counts for a value judged after `ref` (before_recent, perhaps
    with recent runs appended): those of the current regime, the last RANGE_RUNS."""
    return ref[min(win.regime_start, len(ref)):][-RANGE_RUNS:]


def window_since(reference_start: int | None, run_id: int) -> int | None:
    """The first run the reference may use (a baseline or an acked incident), when it is earlier."""
    return reference_start if reference_start is not None and reference_start < run_id else None


def window_limit(since: int | None, cfg: RegressionConfig) -> int:
    """How many prior runs the reference reads: every run since a baseline/ack (bounded), else the window."""
    return BASELINE_SPAN_LIMIT if since else cfg.window


def window_what(n: int, since: int | None, baseline_run: int | None, incident: IncidentRow | None) -> str:
    """How a reason names the reference runs."""
    if incident is not None:
        return f"the {n} runs before the drop (run #{incident['opened_run']})"
    if since and baseline_run == since:
        return f"the {n} runs since baseline #{since}"
    if since:
        return f"the {n} runs since acknowledged run #{since}"
    return f"the last {n} successful runs"


def judge_window(s: Subject, win: Window, cfg: RegressionConfig) -> Judgement:
    """`s` against its window; when the runs just before it were beyond the thresholds too (a
    drop confirmed, `confirm_runs`), against the runs before the drop began (the reference its
    incident will keep), so the first bad night does not widen the band it is judged by."""
    m = s.metric
    j = judge(m.name, float(m.value), win.values, better=m.better, min_pct=cfg.min_pct, k_sigma=cfg.k_sigma,
              min_history=cfg.min_history, unit=m.unit, what=win.what, longer=win.longer)
    need = cfg.confirm_runs - 1
    if need <= 0 or win.incident is not None or len(win.recent) < need:
        return j
    ref = list(win.before_recent)
    first = win.recent[need - 1][0]
    before = judge(m.name, float(m.value), ref[-cfg.window:], better=m.better, min_pct=cfg.min_pct,
                   k_sigma=cfg.k_sigma, min_history=cfg.min_history, unit=m.unit,
                   what=f"the {len(ref[-cfg.window:])} runs before the drop (run #{first})",
                   longer=range_of(ref, win))
    return before if before.verdict == "regression" and confirmed_by(s, before, win, cfg) is not None else j


def confirmed_by(s: Subject, j: Judgement, win: Window, cfg: RegressionConfig) -> tuple[int, ...] | None:
    """The earlier runs that confirm this regression, oldest first (() when confirm_runs is 1),
    or None when fewer than confirm_runs - 1 runs just before it were beyond both thresholds
    as well (each judged against the values before it), or when this value is nearer the
    reference than to one of them (a one-night dip and then a merely noisy night are not one
    lower level)."""
    need = cfg.confirm_runs - 1
    if need <= 0:
        return ()
    if len(win.recent) < need:
        return None
    ref = list(win.before_recent)
    for rid, v in reversed(win.recent[:need]):
        prior = judge(s.metric.name, v, ref[-cfg.window:], better=s.metric.better, min_pct=cfg.min_pct,
                      k_sigma=cfg.k_sigma, min_history=cfg.min_history, longer=range_of(ref, win))
        if prior.verdict != "regression" or (prior.delta_pct < 0) != (j.delta_pct < 0):
            return None
        if j.reference is not None and abs(j.value - v) > abs(j.value - j.reference):
            return None
        ref.append(v)
    return tuple(rid for rid, _ in reversed(win.recent[:need]))


def drop_start(s: Subject, j: Judgement, win: Window, cfg: RegressionConfig) -> int:
    """The first run of a drop: the earliest run confirming it, else this run."""
    earlier = confirmed_by(s, j, win, cfg)
    return earlier[0] if earlier else s.run_id


@dataclass(frozen=True)
class ShiftPoint:
    """The change point the newest value sits after, in run ids: where the shift began
    (`cp_run`), the run just before it, and how it moved."""

    shift: Shift
    cp_run: int
    prev_run: int
    how: str           # "in one step" | "over 12+ runs (3 steps)"


def worse_shift_point(series: list[tuple[int, float]], run_id: int, value: float, better: str,
                      cfg: RegressionConfig) -> ShiftPoint | None:
    """The newest shift in `series` (prior (run id, value), oldest first) + this value, when
    it made the metric worse by more than min_pct; None otherwise or with too few runs."""
    if len(series) + 1 < CP_MIN_RUNS:
        return None
    from eaglebot.history.changepoint import latest_shift  # numpy: loaded when a run is judged

    ids = [rid for rid, _ in series] + [run_id]
    sh = latest_shift([v for _, v in series] + [value])
    if sh is None or abs(sh.delta_pct) <= cfg.min_pct:
        return None
    if abs(value - sh.after_mean) > abs(value - sh.before_mean):
        return None     # the newest run is back on the level before the shift (too few runs to split off yet)
    worse = sh.delta_pct < 0 if better == "higher" else sh.delta_pct > 0
    if not worse:
        return None
    cp_run = ids[sh.start]
    n_steps = len(sh.points)
    how = "in one step" if n_steps == 1 else f"over {ids[sh.points[-1].index] - cp_run + 1}+ runs ({n_steps} steps)"
    return ShiftPoint(sh, cp_run, ids[sh.start - 1], how)


@dataclass(frozen=True)
class Drift:
    """A worse change point and its sentence (what changed at the run where it began)."""

    point: ShiftPoint
    text: str


def drift(metric: str, p: ShiftPoint, changes: list[Change]) -> Drift:
    """`changes`: from the state at the run before the shift to the state where it began."""
    sh = p.shift
    text = (f"change point: {metric} moved {sh.delta_pct:+.1f}% ({_num(sh.before_mean)} → {_num(sh.after_mean)}) "
            f"{p.how}, beginning at run #{p.cp_run} (confidence {100 * sh.confidence:.2f}%, E-divisive + t-test); "
            f"at run #{p.cp_run} vs #{p.prev_run}: {attribution_sentence(changes)}")
    return Drift(p, text)


@dataclass(frozen=True)
class MetricVerdict:
    """What one metric of a run decided: the finding to report, a note for the audit
    trail's events, and what happens to its incident."""

    finding: Regression | None = None
    note: str | None = None
    incident: IncidentDecision = field(default_factory=IncidentDecision)
    warning: str | None = None     # for the run's views: a suspect night (one bad run, not yet a regression)


def needs_attribution(j: Judgement, win: Window) -> bool:
    """A new regression's reason says what changed since the last good run (read only then)."""
    return win.incident is None and j.verdict == "regression"


def decide(s: Subject, j: Judgement, win: Window, shift: Drift | None, attribution: str,
           cfg: RegressionConfig) -> MetricVerdict:
    """The per-run check (median + MAD) combined with the change-point check.

    A regression opens an incident; while it is open later runs are compared with the
    reference from BEFORE it (flagged runs never enter a window), so a persistent drop
    stays flagged ("still 11% below since run #41") until the metric recovers, a baseline
    is set or someone acks it. The change-point check (E-divisive means + t-test) catches
    what no single run shows, e.g. a slow drift, and names the change at the run where the
    shift began. `attribution`: what changed since the last good run (see needs_attribution).
    """
    if win.incident is not None:
        return _with_incident(s, j, win.incident, shift, cfg)
    m, host = s.metric, s.host
    if j.verdict == "insufficient" and shift is None:
        return MetricVerdict(note=f"{host}: {j.reason} ({m.name})")
    if j.masked and shift is None:
        why = f"not flagged: {j.reason}"
        worse = j.delta_pct < 0 if m.better == "higher" else j.delta_pct > 0
        return MetricVerdict(note=f"{host}: {why} ({m.name})", warning=why if worse else None)
    if j.verdict == "regression":
        earlier = confirmed_by(s, j, win, cfg)
        if earlier is None and shift is None:
            nxt = "the next run confirms" if cfg.confirm_runs == 2 else f"the next {cfg.confirm_runs - 1} runs confirm"
            why = f"suspect: {j.reason}; flagged as a regression if {nxt} it"
            return MetricVerdict(note=f"{host}: {why} ({m.name})", warning=why)
        if earlier is not None:
            first = earlier[0] if earlier else s.run_id
            confirm = f"confirmed: beyond the thresholds since run #{first}" if earlier else ""
            r = j.as_regression(host, "; ".join(x for x in (confirm, attribution, shift.text if shift else "") if x))
            return MetricVerdict(r, incident=IncidentDecision(open=NewIncident(
                s.playbook, host, m.name, first, first, j.reference, m.unit, m.better,
                more_runs=(*earlier[1:], s.run_id) if earlier else ())))
    if shift is not None:
        sh = shift.point.shift
        value = float(m.value)
        delta = round(100.0 * (value - sh.before_mean) / abs(sh.before_mean), 2) if sh.before_mean else 0.0
        r = Regression(m.name, value, round(sh.before_mean, 4), delta, shift.text, kind="regression", host=host)
        return MetricVerdict(r, incident=IncidentDecision(open=NewIncident(
            s.playbook, host, m.name, s.run_id, shift.point.cp_run, sh.before_mean, m.unit, m.better)))
    return MetricVerdict(j.as_regression(host) if j.verdict == "improvement" else None)


def _with_incident(s: Subject, j: Judgement, inc: IncidentRow, shift: Drift | None,
                   cfg: RegressionConfig) -> MetricVerdict:
    """A metric with an open incident: it stays open, closes (recovered) or is flagged again."""
    m, host, value = s.metric, s.host, float(s.metric.value)
    if j.verdict == "insufficient":
        return MetricVerdict(note=f"{host}: {j.reason} ({m.name}); incident #{inc['id']} stays open")
    worse = j.delta_pct < 0 if m.better == "higher" else j.delta_pct > 0
    # Hysteresis: back within half of min_pct of the reference (or better), so a drop that
    # hovers at the threshold does not open and close an incident every night.
    if not worse or abs(j.delta_pct) <= cfg.min_pct / 2:
        close = Closing(inc["id"], "recovered", "eaglebot",
                        f"{m.name} {_num(value)} is back within {cfg.min_pct / 2:g}% of the reference "
                        f"{_num(float(j.reference or 0))} at run #{s.run_id}", s.run_id)
        note = (f"{host}: {m.name} recovered at run #{s.run_id}: incident #{inc['id']} "
                f"(open since run #{inc['opened_run']}) closed")
        return MetricVerdict(j.as_regression(host) if j.verdict == "improvement" else None, note,
                             IncidentDecision(close=close))
    direction = "below" if j.delta_pct < 0 else "above"
    reason = (f"still {abs(j.delta_pct):.1f}% {direction} the reference since run #{inc['opened_run']} "
              f"(open incident #{inc['id']}; it closes within {cfg.min_pct / 2:g}% of the reference): "
              f"{j.reason}" + (f"; {shift.text}" if shift else ""))
    r = Regression(m.name, value, float(j.reference or 0.0), round(j.delta_pct, 2), reason, kind="regression",
                   host=host)
    return MetricVerdict(r, incident=IncidentDecision(flag=inc["id"]))


def wants_attribution(r: Regression) -> bool:
    """A regression against a fixed baseline (bench.compare) that does not say yet what changed."""
    return r.kind == "regression" and "good run" not in r.reason
