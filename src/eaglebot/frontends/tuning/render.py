"""Text of sweeps, bisections and run diffs (terminal, `eagle chat`, Slack code blocks)."""
from __future__ import annotations

from typing import Any

from eaglebot.frontends.format import table
from eaglebot.history.attribution import show


def _f(v: Any, nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def sweep_text(r: dict[str, Any]) -> str:
    axes = r["axes"]
    sim = " — SIMULATED server" if r.get("simulated") else ""
    head = (f"sweep #{r['sweep_id']}: {r['playbook']} on {r['host']}, {len(r['ranked'])} points measured, "
            f"{len(r['skipped'])} skipped{sim}")
    rows = [[str(p["rank"]), *[str(p["inputs"].get(a)) for a in axes],
             f"{_f(p['output_throughput'])} ±{_f((p.get('throughput_spread') or 0) / 2)}",
             _f(p["median_ttft_ms"]), _f(p["accept_length"], 2), str(p.get("repeats") or 1),
             "*" if p["idx"] in r["pareto"] else "", f"#{p['run_id']}"] for p in r["ranked"]]
    out = [head]
    if rows:
        out.append(table(["rank", *axes, "output tok/s (median ±half-range)", "TTFT ms", "accept len", "n",
                          "pareto", "run"], rows))
    for p in r["skipped"]:
        out.append("skipped " + " ".join(f"{a}={p['inputs'].get(a)}" for a in axes) + f": {p['reason']}")
    for p in r["failed"]:
        out.append("failed " + " ".join(f"{a}={p['inputs'].get(a)}" for a in axes) +
                   f" (run #{p['run_id']}): {p['reason']}")
    if r["pending"]:
        out.append(f"{len(r['pending'])} points not run yet: `eagle sweep resume {r['sweep_id']}`")
    if r["best"]:
        b = r["best"]
        out.append("best: " + " ".join(f"{a}={b['inputs'].get(a)}" for a in axes) +
                   f" → {b['output_throughput']:.1f} tok/s (run #{b['run_id']})")
    if r.get("final"):
        out.append(r["final"]["state"])
    return "\n".join(out)


def diff_text(d: dict[str, Any]) -> str:
    a, b = d["a"], d["b"]
    out = [f"diff run #{a['id']} ({a['playbook']} on {a['host']}, {a['status']}) → "
           f"run #{b['id']} ({b['playbook']} on {b['host']}, {b['status']})"]

    def section(title: str, rows: list[list[str]], header: list[str]) -> None:
        if rows:
            out.extend(["", title, table(header, rows)])
        else:
            out.extend(["", f"{title} same"])

    section("inputs:", [[k, show(v[0]), show(v[1])] for k, v in d["inputs"].items()], ["input", f"#{a['id']}", f"#{b['id']}"])
    section("launch arguments:", [[k, show(v[0]), show(v[1])] for k, v in d["launch"].items()],
            ["flag", f"#{a['id']}", f"#{b['id']}"])
    if d["config_changes"]:
        out.extend(["", "config (the RFC 6902 patch is in --json):"])
        for label in dict.fromkeys(c["label"] for c in d["config_changes"]):
            out.append(f"  {label}")
            out.extend(f"    {c['key']}: {show(c['a'])} → {show(c['b'])}"
                       for c in d["config_changes"] if c["label"] == label)
    else:
        out.extend(["", "config: same"])
    section("versions:", [[k, show(v[0]), show(v[1])] for k, v in d["versions"].items()],
            ["package", f"#{a['id']}", f"#{b['id']}"])
    section("env:", [[k, show(v[0]), show(v[1])] for k, v in d["env"].items()], ["variable", f"#{a['id']}", f"#{b['id']}"])
    if d["health"]:
        out.extend(["", "GPU health:"] + [f"  {h}" for h in d["health"]])
    section("metrics:", [[m["name"], _f(m["a"], 2), _f(m["b"], 2),
                          "-" if m["delta_pct"] is None else f"{m['delta_pct']:+.1f}%"] for m in d["metrics"]],
            ["metric", f"#{a['id']}", f"#{b['id']}", "delta"])
    if d["ranked"]:
        out.extend(["", "most likely cause first: " + "; ".join(c["text"] for c in d["ranked"][:6])])
    return "\n".join(out)


def bisect_text(r: dict[str, Any]) -> str:
    out = [f"bisect #{r['bisect_id']}: run #{r['good']} (good, {_f(r['good_value'])}) vs run #{r['bad']} "
           f"(bad, {_f(r['bad_value'])}) on {r['host']}: {len(r['changes'])} change{'s' if len(r['changes']) != 1 else ''}, "
           f"{r['benchmark_points']} benchmark points (bound {r['bound']})"]
    rows = [[str(i + 1), ", ".join(p["applied"]) or "(none: GOOD)", _f(p["value"]), p["verdict"], f"#{p['run_id']}"]
            for i, p in enumerate(r["points"])]
    if rows:
        out.append(table(["point", "changes applied (BAD values)", r["metric"], "judged", "run"], rows))
    out.append(r["conclusion"])
    if r.get("not_bisectable"):
        out.append("not bisectable (cannot be applied by relaunching): " + "; ".join(r["not_bisectable"]))
    out.append(r["final_state"])
    return "\n".join(out)
