"""Regression incidents: a flagged drop stays open until the metric recovers, a baseline is
set or an operator acknowledges it (`eagle ack RUN METRIC --reason ...`, `/eagle ack`).

What can happen to an incident (`IncidentDecision`: open, flag a run under it, close it)
is declared here; `regress.decide` chooses it for a judged run, and this module decides
what people do (acknowledge, set a baseline that closes them) from the rows `recorder`
loads, and describes incidents. Every close is audited with who and why. Light on
purpose: `eagle show` loads it (no pydantic or numpy).
"""
from __future__ import annotations

from dataclasses import dataclass

from eaglebot.errors import UsageError
from eaglebot.store.protocol import StoreProtocol
from eaglebot.store.rows import IncidentRow, RunRow


@dataclass(frozen=True)
class NewIncident:
    """An incident to open: later runs are compared with the reference from before `ref_before_run`."""

    playbook: str
    host: str
    metric: str
    run_id: int
    ref_before_run: int
    reference: float | None
    unit: str
    better: str
    more_runs: tuple[int, ...] = ()   # later runs it flags too (the confirming runs, this one last)


@dataclass(frozen=True)
class Closing:
    """An open incident to close, audited with its kind (recovered | ack | baseline), who and why."""

    incident_id: int
    kind: str
    by: str
    reason: str
    run_id: int | None


@dataclass(frozen=True)
class IncidentDecision:
    """At most one of: open a new incident, flag this run under the open one, close it."""

    open: NewIncident | None = None
    flag: int | None = None          # the open incident's id
    close: Closing | None = None


def describe(inc: IncidentRow) -> str:
    """One line: `incident #3 output_throughput on gpu-01 (bench): open since run #41, last flagged #45`."""
    ref, unit = inc.get("reference"), inc.get("unit")
    ref_txt = f", reference {ref:.4g}{(' ' + unit) if unit else ''}" if ref is not None else ""
    state = (f"open since run #{inc['opened_run']}, last flagged #{inc.get('last_run') or inc['opened_run']}"
             if inc.get("status") == "open"
             else f"closed ({inc.get('closed_kind')}) at run #{inc.get('closed_run') or '?'} by "
                  f"{inc.get('closed_by') or '?'}: {inc.get('reason') or ''}")
    return f"incident #{inc['id']} {inc['metric']} on {inc['host']} ({inc['playbook']}): {state}{ref_txt}"


def open_lines(store: StoreProtocol, *, playbook: str | None = None, host: str | None = None) -> list[str]:
    return [describe(i) for i in store.incidents(playbook=playbook, host=host, status="open")]


def open_text(store: StoreProtocol, *, playbook: str | None = None, host: str | None = None) -> str:
    """`open incidents:` and one line each, or "" when there are none."""
    lines = open_lines(store, playbook=playbook, host=host)
    return "\n".join(["open regression incidents:", *[f"  {line}" for line in lines]]) if lines else ""


@dataclass(frozen=True)
class Ack:
    """An acknowledgement decided: the incidents to close, an event for each, the sentence."""

    closes: list[Closing]
    events: list[str]
    text: str


def decide_ack(run_id: int, run: RunRow | None, metric: str, reason: str, actor: str, *,
               flagged: list[IncidentRow], on_hosts: list[IncidentRow], open_now: list[IncidentRow]) -> Ack:
    """Close the open incident of `metric` that run #run_id belongs to (`flagged`: the open
    incidents that flagged it) or, when that run was not flagged, the open incident of its
    playbook + host + metric (`on_hosts`: the open incidents of its playbook on its hosts).
    The new level becomes the reference from the incident's first run on. `open_now`: a few
    open incidents, named when there is nothing to ack. UsageError says why not."""
    reason = " ".join(reason.split())
    if not reason:
        raise UsageError("an ack needs a reason (e.g. `--reason \"new draft model, slower but better quality\"`)")
    if run is None:
        raise UsageError(f"no run #{run_id}")
    mine = [i for i in flagged if i["metric"] == metric] or [i for i in on_hosts if i["metric"] == metric]
    if not mine:
        open_ = [f"#{i['id']} {i['metric']} on {i['host']}" for i in open_now]
        raise UsageError(f"no open incident of {metric} for run #{run_id} "
                         f"(open: {', '.join(open_) if open_ else 'none'})")
    closes, events, out = [], [], []
    for inc in mine:
        what = f"{metric} on {inc['host']}, open since run #{inc['opened_run']}"
        closes.append(Closing(inc["id"], "ack", actor, reason, run_id))
        events.append(f"{actor} acknowledged incident #{inc['id']} ({what}): {reason}")
        out.append(f"incident #{inc['id']} ({what}) acknowledged by {actor}: {reason}; "
                   f"runs from #{inc['opened_run']} on are the new reference")
    return Ack(closes, events, "\n".join(out))


def check_baseline(run_id: int, run: RunRow | None) -> RunRow:
    """The run, when it can be the baseline of its playbook; UsageError says why not."""
    if run is None:
        raise UsageError(f"no run #{run_id}")
    if run["status"] != "succeeded":
        raise UsageError(f"run #{run_id} {run['status']}: only a succeeded run can be a baseline")
    if run.get("dry_run"):
        raise UsageError(f"run #{run_id} was a dry run (it measured nothing): pick a real run as the baseline")
    if not run.get("hosts"):
        raise UsageError(f"run #{run_id} has no hosts to be the baseline of")
    return run


def baseline_closes(run_id: int, actor: str, open_incidents: list[IncidentRow]) -> list[Closing]:
    """A new baseline closes the open incidents of its playbook on its hosts."""
    return [Closing(i["id"], "baseline", actor, f"baseline set to run #{run_id} by {actor}", run_id)
            for i in open_incidents]


def baseline_text(run_id: int, playbook: str, hosts: list[str], n_metrics: int) -> str:
    n = n_metrics
    what = f"{n} metric{'s' if n != 1 else ''}" if n else "no metrics (history checks start from it anyway)"
    return (f"run #{run_id} is now the baseline of {playbook} on {', '.join(hosts)} "
            f"({what}); regression checks compare with it and the runs after it")
