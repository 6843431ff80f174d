"""The sweep's heatmap (best output throughput over two chosen axes) and its throughput /
TTFT Pareto front, as one PNG (matplotlib Agg: no display, no pyplot global state)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def _key(v: Any) -> tuple[int, float | str]:
    try:
        return (0, float(v))
    except (TypeError, ValueError):
        return (1, str(v))


def _cmap() -> Any:
    from matplotlib import colormaps

    return colormaps["viridis"]


def _hatch(j: int, i: int) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//", edgecolor="0.75", linewidth=0)


def _best_box(j: int, i: int) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((j - 0.46, i - 0.46), 0.92, 0.92, fill=False, edgecolor="tab:red", linewidth=2.5)


def _short(name: str) -> str:
    """An input's name in a point label: spec_steps -> steps (the axis titles say the rest)."""
    return name.removeprefix("spec_")


def _line(ax: Any, result: dict[str, Any], x_axis: str) -> None:
    """One swept input: the best output tok/s at each of its values, as a line."""
    xs = sorted(result["spec"]["axes"][x_axis], key=_key)
    best: dict[str, float] = {}
    for p in result["ranked"]:
        x, v = str(p["inputs"][x_axis]), p["output_throughput"]
        if v is not None and v > best.get(x, -math.inf):
            best[x] = v
    at = [j for j, x in enumerate(xs) if x in best]
    ax.plot(at, [best[xs[j]] for j in at], marker="o", color="tab:blue", linewidth=2)
    for j in at:
        ax.annotate(f"{best[xs[j]]:,.0f}", (j, best[xs[j]]), fontsize=10, xytext=(0, 7), textcoords="offset points",
                    ha="center")
    for j in (j for j in range(len(xs)) if xs[j] not in best):
        ax.axvline(j, color="0.75", linestyle=":", linewidth=1)
        ax.text(j, 0.02, "skipped", transform=ax.get_xaxis_transform(), ha="center", color="0.35", style="italic")
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels(xs, fontsize=11)
    ax.set_xlabel(x_axis, fontsize=12)
    ax.set_ylabel("best output tok/s", fontsize=11)
    ax.set_title("best output tok/s per value (higher is better)", fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.margins(x=0.08, y=0.15)   # room for the values written above the points


def render_sweep(result: dict[str, Any], x_axis: str, y_axis: str | None, out_path: str | Path) -> Path:
    """The heatmap over two swept inputs (a line plot over one: `y_axis` None) and the Pareto front."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if y_axis is None:
        fig = Figure(figsize=(13, 5), dpi=110)
        FigureCanvasAgg(fig)
        _line(fig.add_subplot(1, 2, 1), result, x_axis)
        return _pareto_and_save(fig, result, out_path, "")
    axes = result["spec"]["axes"]
    xs, ys = sorted(axes[x_axis], key=_key), sorted(axes[y_axis], key=_key)
    grid = [[math.nan for _ in xs] for _ in ys]
    for p in result["ranked"]:
        i, j = ys.index(str(p["inputs"][y_axis])), xs.index(str(p["inputs"][x_axis]))
        v = p["output_throughput"]
        if v is not None and (math.isnan(grid[i][j]) or v > grid[i][j]):
            grid[i][j] = v
    fig = Figure(figsize=(13, 5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 2, 1)
    cmap = _cmap()
    im = ax.imshow(grid, cmap=cmap, origin="lower", aspect="auto")
    ax.set_facecolor("0.93")   # a skipped cell (NaN) shows the background, hatched below
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels(xs, fontsize=11)
    ax.set_yticks(range(len(ys)))
    ax.set_yticklabels(ys, fontsize=11)
    ax.set_xlabel(x_axis, fontsize=12)
    ax.set_ylabel(y_axis, fontsize=12)
    ax.set_xticks([j - 0.5 for j in range(1, len(xs))], minor=True)
    ax.set_yticks([i - 0.5 for i in range(1, len(ys))], minor=True)
    ax.grid(which="minor", color="white", linewidth=2)
    ax.tick_params(which="minor", length=0)
    finite = [v for row in grid for v in row if not math.isnan(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    for i in range(len(ys)):
        for j in range(len(xs)):
            v = grid[i][j]
            if math.isnan(v):
                ax.add_patch(_hatch(j, i))
                ax.text(j, i, "skipped", ha="center", va="center", color="0.35", fontsize=10, style="italic")
                continue
            # dark text on the light end of the colour map, white on the dark end
            level = (v - lo) / (hi - lo) if hi > lo else 1.0
            ax.text(j, i, f"{v:,.0f}", ha="center", va="center", fontsize=12, fontweight="bold",
                    color="black" if level > 0.7 else "white")
            if finite and v == hi:
                ax.add_patch(_best_box(j, i))
    others = [a for a in axes if a not in (x_axis, y_axis)]
    ax.set_title("best output tok/s per cell (higher is better)" + (f"\nover {', '.join(others)}" if others else ""),
                 fontsize=11)
    bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label("output tok/s", fontsize=10)
    return _pareto_and_save(fig, result, out_path, " (red box: the best cell)")


def _pareto_and_save(fig: Any, result: dict[str, Any], out_path: str | Path, note: str) -> Path:
    ax2 = fig.add_subplot(1, 2, 2)
    pts = [p for p in result["ranked"] if p["output_throughput"] is not None and p["median_ttft_ms"] is not None]
    front = [p for p in pts if p["idx"] in result["pareto"]]
    ax2.scatter([p["median_ttft_ms"] for p in pts], [p["output_throughput"] for p in pts], color="tab:gray",
                label="points")
    front.sort(key=lambda p: p["median_ttft_ms"])
    ax2.plot([p["median_ttft_ms"] for p in front], [p["output_throughput"] for p in front], marker="o",
             color="tab:red", label="Pareto front")
    # Front points are numbered on the plot and named in a key: their labels would overlap
    # where the front is dense.
    key = []
    for n, p in enumerate(front, 1):
        ax2.annotate(str(n), (p["median_ttft_ms"], p["output_throughput"]), fontsize=9, fontweight="bold",
                     color="tab:red", xytext=(4, -12), textcoords="offset points")
        key.append(f"{n}: " + " ".join(f"{_short(k)}={v}" for k, v in p["inputs"].items()))
    if key:
        ax2.text(1.02, 1.0, "\n".join(key[:12]) + ("\n…" if len(key) > 12 else ""), transform=ax2.transAxes,
                 fontsize=8, va="top", ha="left", family="monospace",
                 bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": "0.8"})
    ax2.set_xlabel("median TTFT (ms), lower is better", fontsize=11)
    ax2.set_ylabel("output tok/s, higher is better", fontsize=11)
    ax2.set_title("throughput against time to first token", fontsize=11)
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=9, loc="upper left")
    sim = " — SIMULATED" if result.get("simulated") else ""
    fig.suptitle(f"sweep #{result['sweep_id']}: {result['playbook']} on {result['host']}{sim}{note}", fontsize=12)
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out
