"""Regression incidents: a flagged drop stays open until the metric recovers, a baseline is
set or an operator acknowledges it (`eagle ack RUN METRIC --reason ...`, `/eagle ack`).

The judging lives in `regress.check_run`; this module is what people do with incidents:
list them, describe them, and close them by hand (always audited with who and why).
"""
from __future__ import annotations

from typing import Any, Mapping

from eaglebot.errors import UsageError


def describe(inc: Mapping[str, Any]) -> str:
    """One line: `incident #3 output_throughput on gpu-01 (bench): open since run #41, last flagged #45`."""
    ref = inc.get("reference")
    ref_txt = f", reference {ref:.4g}{(' ' + inc['unit']) if inc.get('unit') else ''}" if ref is not None else ""
    state = (f"open since run #{inc['opened_run']}, last flagged #{inc.get('last_run') or inc['opened_run']}"
             if inc.get("status") == "open"
             else f"closed ({inc.get('closed_kind')}) at run #{inc.get('closed_run') or '?'} by "
                  f"{inc.get('closed_by') or '?'}: {inc.get('reason') or ''}")
    return f"incident #{inc['id']} {inc['metric']} on {inc['host']} ({inc['playbook']}): {state}{ref_txt}"


def open_lines(store: Any, *, playbook: str | None = None, host: str | None = None) -> list[str]:
    return [describe(i) for i in store.incidents(playbook=playbook, host=host, status="open")]


def open_text(store: Any, *, playbook: str | None = None, host: str | None = None) -> str:
    """`open incidents:` and one line each, or "" when there are none."""
    lines = open_lines(store, playbook=playbook, host=host)
    return "\n".join(["open regression incidents:", *[f"  {line}" for line in lines]]) if lines else ""


def ack(store: Any, run_id: int, metric: str, reason: str, actor: str) -> str:
    """Close the open incident of `metric` that run #run_id belongs to (or, when that run was
    not flagged, the open incident of its playbook + host + metric). The new level becomes
    the reference from the incident's first run on. Returns the sentence to show."""
    reason = " ".join(reason.split())
    if not reason:
        raise UsageError("an ack needs a reason (e.g. `--reason \"new draft model, slower but better quality\"`)")
    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"no run #{run_id}")
    mine = [i for i in store.incidents(status="open", run_id=run_id) if i["metric"] == metric]
    if not mine:
        mine = [i for h in run.get("hosts") or []
                for i in store.incidents(playbook=run["playbook"], host=h, status="open") if i["metric"] == metric]
    if not mine:
        open_ = [f"#{i['id']} {i['metric']} on {i['host']}" for i in store.incidents(status="open", limit=10)]
        raise UsageError(f"no open incident of {metric} for run #{run_id} "
                         f"(open: {', '.join(open_) if open_ else 'none'})")
    out = []
    for inc in mine:
        store.close_incident(inc["id"], "ack", actor, reason, run_id)
        store.add_event(run_id, "ack", f"{actor} acknowledged incident #{inc['id']} ({metric} on {inc['host']}, "
                                       f"open since run #{inc['opened_run']}): {reason}")
        out.append(f"incident #{inc['id']} ({metric} on {inc['host']}, open since run #{inc['opened_run']}) "
                   f"acknowledged by {actor}: {reason}; runs from #{inc['opened_run']} on are the new reference")
    return "\n".join(out)
