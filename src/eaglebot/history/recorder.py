"""Writes what history decided, through the store (sync: it runs on the store thread).

Each entry point loads the rows a decision needs (`loader`), calls the pure decision
(`regress`, `incidents`), and records it: fingerprints, incidents opened, flagged and
closed, baselines, events and the reasons of fixed-baseline regressions. The regressions
a run found are returned; the engine writes those rows (post-run hooks).
"""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

from eaglebot.config import RegressionConfig
from eaglebot.history import loader
from eaglebot.history.fingerprint import empty_state
from eaglebot.history.host_state import host_state, record_fingerprint
from eaglebot.history.incidents import (Ack, Closing, IncidentDecision, baseline_closes, baseline_text,
                                        cause_of, check_baseline, decide_ack, decide_ack_all, decide_ack_incident,
                                        same_cause)
from eaglebot.history.regress import Subject, decide, drop_start, judge_window, needs_attribution, wants_attribution
from eaglebot.sdk import Metric, Regression
from eaglebot.store.rows import IncidentRow

if TYPE_CHECKING:
    from eaglebot.store.protocol import HistoryStore


def close(store: HistoryStore, c: Closing) -> None:
    """Close an incident (only an open one: the store ignores a second close)."""
    store.close_incident(c.incident_id, c.kind, c.by, c.reason, c.run_id)


def apply_incident(store: HistoryStore, d: IncidentDecision, run_id: int) -> None:
    """Write one metric's incident decision for run_id (at most one of open, flag, close). A
    new incident whose drop began at the change point of an open one on the same playbook +
    host joins it (`incidents.same_cause`): one cause, one incident with several metrics."""
    if d.open is not None:
        o = d.open
        cause = same_cause(o, store.incidents(playbook=o.playbook, host=o.host, status="open"))
        iid = store.open_incident(playbook=o.playbook, host=o.host, metric=o.metric, run_id=o.run_id,
                                  ref_before_run=o.ref_before_run, reference=o.reference, unit=o.unit,
                                  better=o.better, cause_id=cause)
        for r in o.more_runs:
            store.incident_flagged(iid, r)
    if d.flag is not None:
        store.incident_flagged(d.flag, run_id)
    if d.close is not None:
        close(store, d.close)


def check_run(store: HistoryStore, run_id: int, playbook: str, hosts: list[str],
              metrics: list[tuple[str, Metric]], cfg: RegressionConfig) -> tuple[list[Regression], list[str]]:
    """Judge every metric of a finished run against its history (`regress.decide`) and record
    what that decided. Returns the regressions and improvements, and notes (e.g.
    insufficient history) for the audit trail's events."""
    fp = record_fingerprint(store, run_id, hosts)
    found: list[Regression] = []
    notes: list[str] = []
    latest: dict[tuple[str, str], Metric] = {}
    for h, m in metrics:
        latest[(h, m.name)] = m
    attributions: dict[str, str] = {}
    for (h, _), m in latest.items():
        s = Subject(playbook, h, run_id, m)
        first = loader.since(store, s)
        prior = loader.series(store, s, first)
        win = loader.reference(store, s, cfg, first, prior)
        j = judge_window(s, win, cfg)
        shift = loader.worse_drift(store, s, first, cfg, prior)
        if needs_attribution(j, win) and h not in attributions:
            attributions[h] = loader.attribution(store, playbook, h, run_id, fp.get(h) or empty_state(),
                                                 drop_start(s, j, win, cfg))
        v = decide(s, j, win, shift, attributions.get(h, ""), cfg)
        apply_incident(store, v.incident, run_id)
        if v.warning:
            store.add_warning(run_id, h, v.warning)
        if v.note:
            notes.append(v.note)
        if v.finding is not None:
            found.append(v.finding)
    return found, notes


def attribute_fixed(store: HistoryStore, run_id: int, playbook: str, regressions: list[Regression]) -> None:
    """Regressions against fixed baselines (bench.compare) get the same "what changed"
    clause; the reported objects and their stored rows both get the new reason."""
    cache: dict[str, str] = {}
    for r in regressions:
        if not wants_attribution(r):
            continue
        if r.host not in cache:
            cache[r.host] = loader.attribution(store, playbook, r.host, run_id,
                                               host_state(store, r.host, run_id))
        old, r.reason = r.reason, f"{r.reason}; {cache[r.host]}"
        store.update_regression_reason(run_id, r.host, r.metric, old, r.reason)


def set_baseline(store: HistoryStore, run_id: int, actor: str) -> str:
    """Mark a run as the baseline of its playbook on each of its hosts (CLI and Slack); it
    closes their open incidents. Returns the sentence to show; UsageError when the run
    cannot be a baseline."""
    check_baseline(run_id, store.get_run(run_id))
    res = store.set_baseline(run_id, actor)
    for h in res["hosts"]:
        opened = store.incidents(playbook=res["playbook"], host=h, status="open")
        for c in baseline_closes(run_id, actor, opened):
            close(store, c)
    return baseline_text(run_id, res["playbook"], res["hosts"], len(store.metrics(run_id)))


def ack(store: HistoryStore, run_id: int, metric: str, reason: str, actor: str) -> str:
    """Acknowledge the open incident of `metric` run #run_id belongs to (`incidents.decide_ack`):
    close it and audit who and why. Returns the sentence to show."""
    run = store.get_run(run_id)
    on_hosts: list[IncidentRow] = []
    if run is not None:
        for h in run["hosts"] or []:
            on_hosts += store.incidents(playbook=run["playbook"], host=h, status="open")
    d = decide_ack(run_id, run, metric, reason, actor,
                   flagged=store.incidents(status="open", run_id=run_id), on_hosts=on_hosts,
                   open_now=store.incidents(status="open", limit=10))
    return _apply_ack(store, d, run_id)


def _apply_ack(store: HistoryStore, d: Ack, run_id: int | None) -> str:
    for c in d.closes:
        close(store, c)
    for event in d.events:
        store.add_event(run_id, "ack", event)
    return d.text


def ack_incident(store: HistoryStore, incident_id: int, reason: str, actor: str) -> str:
    """`eagle ack INCIDENT_ID`: close every open metric of the incident (its cause), by id, so
    it can be closed after its runs were pruned. Returns the sentence to show."""
    known = store.incident(incident_id)
    head = cause_of(known) if known is not None else incident_id
    cause = [i for i in store.incident_cause(head) if i["status"] == "open"]
    d = decide_ack_incident(head, cause, reason, actor, known=known, open_now=store.incidents(status="open", limit=10))
    return _apply_ack(store, d, max(int(i.get("last_run") or i["opened_run"]) for i in cause))


def ack_run(store: HistoryStore, run_id: int, reason: str, actor: str) -> str:
    """`eagle ack RUN_ID --all`: close every open incident run #run_id belongs to."""
    run = store.get_run(run_id)
    on_hosts: list[IncidentRow] = []
    if run is not None:
        for h in run["hosts"] or []:
            on_hosts += store.incidents(playbook=run["playbook"], host=h, status="open")
    d = decide_ack_all(run_id, run, reason, actor, flagged=store.incidents(status="open", run_id=run_id),
                       on_hosts=on_hosts)
    return _apply_ack(store, d, run_id)
