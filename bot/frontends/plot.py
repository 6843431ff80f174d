"""Trend plots as PNG files (the CLI's `eagle trend`, `/eagle trend`, the scheduler's uploads).

Rendered with matplotlib's Agg canvas (no display, no pyplot global state), so the bot
can draw from any thread. The data comes from `eaglebot.history.trend`.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

from eaglebot.config import RegressionConfig
from eaglebot.history.trend import Trend, load_trend
from eaglebot.store import parse_iso
from eaglebot.store.protocol import StoreProtocol


def render_trend(trend: Trend, out_path: str | Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
    from matplotlib.figure import Figure

    points, metric = trend.points, trend.metric
    # Dates on the x axis: nightly runs sit a day apart, a burst of manual runs close together.
    when = [parse_iso(p.get("started_at")) or datetime.now(timezone.utc) for p in points]
    xs = [float(date2num(w)) for w in when]  # type: ignore[no-untyped-call]
    ys = [p["value"] for p in points]
    fig = Figure(figsize=(8, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    if trend.band is not None:
        c, lo, hi, label = trend.band
        ax.axhspan(lo, hi, color="tab:green", alpha=0.15, label=label)
        ax.axhline(c, color="tab:green", linewidth=1, linestyle="--")
    ax.plot(xs, ys, marker="o", color="tab:blue", linewidth=1.5, label=metric)
    bad = [(x, y) for x, y, p in zip(xs, ys, points) if p["run_id"] in trend.flagged]
    if bad:
        ax.scatter([x for x, _ in bad], [y for _, y in bad], color="tab:red", zorder=3, s=60, label="regression")
    base = trend.baseline
    if base is not None and base["run_id"] in {p["run_id"] for p in points}:
        i = next(i for i, p in enumerate(points) if p["run_id"] == base["run_id"])
        ax.scatter([xs[i]], [ys[i]], marker="*", color="tab:green", zorder=4, s=140, label="baseline")
    by_run = {p["run_id"]: (x, y) for x, y, p in zip(xs, ys, points)}
    for i, cp in enumerate(trend.change_points):
        if cp["run_id"] in by_run:
            ax.axvline(by_run[cp["run_id"]][0], color="tab:orange", linestyle=":", linewidth=1.5,
                       label="change point" if i == 0 else None)
            ax.annotate(f"{cp['delta_pct']:+.1f}% at #{cp['run_id']}", by_run[cp["run_id"]], fontsize=7,
                        xytext=(4, 8), textcoords="offset points", color="tab:orange")
    for i, inc in enumerate(trend.incidents):
        if inc["opened_run"] in by_run:
            ax.axvspan(by_run[inc["opened_run"]][0], xs[-1], color="tab:red", alpha=0.08,
                       label="open incident" if i == 0 else None)
    locator = AutoDateLocator()  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    ax.set_xlabel("run start (UTC)")
    ax.set_ylabel(f"{metric} ({trend.unit})" if trend.unit else metric)
    ax.set_title(f"{trend.playbook} on {trend.host}: {metric} ({trend.better} is better), "
                 f"last {len(points)} runs", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


def plot_trend(store: StoreProtocol, playbook: str, host: str, metric: str, out_path: str | Path,
               limit: int = 30, cfg: RegressionConfig | None = None) -> Path:
    """Write a PNG of `metric` over the last `limit` runs; UsageError when there is no data."""
    return render_trend(load_trend(store, playbook, host, metric, limit, cfg), out_path)


def default_out(playbook: str, host: str, metric: str) -> Path:
    safe = "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", s) for s in (playbook, host, metric))
    return Path.cwd() / f"trend-{safe}.png"
