"""A tuning run's PNG: the throughput / per-request speed Pareto plot of every cell measured at every
batch size (the chosen config per batch size on the front, the current and the best static config
beside it), and the chains' predicted tok/s against what verifying them measured."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from eaglebot.frontends.format import a_or_an, sig3


def _plain_numbers(ax: Any) -> None:
    """Log axes labelled 120, 130, 150, not 1.2×10²: every major tick, and the minor ones where the
    axis spans less than a decade (where matplotlib would write them in powers of ten)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _pos: sig3(v))
    for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        if axis.get_scale() != "log":
            continue
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain if lo > 0 and hi / lo < 10 else NullFormatter())


def _label(c: dict[str, Any]) -> str:
    return f"{c['spec_steps']}/{c['spec_topk']}/{c['spec_draft_tokens']}"


def render_tune(r: dict[str, Any], out_path: str | Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 5.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 2, 1)
    front: list[tuple[float, float, str]] = []
    static: list[tuple[float, float]] = []
    current: list[tuple[float, float]] = []
    first = True
    for b_text, e in r["batch_sizes"].items():
        b = int(b_text)
        pts = [(c["tok_s"] / b, c["tok_s"]) for c in e.get("measured") or [] if c.get("tok_s")]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, color="0.72",
                       label="cells measured" if first else None)
            first = False
        if e.get("tok_s"):
            front.append((e["tok_s"] / b, e["tok_s"], f"bs {b}: {_label(e['choice'])}"))
        if e.get("static_tok_s"):
            static.append((e["static_tok_s"] / b, e["static_tok_s"]))
        if e.get("current_tok_s"):
            current.append((e["current_tok_s"] / b, e["current_tok_s"]))
    if static:
        ax.plot([p[0] for p in static], [p[1] for p in static], marker="s", color="tab:green", linewidth=1,
                label="best single static config")
    if current:
        ax.plot([p[0] for p in current], [p[1] for p in current], marker="^", color="tab:blue", linewidth=1,
                label="current config")
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], marker="o", color="tab:red", linewidth=2,
                label="best per batch size")
        for x, y, text in front:
            ax.annotate(text, (x, y), fontsize=8, color="tab:red", xytext=(5, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tok/s per request (interactivity), higher is better", fontsize=10)
    ax.set_ylabel("output tok/s (throughput), higher is better", fontsize=10)
    ax.set_title("throughput against per-request speed, every batch size", fontsize=11)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower left")
    ax2 = fig.add_subplot(1, 2, 2)
    xs, ys = [], []
    for e in r["batch_sizes"].values():
        for c in e.get("measured") or []:
            if c.get("predicted_tok_s") and c.get("tok_s"):
                xs.append(c["tok_s"])
                ys.append(c["predicted_tok_s"])
    if xs:
        lo, hi = min(xs + ys) * 0.9, max(xs + ys) * 1.1
        ax2.plot([lo, hi], [lo, hi], color="0.5", linewidth=1, label="exact")
        ax2.fill_between([lo, hi], [lo * 0.95, hi * 0.95], [lo * 1.05, hi * 1.05], color="0.9", label="within 5%")
        ax2.scatter(xs, ys, color="tab:purple", s=18, label="a chain verified at a batch size")
        ax2.set_xscale("log")
        ax2.set_yscale("log")
        ax2.legend(fontsize=8, loc="upper left")
    else:
        ax2.text(0.5, 0.5, "no predicted chain was verified", ha="center", va="center", transform=ax2.transAxes)
    ax2.set_xlabel("measured tok/s", fontsize=10)
    ax2.set_ylabel("predicted from the profile (tok/s)", fontsize=10)
    pc = r.get("prediction_checks") or {}
    ax2.set_title(f"predicted vs measured: {pc.get('within_5pct', 0)} of {pc.get('checked', 0)} within 5%", fontsize=11)
    ax2.grid(True, which="both", alpha=0.25)
    sim = " — SIMULATED" if r.get("simulated") else ""
    fig.suptitle(f"tuning run #{r['run_id']}: {r['playbook']} on {r['host']}{sim}, {r['launches']} launches of "
                 f"{a_or_an(r['grid_launches'])} {r['grid_launches']}-cell grid", fontsize=12)
    for a in (ax, ax2):
        _plain_numbers(a)
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out
