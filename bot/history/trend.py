"""Trend plots: one metric of one playbook + host over recent runs, with its baseline band.

Rendered with matplotlib's Agg canvas (no display, no pyplot global state), so the bot
can draw from any thread.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from statistics import median
from typing import Any

from eaglebot.config import RegressionConfig, Settings
from eaglebot.errors import UsageError
from eaglebot.history.regress import robust_sigma


def trend_points(store_sync: Any, playbook: str, host: str, metric: str, limit: int = 30) -> list[dict]:
    """The metric's values over the last `limit` successful runs, oldest first."""
    rows = store_sync.metric_history(playbook, host, metric, limit=limit)
    return list(reversed(rows))


def band(points: list[dict], baseline: dict | None, cfg: RegressionConfig) -> tuple[float, float, float, str] | None:
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


def plot_trend(store_sync: Any, playbook: str, host: str, metric: str, out_path: str | Path,
               limit: int = 30, cfg: RegressionConfig | None = None) -> Path:
    """Write a PNG of `metric` over the last `limit` runs; UsageError when there is no data."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cfg = cfg or RegressionConfig()
    points = trend_points(store_sync, playbook, host, metric, limit)
    if not points:
        raise UsageError(f"no {metric} values for playbook {playbook!r} on host {host!r} "
                         f"(run it first, or check the names with `eagle show RUN_ID`)")
    base = store_sync.baseline(playbook, host)
    base_point = None
    if base is not None:
        rows = [r for r in store_sync.metric_history(playbook, host, metric, since_run=base["run_id"],
                                                     before_run=base["run_id"] + 1, limit=1)]
        if rows and rows[0]["run_id"] == base["run_id"]:
            base_point = {"run_id": base["run_id"], "value": rows[0]["value"]}
    flagged = store_sync.flagged_runs(host, metric, [p["run_id"] for p in points])

    xs = list(range(len(points)))
    ys = [p["value"] for p in points]
    unit = points[-1].get("unit") or ""
    better = points[-1].get("better") or "higher"
    fig = Figure(figsize=(8, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    b = band(points, base_point, cfg)
    if b is not None:
        c, lo, hi, label = b
        ax.axhspan(lo, hi, color="tab:green", alpha=0.15, label=label)
        ax.axhline(c, color="tab:green", linewidth=1, linestyle="--")
    ax.plot(xs, ys, marker="o", color="tab:blue", linewidth=1.5, label=metric)
    bad = [(x, y) for x, y, p in zip(xs, ys, points) if p["run_id"] in flagged]
    if bad:
        ax.scatter([x for x, _ in bad], [y for _, y in bad], color="tab:red", zorder=3, s=60, label="regression")
    if base_point is not None and base_point["run_id"] in {p["run_id"] for p in points}:
        i = next(i for i, p in enumerate(points) if p["run_id"] == base_point["run_id"])
        ax.scatter([i], [ys[i]], marker="*", color="tab:green", zorder=4, s=140, label="baseline")
    step = max(1, len(points) // 12)
    ax.set_xticks(xs[::step])
    ax.set_xticklabels([f"#{p['run_id']}" for p in points][::step], rotation=45, fontsize=8)
    ax.set_ylabel(f"{metric} ({unit})" if unit else metric)
    ax.set_title(f"{playbook} on {host}: {metric} ({better} is better), last {len(points)} runs", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


def default_out(playbook: str, host: str, metric: str) -> Path:
    safe = "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", s) for s in (playbook, host, metric))
    return Path.cwd() / f"trend-{safe}.png"


def trend_main(settings: Settings, playbook: str, host: str, metric: str, out: str | None = None,
               limit: int = 30) -> int:
    from eaglebot.store import Store

    store = Store(settings.db_path)
    try:
        path = plot_trend(store, playbook, host, metric, out or default_out(playbook, host, metric),
                          limit=limit, cfg=settings.regression)
    except UsageError as e:
        print(f"eagle: {e}", file=sys.stderr)
        return e.exit_code
    finally:
        store.close()
    print(path)
    return 0
