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


def render_sweep(result: dict[str, Any], x_axis: str, y_axis: str, out_path: str | Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    axes = result["spec"]["axes"]
    xs, ys = sorted(axes[x_axis], key=_key), sorted(axes[y_axis], key=_key)
    grid = [[math.nan for _ in xs] for _ in ys]
    for p in result["ranked"]:
        i, j = ys.index(str(p["inputs"][y_axis])), xs.index(str(p["inputs"][x_axis]))
        v = p["output_throughput"]
        if v is not None and (math.isnan(grid[i][j]) or v > grid[i][j]):
            grid[i][j] = v
    fig = Figure(figsize=(10, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 2, 1)
    im = ax.imshow(grid, cmap="viridis", origin="lower", aspect="auto")
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels(xs)
    ax.set_yticks(range(len(ys)))
    ax.set_yticklabels(ys)
    ax.set_xlabel(x_axis)
    ax.set_ylabel(y_axis)
    for i in range(len(ys)):
        for j in range(len(xs)):
            txt = "skipped" if math.isnan(grid[i][j]) else f"{grid[i][j]:.1f}"
            ax.text(j, i, txt, ha="center", va="center", color="white" if not math.isnan(grid[i][j]) else "gray",
                    fontsize=8)
    others = [a for a in axes if a not in (x_axis, y_axis)]
    ax.set_title("best output tok/s" + (f" over {', '.join(others)}" if others else ""), fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    ax2 = fig.add_subplot(1, 2, 2)
    pts = [p for p in result["ranked"] if p["output_throughput"] is not None and p["median_ttft_ms"] is not None]
    front = [p for p in pts if p["idx"] in result["pareto"]]
    ax2.scatter([p["median_ttft_ms"] for p in pts], [p["output_throughput"] for p in pts], color="tab:gray",
                label="points")
    front.sort(key=lambda p: p["median_ttft_ms"])
    ax2.plot([p["median_ttft_ms"] for p in front], [p["output_throughput"] for p in front], marker="o",
             color="tab:red", label="Pareto front")
    for p in front:
        ax2.annotate(",".join(str(v) for v in p["inputs"].values()), (p["median_ttft_ms"], p["output_throughput"]),
                     fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax2.set_xlabel("median TTFT (ms), lower is better")
    ax2.set_ylabel("output tok/s, higher is better")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=8)
    sim = " — SIMULATED" if result.get("simulated") else ""
    fig.suptitle(f"sweep #{result['sweep_id']}: {result['playbook']} on {result['host']}{sim}", fontsize=10)
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out
