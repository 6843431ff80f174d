"""The labelled regression corpus (tests/data/regressions) replayed through detectors, and scored.

`product_alerts` replays a series night by night through the product's own post-run check
(`history.recorder.check_run`, what the post-run hook calls after every nightly run) on a real
SQLite audit store: each night is a run with a bench.serving step recording the metric (a
failed run with no metric for a missing night, a gpu.health step where the series has GPU
health; a series with `classes` records each value with its configuration class: the nights
it names in theirs, every other night "EAGLE3"), and an alert is a new regression incident. `hud_alerts` is PyTorch HUD's rule (a
baseline window against the newest points, 2 bad points in a row); `edivisive_alerts` plain
E-divisive (the same change-point code, with no size floor and no per-run check).

`score` matches alerts with the labelled changes: a change that made the metric worse by
more than the 5% floor (the product's `min_pct`, its definition of a regression) must be
alerted within `MARGIN` runs after it began (after a drift's ramp ended); a worse change
under the floor is optional (neither missed nor false when alerted); any other alert is a
false alert. Quiet nights are the judged nights (from the 6th) outside every change's window.
"""
from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from eaglebot.config import RegressionConfig
from eaglebot.history.changepoint import change_points
from eaglebot.history.recorder import check_run, record_fingerprint
from eaglebot.sdk import Metric
from eaglebot.store import Store
from eaglebot.store.rows import NewRun, StepEnd

CORPUS = Path(__file__).parents[1] / "data" / "regressions" / "corpus.json"
FLOOR_PCT = 5.0
MARGIN = 10          # runs after a change's start (a drift: its end) an alert still counts
FIRST_JUDGED = 5     # nights before it have too little history for any detector


def load(split: str | None = None) -> list[dict[str, Any]]:
    series: list[dict[str, Any]] = json.loads(CORPUS.read_text())["series"]
    return [s for s in series if split in (None, "all", s["split"])]


# -- detectors: each returns the indexes of the nights that raised a new alert ---------

@dataclass
class Replay:
    """What the product's check did over a series: the nights that opened an incident, the
    regression reasons it reported each night, and its notes (e.g. suspects)."""

    alerts: list[int] = field(default_factory=list)
    reasons: dict[int, list[str]] = field(default_factory=dict)
    notes: dict[int, list[str]] = field(default_factory=dict)


def replay(s: dict[str, Any], cfg: RegressionConfig, workdir: Path | None = None) -> Replay:
    """The product's detector, end to end on a real store (see the module docstring)."""
    with tempfile.TemporaryDirectory(dir=workdir) as d:
        store = Store(Path(d) / "corpus.db")
        try:
            return _replay(store, s, cfg)
        finally:
            store.close()


def product_alerts(s: dict[str, Any], cfg: RegressionConfig, workdir: Path | None = None) -> list[int]:
    return replay(s, cfg, workdir).alerts


def gpu_attributed(s: dict[str, Any], r: Replay) -> bool:
    """A GPU-health drop's first alert names the GPU whose health changed."""
    if not s["health"] or not r.alerts:
        return False
    gpu = next(iter(s["health"][str(s["changes"][0]["start"])]))
    return any(f"GPU {gpu} " in reason for reason in r.reasons.get(r.alerts[0], []))


def _replay(store: Store, s: dict[str, Any], cfg: RegressionConfig) -> Replay:
    host, name = "gpu-01", "output_throughput" if s["better"] == "higher" else "median_ttft_ms"
    unit = "tok/s" if s["better"] == "higher" else "ms"
    out, opened = Replay(), 0
    for i, v in enumerate(s["values"]):
        rid = store.create_run(NewRun(playbook="bench", hosts=[host], inputs={}, variables={}, actor="corpus",
                               origin="schedule", schedule="nightly-bench"))
        idx = 0
        health = s["health"].get(str(i))
        if s["health"]:
            sid = store.step_started(rid, idx, host, "gpu health", "gpu.health", {})
            store.step_finished(sid, StepEnd(run_id=rid, host=host, status="ok", summary="", duration_ms=1, attempts=1,
                                data={"health": health or {"0": {"verdict": "ok", "reasons": []}}}))
            idx += 1
        sid = store.step_started(rid, idx, host, "bench", "bench.serving", {})
        if v is None:
            store.step_finished(sid, StepEnd(run_id=rid, host=host, status="failed", summary="server not ready",
                                duration_ms=1, attempts=1))
            store.finish_run(rid, "failed", exit_code=1)
            record_fingerprint(store, rid, [host])
            continue
        m = Metric(name, float(v), unit, s["better"], config=_config_class(s, i))
        store.step_finished(sid, StepEnd(run_id=rid, host=host, status="ok", summary="", duration_ms=1, attempts=1,
                            metrics=[m]))
        store.finish_run(rid, "succeeded", exit_code=0)
        found, notes = check_run(store, rid, "bench", [host], [(host, m)], cfg)
        out.reasons[i] = [r.reason for r in found if r.kind == "regression"]
        out.notes[i] = notes
        n = len(store.incidents(status=None))
        if n > opened:
            out.alerts.append(i)
            opened = n
    return out


