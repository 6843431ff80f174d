"""Text of a tuning run (terminal, `eagle chat`, Slack code blocks)."""
from __future__ import annotations

from typing import Any

from eaglebot.frontends.format import a_or_an, table


def _cell(c: dict[str, Any] | None) -> str:
    if not c:
        return "-"
    return f"steps={c['spec_steps']} topk={c['spec_topk']} draft={c['spec_draft_tokens']}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def tune_text(r: dict[str, Any]) -> str:
    budget = r.get("budget") or {}
    of_time = f" of {budget['max_seconds']:.0f} s" if budget.get("max_seconds") else ""
    head = (f"tuning run #{r['run_id']}: {r['playbook']} on {r['host']}, {a_or_an(r['grid_launches'])} {r['grid_launches']}-cell grid "
            f"({r['cells_measured']} cells measured, {r['cells_predicted']} chains predicted); budget used: "
            f"{r['launches']} of {budget.get('max_launches', '?')} launches, {r['seconds']:.0f} s{of_time}; "
            f"noise {r['noise_pct']:.1f}% (MAD)")
    rows = []
    counts = {(e.get("cells_measured"), e.get("cells_predicted")) for e in r["batch_sizes"].values()
              if e.get("tok_s") is not None}
    per_size = len(counts) > 1   # the same counts on every row are the head's, not a column
    for b, e in r["batch_sizes"].items():
        if e.get("tok_s") is None:
            rows.append([b, "-", "nothing measured", "-", "-", *(["-"] if per_size else []), "-"])
            continue
        rows.append([b, _cell(e["choice"]), f"{e['tok_s']:.1f} ±{e['spread']:.1f}", _pct(e.get("gain_vs_current_pct")),
                     _pct(e.get("gain_vs_static_pct")),
                     *([f"{e['cells_measured']}/{e['cells_predicted']}"] if per_size else []),
                     f"{e['deployed_tok_s']:.1f}" if e.get("deployed_tok_s") else "-"])
    out = [head, table(["batch", "best (measured)", "tok/s ±MAD", "vs current", "vs static",
                        *(["cells measured/chains predicted"] if per_size else []), "deployed tok/s"], rows)]
    pc = r.get("prediction_checks") or {}
    if pc.get("checked"):
        out.append(f"predicted chains verified: {pc['within_5pct']} of {pc['checked']} within 5% of the measurement")
    if r.get("static_best"):
        out.append(f"best single static config: {r['static_best']['label']}")
    if r.get("current"):
        out.append(f"current config: {_cell(r['current']['choice'])}")
    d = r.get("deploy")
    if d:
        out.append(f"deploy ({d['mode']}): {d['why']}")
        for why in d.get("rejected") or []:
            out.append(f"rejected: {why}")
    out.append(f"search stopped: {r['stopped']}")
    if r.get("caveat"):
        out.append(f"caveat: {r['caveat']}")
    for f in r.get("failed") or []:
        out.append(f"failed {_cell(f)}: {f['reason']}")
    if (rs := r.get("restored")):
        out.append(f"the config found running was relaunched (run #{rs['run_id']})" if rs.get("ok") else
                   f"relaunching the config found running failed (run #{rs['run_id']})")
    a = r.get("applied")
    if a:
        out.append(f"applied (approved by {a['approved_by']}): run #{a['run_id']}" if a.get("ok") else
                   f"not applied: {a['why']}")
    return "\n".join(out)
