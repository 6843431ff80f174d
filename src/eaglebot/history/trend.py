"""Trends: one metric of one playbook + host over recent runs, with its baseline band.

Pure data over the store's rows; drawing it is a front end's job (`eaglebot.frontends.plot`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any, TYPE_CHECKING

from eaglebot.config import RegressionConfig
from eaglebot.errors import UsageError
from eaglebot.history.changepoint import change_points
from eaglebot.history.regress import robust_sigma
from eaglebot.store.rows import IncidentRow, MetricPoint

if TYPE_CHECKING:
    from eaglebot.store.protocol import HistoryStore

Band = tuple[float, float, float, str]


def trend_points(store: HistoryStore, playbook: str, host: str, metric: str, limit: int = 30) -> list[MetricPoint]:
    """The metric's values over the last `limit` successful runs, oldest first."""
    rows = store.metric_history(playbook, host, metric, limit=limit)
    return list(reversed(rows))


def band(points: list[MetricPoint], baseline: dict[str, Any] | None, cfg: RegressionConfig) -> Band | None:
    """(center, low, high, label): the baseline run's value ± min_pct when a baseline is set
    and measured, else median ± k·robust sigma of the plotted runs (needs min_history)."""
    if baseline is not None:
        v = baseline.get("value")
        if v is not None:
            d = abs(v) * cfg.min_pct / 100.0
            return v, v - d, v + d, f"baseline #{baseline['run_id']} ± {cfg.min_pct:g}%"
    values = [p["value"] for p in points]
    if len(values) < cfg.min_history:
        return None
    c = median(values)
    s = cfg.k_sigma * robust_sigma(values)
    return c, c - s, c + s, f"median ± {cfg.k_sigma:g}·robust sigma"


@dataclass(frozen=True)
class Trend:
    """What a trend plot shows: the points (oldest first), the baseline run's value when it
    measured the metric, the runs flagged as regressions, and the band to judge them by."""

    playbook: str
    host: str
    metric: str
    points: list[MetricPoint]
    baseline: dict[str, Any] | None          # {"run_id", "value"}
    flagged: set[int]
    band: Band | None
    change_points: list[dict[str, Any]] = field(default_factory=list)   # {"run_id", "delta_pct", "pvalue"}
    incidents: list[IncidentRow] = field(default_factory=list)       # open incidents of this metric
    # Where the configuration class changed (a new segment, not noise): {"run_id", "config", "was"}
    segments: list[dict[str, Any]] = field(default_factory=list)

    @property
    def unit(self) -> str:
        return self.points[-1].get("unit") or ""

    @property
    def better(self) -> str:
        return self.points[-1].get("better") or "higher"


def load_trend(store: HistoryStore, playbook: str, host: str, metric: str, limit: int = 30,
               cfg: RegressionConfig | None = None) -> Trend:
    """The trend of `metric` over the last `limit` runs; UsageError when there is no data."""
    cfg = cfg or RegressionConfig()
    points = trend_points(store, playbook, host, metric, limit)
    if not points:
        raise UsageError(f"no {metric} values for playbook {playbook!r} on host {host!r} "
                         f"(run it first, or check the names with `eagle show RUN_ID`)")
    base = store.baseline(playbook, host)
    base_point = None
    if base is not None:
        rows = store.metric_history(playbook, host, metric, since_run=base["run_id"],
                                    before_run=base["run_id"] + 1, limit=1)
        if rows and rows[0]["run_id"] == base["run_id"]:
            base_point = {"run_id": base["run_id"], "value": rows[0]["value"]}
    flagged = store.flagged_runs(host, metric, [p["run_id"] for p in points])
    runs = class_runs(points)
    cps = [{"run_id": seg[c.index]["run_id"], "delta_pct": c.delta_pct, "pvalue": c.pvalue}
           for seg in runs for c in change_points([float(p["value"]) for p in seg]) if abs(c.delta_pct) > cfg.min_pct]
    segments = [{"run_id": seg[0]["run_id"], "config": seg[0].get("config_class") or "",
                 "was": prev[0].get("config_class") or ""} for prev, seg in zip(runs, runs[1:])]
    incidents = [i for i in store.incidents(playbook=playbook, host=host) if i["metric"] == metric]
    return Trend(playbook, host, metric, points, base_point, flagged, band(runs[-1], base_point, cfg), cps, incidents,
                 segments)


def class_runs(points: list[MetricPoint]) -> list[list[MetricPoint]]:
    """`points` cut where the configuration class changes: each is judged, searched for change
    points and banded on its own (a no-speculation reference is no drop of the EAGLE series)."""
    out: list[list[MetricPoint]] = []
    for p in points:
        if out and (out[-1][-1].get("config_class") or "") == (p.get("config_class") or ""):
            out[-1].append(p)
        else:
            out.append([p])
    return out