def _config_class(s: dict[str, Any], i: int) -> str:
    classes: dict[str, str] | None = s.get("classes")
    return "" if classes is None else classes.get(str(i), "EAGLE3")


def hud_alerts(s: dict[str, Any], baseline: int = 10, target: int = 2, pct: float = FLOOR_PCT) -> list[int]:
    """PyTorch HUD's rule: the last `target` points all worse than the baseline window's
    median by more than `pct`; one alert per excursion (quiet again once a point is not)."""
    vals = [(i, v) for i, v in enumerate(s["values"]) if v is not None]
    sign = 1.0 if s["better"] == "higher" else -1.0
    alerts, bad = [], False
    for k in range(baseline + target - 1, len(vals)):
        ref = statistics.median(v for _, v in vals[k - target - baseline + 1:k - target + 1])
        worse = all(sign * 100.0 * (v - ref) / ref < -pct for _, v in vals[k - target + 1:k + 1])
        if worse and not bad:
            alerts.append(vals[k][0])
        bad = worse
    return alerts


def edivisive_alerts(s: dict[str, Any], min_runs: int = 8) -> list[int]:
    """Plain E-divisive (+ t-test, p < 0.001) over everything so far, every night: an alert
    when a worse change point appears that no earlier alert covered (within 2 runs)."""
    vals = [(i, v) for i, v in enumerate(s["values"]) if v is not None]
    sign = 1.0 if s["better"] == "higher" else -1.0
    alerts: list[int] = []
    seen: list[int] = []
    for k in range(min_runs, len(vals) + 1):
        for cp in change_points([v for _, v in vals[:k]]):
            if sign * cp.delta_pct < 0 and not any(abs(cp.index - j) <= 2 for j in seen):
                seen.append(cp.index)
                alerts.append(vals[k - 1][0])
    return alerts


# -- scoring ---------------------------------------------------------------------------

@dataclass
class Score:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    quiet_nights: int = 0
    delays: list[int] = field(default_factory=list)
    big_steps: int = 0          # worse steps of 10% or more
    big_steps_fast: int = 0     # ... alerted within 2 runs (delay 0 or 1)

    def add(self, o: Score) -> None:
        for k in ("tp", "fp", "fn", "quiet_nights", "big_steps", "big_steps_fast"):
            setattr(self, k, getattr(self, k) + getattr(o, k))
        self.delays += o.delays

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def false_per_100_quiet(self) -> float:
        return 100.0 * self.fp / self.quiet_nights if self.quiet_nights else 0.0

    @property
    def median_delay(self) -> float:
        return float(statistics.median(self.delays)) if self.delays else float("nan")


def score(s: dict[str, Any], alerts: list[int]) -> Score:
    out = Score()
    n = len(s["values"])
    windows = []                          # (first, last, kind) of each change's alert window
    for c in s["changes"]:
        last = min(n - 1, c["end"] + MARGIN)
        kind = "must" if c["worse"] and abs(c["size_pct"]) > FLOOR_PCT else ("may" if c["worse"] else "not")
        windows.append((c["start"], last, kind, c))
    covered = {i for a, b, _, _ in windows for i in range(a, b + 1)}
    out.quiet_nights = sum(1 for i in range(FIRST_JUDGED, n) if i not in covered and s["values"][i] is not None)
    used: set[int] = set()
    for a, b, kind, c in windows:
        hits = [x for x in alerts if a <= x <= b and x not in used]
        if kind == "must":
            if hits:
                out.tp += 1
                used.add(hits[0])
                delay = sum(1 for i in range(c["start"], hits[0]) if s["values"][i] is not None)
                out.delays.append(delay)
            else:
                out.fn += 1
            if c["kind"] in ("step", "gpu-health", "shift") and abs(c["size_pct"]) >= 10:
                out.big_steps += 1
                out.big_steps_fast += int(bool(hits) and out.delays[-1] <= 1)
        elif kind == "may":
            used.update(hits)
    out.fp = sum(1 for x in alerts if x not in used)
    return out


DETECTORS: dict[str, Callable[[dict[str, Any]], list[int]]] = {
    "hud-window": hud_alerts,
    "e-divisive": edivisive_alerts,
}
