"""Regression incidents: a flagged drop stays open until the metric recovers, a baseline is
set or an operator acknowledges it (`eagle ack RUN METRIC --reason ...`, `/eagle ack`).

What can happen to an incident (`IncidentDecision`: open, flag a run under it, close it)
is declared here; `regress.decide` chooses it for a judged run, and this module decides
what people do (acknowledge, set a baseline that closes them) from the rows `recorder`
loads, and describes incidents. Every close is audited with who and why. Light on
purpose: `eagle show` loads it (no pydantic or numpy).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

from eaglebot.errors import UsageError
from eaglebot.store.rows import IncidentRow, RunRow

if TYPE_CHECKING:
    from eaglebot.store.protocol import HistoryStore


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


CAUSE_SLACK = 2   # runs apart two metrics' drops may begin and still be one change point


def cause_of(inc: IncidentRow) -> int:
    """The id of the incident a metric's row belongs to (its own id for the first row)."""
    return inc.get("cause_id") or inc["id"]


def same_cause(new: NewIncident, open_: list[IncidentRow]) -> int | None:
    """The open incident of the same playbook + host whose drop began at the same change point
    (within CAUSE_SLACK runs) as `new`: one cause, so one incident with several metrics."""
    for inc in open_:
        if (inc["playbook"], inc["host"]) != (new.playbook, new.host) or inc["metric"] == new.metric:
            continue
        start = inc.get("ref_before_run") or inc["opened_run"]
        if abs(start - new.ref_before_run) <= CAUSE_SLACK:
            return cause_of(inc)
    return None


def by_cause(rows: list[IncidentRow]) -> list[list[IncidentRow]]:
    """Incident rows grouped by cause (newest cause first, its first row first)."""
    groups: dict[int, list[IncidentRow]] = {}
    for r in rows:
        groups.setdefault(cause_of(r), []).append(r)
    return [sorted(g, key=lambda r: r["id"]) for _, g in sorted(groups.items(), key=lambda kv: -kv[0])]


def describe_cause(rows: list[IncidentRow]) -> str:
    """One line for one cause: `incident #3 output_throughput, median_ttft_ms on gpu-01 (bench): ...`."""
    if len(rows) == 1:
        return describe(rows[0])
    head = rows[0]
    metrics = ", ".join(r["metric"] for r in rows)
    line = describe({**head, "id": cause_of(head), "metric": metrics})
    return line.split(", reference ")[0] if ", reference " in line else line


def describe(inc: IncidentRow) -> str:
    """One line: `incident #3 output_throughput on gpu-01 (bench): open since run #41, last flagged #45`."""
    ref, unit = inc.get("reference"), inc.get("unit")
    ref_txt = f", reference {ref:.4g}{(' ' + unit) if unit else ''}" if ref is not None else ""
    state = (f"open since run #{inc['opened_run']}, last flagged #{inc.get('last_run') or inc['opened_run']}"
             if inc.get("status") == "open"
             else f"closed ({inc.get('closed_kind')}) at run #{inc.get('closed_run') or '?'} by "
                  f"{inc.get('closed_by') or '?'}: {inc.get('reason') or ''}")
    return f"incident #{inc['id']} {inc['metric']} on {inc['host']} ({inc['playbook']}): {state}{ref_txt}"


def open_lines(store: HistoryStore, *, playbook: str | None = None, host: str | None = None) -> list[str]:
    return [describe_cause(g) for g in by_cause(store.incidents(playbook=playbook, host=host, status="open"))]


def open_text(store: HistoryStore, *, playbook: str | None = None, host: str | None = None) -> str:
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
    reason = _reason(reason)
    if run is None:
        raise UsageError(f"no run #{run_id} (to close an incident whose runs were pruned: eagle ack INCIDENT_ID)")
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


def decide_ack_incident(incident_id: int, cause: list[IncidentRow], reason: str, actor: str, *,
                        known: IncidentRow | None, open_now: list[IncidentRow]) -> Ack:
    """Close every open metric of incident #incident_id (`cause`: its open rows, every metric
    that moved at its change point); `known`: the row of that id whatever its state, to say
    why nothing can be closed. UsageError says why not."""
    reason = _reason(reason)
    if not cause:
        if known is not None:
            raise UsageError(f"incident #{incident_id} is already closed ({known.get('closed_kind')} by "
                             f"{known.get('closed_by') or '?'})")
        open_ = [f"#{cause_of(g[0])} {', '.join(i['metric'] for i in g)} on {g[0]['host']}"
                 for g in by_cause(open_now)]
        raise UsageError(f"no incident #{incident_id} (open: {', '.join(open_) if open_ else 'none'})")
    return _ack_rows(cause, reason, actor, incident_id)


def decide_ack_all(run_id: int, run: RunRow | None, reason: str, actor: str, *,
                   flagged: list[IncidentRow], on_hosts: list[IncidentRow]) -> Ack:
    """`eagle ack RUN --all`: close every open incident that flagged run #run_id, else every
    open incident of its playbook on its hosts. UsageError says why not."""
    reason = _reason(reason)
    if run is None and not flagged:
        raise UsageError(f"no run #{run_id} (to close an incident whose runs were pruned: eagle ack INCIDENT_ID)")
    mine = flagged or on_hosts
    if not mine:
        raise UsageError(f"no open incident for run #{run_id}")
    return _ack_rows(mine, reason, actor, run_id)


def _reason(reason: str) -> str:
    reason = " ".join(reason.split())
    if not reason:
        raise UsageError("an ack needs a reason (e.g. `--reason \"new draft model, slower but better quality\"`)")
    return reason


def _ack_rows(rows: list[IncidentRow], reason: str, actor: str, run_id: int | None) -> Ack:
    """Close each row; one event and one sentence per cause (incident)."""
    closes, events, out = [], [], []
    for g in by_cause(rows):
        cid = cause_of(g[0])
        what = (f"{', '.join(i['metric'] for i in g)} on {g[0]['host']} ({g[0]['playbook']}), "
                f"open since run #{min(i['opened_run'] for i in g)}")
        closes += [Closing(i["id"], "ack", actor, reason, run_id) for i in g]
        events.append(f"{actor} acknowledged incident #{cid} ({what}): {reason}")
        out.append(f"incident #{cid} ({what}) acknowledged by {actor}: {reason}; "
                   f"runs from #{min(i['opened_run'] for i in g)} on are the new reference")
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
