"""Trend plots as PNG files (the CLI's `eagle trend`, `/eagle trend`, the scheduler's uploads).

Rendered with matplotlib's Agg canvas (no display, no pyplot global state), so the bot
can draw from any thread. The data comes from `eaglebot.history.trend`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import re
from datetime import datetime, timezone
from pathlib import Path

from eaglebot.config import RegressionConfig
from eaglebot.history.trend import Trend, load_trend
from eaglebot.store import parse_iso

if TYPE_CHECKING:
    from eaglebot.store.protocol import HistoryStore


GAP_FACTOR = 3.0          # a pause this many times the usual spacing between runs is marked
GAP_MIN_S = 36 * 3600     # ... and only when it is longer than a day and a half


def gaps(when: list[datetime]) -> list[tuple[int, float]]:
    """(slot after which a long pause falls, its length in seconds): where runs stopped for a
    while, so a plot by run still shows that time passed."""
    spans = [(b - a).total_seconds() for a, b in zip(when, when[1:])]
    if not spans:
        return []
    usual = sorted(spans)[len(spans) // 2]
    return [(i, d) for i, d in enumerate(spans) if d >= GAP_MIN_S and d >= GAP_FACTOR * max(usual, 1.0)]


def _span(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:.0f} days" if days >= 2 else f"{seconds / 3600:.0f} h"


def _tick_labels(when: list[datetime], most: int = 10) -> list[str]:
    """A date under the first run of a day; at most about `most` of them, never two within
    len/most slots of each other; a day with many runs (a burst) is labelled first."""
    gap = max(1, -(-len(when) // most))
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    for i, w in enumerate(when):
        day = w.strftime("%b %d")
        first.setdefault(day, i)
        count[day] = count.get(day, 0) + 1
    chosen: list[int] = []
    for day in sorted(first, key=lambda d: (-count[d], first[d])):
        if all(abs(first[day] - c) >= gap for c in chosen):
            chosen.append(first[day])
    return [when[i].strftime("%b %d") if i in chosen else "" for i in range(len(when))]


def render_trend(trend: Trend, out_path: str | Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points, metric = trend.points, trend.metric
    # One slot per run (a burst of manual runs does not collapse into a smear, a long pause
    # does not squeeze the rest); dates are the tick labels, pauses are marked.
    when = [parse_iso(p.get("started_at")) or datetime.now(timezone.utc) for p in points]
    xs = list(range(len(points)))
    ys = [p["value"] for p in points]
    fig = Figure(figsize=(10, 4.4), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    if trend.band is not None:
        c, lo, hi, label = trend.band
        ax.axhspan(lo, hi, color="tab:green", alpha=0.12, label=label)
        ax.axhline(c, color="tab:green", linewidth=1, linestyle="--")
    by_run = {p["run_id"]: (x, y) for x, y, p in zip(xs, ys, points)}
    for i, inc in enumerate(trend.incidents):
        if inc["opened_run"] in by_run:
            ax.axvspan(by_run[inc["opened_run"]][0] - 0.5, xs[-1] + 0.5, color="tab:red", alpha=0.08,
                       label="open incident" if i == 0 else None)
    starts = {s["run_id"] for s in trend.segments}
    cut = [0] + [x for x, p in zip(xs, points) if p["run_id"] in starts] + [len(xs)]
    for a, b in zip(cut, cut[1:]):   # one line per configuration class: a class change is not a jump
        ax.plot(xs[a:b], ys[a:b], marker="o", markersize=4, color="tab:blue", linewidth=1.5,
                label=metric if a == 0 else None)
    # each point's run id (every k-th of many), to go on with `eagle show ID`
    every = max(1, -(-len(points) // 40))
    for x, y, p in list(zip(xs, ys, points))[::-1][::every]:
        ax.annotate(f"#{p['run_id']}", (x, y), fontsize=7, color="0.3", ha="center", xytext=(0, 6),
                    textcoords="offset points")
    bad = [(x, y) for x, y, p in zip(xs, ys, points) if p["run_id"] in trend.flagged]
    if bad:
        ax.scatter([x for x, _ in bad], [y for _, y in bad], color="tab:red", zorder=3, s=60, label="regression")
    base = trend.baseline
    if base is not None and base["run_id"] in by_run:
        bx, by = by_run[base["run_id"]]
        ax.scatter([bx], [by], marker="*", color="tab:green", zorder=4, s=160, label=f"baseline #{base['run_id']}")
    lo_y, hi_y = min(ys), max(ys)
    pad = (hi_y - lo_y) * 0.12 or abs(hi_y) * 0.05 or 1.0
    for i, cp in enumerate(trend.change_points):
        if cp["run_id"] in by_run:
            x, _ = by_run[cp["run_id"]]
            ax.axvline(x - 0.5, color="tab:orange", linestyle=":", linewidth=1.8,
                       label="change point" if i == 0 else None)
            ax.annotate(f"{cp['delta_pct']:+.1f}% from run #{cp['run_id']}", (x - 0.5, hi_y + pad * 0.6),
                        fontsize=9, color="tab:orange", ha="left", va="center", xytext=(4, 0),
                        textcoords="offset points",
                        bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "tab:orange", "lw": 0.8})
    for i, seg in enumerate(trend.segments):
        if seg["run_id"] in by_run:
            x, _ = by_run[seg["run_id"]]
            ax.axvline(x - 0.5, color="tab:purple", linewidth=1.4, label="configuration changed" if i == 0 else None)
            ax.annotate(_class_change(seg["was"], seg["config"]), (x - 0.5, lo_y - pad * 0.3), fontsize=8,
                        color="tab:purple", ha="left", va="center", xytext=(4, 0), textcoords="offset points")
    for i, (slot, seconds) in enumerate(gaps(when)):
        ax.axvline(slot + 0.5, color="0.45", linestyle=(0, (2, 2)), linewidth=1,
                   label="pause between runs" if i == 0 else None)
        ax.annotate(f"{_span(seconds)}\nno runs", (slot + 0.5, lo_y - pad * 0.55), fontsize=8, color="0.35",
                    ha="center", va="center",
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.9})
    labels = _tick_labels(when)
    ax.set_xticks([x for x, t in zip(xs, labels) if t])
    ax.set_xticklabels([t for t in labels if t], fontsize=9)
    ax.set_xticks(xs, minor=True)   # a small tick for every run
    ax.set_xlim(-0.7, len(xs) - 0.3)
    ax.set_ylim(lo_y - pad, hi_y + pad)
    ax.set_xlabel("runs, oldest first: one slot per run, its id above it (UTC start)")
    ax.set_ylabel(f"{metric} ({trend.unit})" if trend.unit else metric)
    ax.set_title(f"{trend.playbook} on {trend.host}: {metric}, {trend.better} is better — last {len(points)} runs "
                 f"(#{points[0]['run_id']}–#{points[-1]['run_id']})", fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out


def _class_change(was: str, now: str) -> str:
    """What differs between two configuration classes, e.g. `spec=EAGLE3 → spec=none`."""
    a, b = was.split(), now.split()
    old = [w for w in a if w not in b] or ["(not said)"]
    new = [w for w in b if w not in a] or ["(not said)"]
    return f"{' '.join(old)} → {' '.join(new)}"


def plot_trend(store: HistoryStore, playbook: str, host: str, metric: str, out_path: str | Path,
               limit: int = 30, cfg: RegressionConfig | None = None) -> Path:
    """Write a PNG of `metric` over the last `limit` runs; UsageError when there is no data."""
    return render_trend(load_trend(store, playbook, host, metric, limit, cfg), out_path)


def default_out(playbook: str, host: str, metric: str) -> Path:
    safe = "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", s) for s in (playbook, host, metric))
    return Path.cwd() / f"trend-{safe}.png"
