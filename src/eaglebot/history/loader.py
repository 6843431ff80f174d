"""The rows history judges by, read from the store (sync: it runs on the store thread).

Every read the judgement needs is here, and only reads: `recorder` writes. Rows come back
typed as their audit table's TypedDict (`store.rows`), so the pure code after is typed.
"""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

from eaglebot.config import RegressionConfig
from eaglebot.history.attribution import attribution_text, since_good_run, state_changes
from eaglebot.history.diff import DiffRows, pick_hosts
from eaglebot.history.host_state import host_state
from eaglebot.history.regress import (CP_MIN_RUNS, CP_WINDOW, RANGE_RUNS, Drift, Subject, Window, drift, window_limit,
                                      window_since, window_what, worse_shift_point)
from eaglebot.store.rows import IncidentRow

if TYPE_CHECKING:
    from eaglebot.store.protocol import HistoryStore


def since(store: HistoryStore, s: Subject) -> int | None:
    """The first run the metric's reference may use (its baseline or last ack), if any."""
    return window_since(store.reference_start(s.playbook, s.host, s.metric.name), s.run_id)


def series(store: HistoryStore, s: Subject, since: int | None) -> list[tuple[int, float]]:
    """The metric's prior values of the same class (run id, value; oldest first), the last
    CP_WINDOW - 1: what the change-point search and the regime read."""
    rows = store.metric_history(s.playbook, s.host, s.metric.name, before_run=s.run_id, since_run=since,
                                limit=CP_WINDOW - 1, config=s.metric.config)
    return [(int(r["run_id"]), float(r["value"])) for r in reversed(rows)]


def open_incident(store: HistoryStore, s: Subject) -> IncidentRow | None:
    """The metric's open incident, when its drop was measured in the same configuration class
    or in none said (a run of another class, e.g. the no-speculation reference, is judged
    beside it)."""
    inc = store.open_incident_for(s.playbook, s.host, s.metric.name)
    if inc is None:
        return None
    opened = [m for m in store.metrics_for_runs([inc["opened_run"]]).get(inc["opened_run"], [])
              if m["name"] == s.metric.name and m["host"] == s.host]
    if opened and opened[0]["config_class"] and opened[0]["config_class"] != s.metric.config:
        return None
    return inc


def reference(store: HistoryStore, s: Subject, cfg: RegressionConfig, since: int | None,
              prior: list[tuple[int, float]] | None = None) -> Window:
    """The metric's reference window, of its own configuration class: the runs before its
    open incident's drop, else the recent successful runs (since the baseline or the last ack,
    when there is one). `prior` (`series`): where the current regime began (the last change
    point), so the range rule counts only runs of that regime."""
    name, cls = s.metric.name, s.metric.config
    inc = open_incident(store, s)
    if inc is not None:
        rows = store.metric_history(s.playbook, s.host, name, before_run=inc["ref_before_run"], since_run=since,
                                    limit=cfg.window, exclude_incident_runs=True, config=cls)
        values = [r["value"] for r in rows]
        if len(values) < cfg.min_history and inc["reference"] is not None:
            # the runs before the drop were pruned: the incident kept the reference it needs
            return Window([float(inc["reference"])] * cfg.min_history,
                          f"the reference incident #{inc['id']} recorded (its earlier runs were pruned)", inc)
        return Window(values, window_what(len(rows), since, None, inc), inc)
    need = cfg.confirm_runs - 1
    rows = store.metric_history(s.playbook, s.host, name, before_run=s.run_id, since_run=since,
                                limit=max(window_limit(since, cfg), RANGE_RUNS) + need, exclude_incident_runs=True,
                                config=cls)
    base = store.baseline(s.playbook, s.host)
    start = regime_start(prior, cfg) if prior is not None else None
    recent = tuple((int(r["run_id"]), float(r["value"])) for r in rows[:need])
    older = list(reversed(rows[need:]))
    first = 0 if start is None else next((i for i, r in enumerate(older) if r["run_id"] >= start), len(older))
    longer = tuple(float(r["value"]) for r in rows[:RANGE_RUNS] if start is None or r["run_id"] >= start)
    rows = rows[:window_limit(since, cfg)]
    return Window([r["value"] for r in rows], window_what(len(rows), since, base["run_id"] if base else None, None),
                  recent=recent, before_recent=tuple(float(r["value"]) for r in older), longer=longer,
                  regime_start=first)


def regime_start(prior: list[tuple[int, float]], cfg: RegressionConfig) -> int | None:
    """The run where the current regime of a series began: its last change point of more than
    min_pct; None when it has none (or too few runs to look)."""
    if len(prior) < CP_MIN_RUNS:
        return None
    from eaglebot.history.changepoint import change_points  # numpy: loaded when a run is judged

    cps = [c for c in change_points([v for _, v in prior]) if abs(c.delta_pct) > cfg.min_pct]
    return prior[cps[-1].index][0] if cps else None


def worse_drift(store: HistoryStore, s: Subject, since: int | None, cfg: RegressionConfig,
                prior: list[tuple[int, float]] | None = None) -> Drift | None:
    """The change point the newest value sits after, when it made the metric worse by more
    than min_pct, with what changed at the run where it began (`prior`: `series`)."""
    p = worse_shift_point(series(store, s, since) if prior is None else prior, s.run_id, float(s.metric.value),
                          s.metric.better, cfg)
    if p is None:
        return None
    changes = state_changes(host_state(store, s.host, p.prev_run), host_state(store, s.host, p.cp_run), p.cp_run)
    return drift(s.metric.name, p, changes)


def attribution(store: HistoryStore, playbook: str, host: str, run_id: int, now: dict[str, Any],
                drop_start: int | None = None) -> str:
    """What changed on host since the last good run of playbook (the "changed since" clause);
    `drop_start`: the first run of a confirmed drop (the good run is the one before it)."""
    good = store.previous_good_run(playbook, host, drop_start or run_id)
    if good is None:
        return attribution_text(None, [], host)
    gid = int(good["id"])
    return since_good_run(host, run_id, gid, host_state(store, host, gid), now,
                          store.host_changes(host, gid, run_id), store.host_steps(host, gid, run_id))


def diff_rows(store: HistoryStore, a_id: int, b_id: int, home: str = "") -> DiffRows:
    """What `eagle diff A B` compares (`diff.compare`); UsageError when a run is missing.
    `home`: files under this folder are named `~/...`."""
    ra, ha, rb, hb = pick_hosts(a_id, store.get_run(a_id), b_id, store.get_run(b_id))
    return DiffRows(ra, rb, ha, hb, host_state(store, ha, a_id), host_state(store, hb, b_id),
                    store.metrics(a_id), store.metrics(b_id), home)
