"""The configured schedules as `/eagle schedule` and `eagle schedule list` show them: one row
each with its next fire time, last run, pause and the missing-run alarm (`schedule_alarm.py`).

Below `eagle serve`'s runtime (`service/`) because the chat front end shows it too, and a
front end may not reach up into the service.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping, TYPE_CHECKING

from eaglebot.config import Settings
from eaglebot.engine.schedules import check_schedules
from eaglebot.frontends.cron import iso_utc, next_fire, trigger_for
from eaglebot.frontends.format import fmt_time
from eaglebot.frontends.schedule_alarm import overdue, reference, since

if TYPE_CHECKING:
    from eaglebot.store.protocol import ScheduleReads

def schedule_rows(settings: Settings, store_sync: ScheduleReads, now: datetime | None = None) -> list[dict[str, Any]]:
    """One dict per configured schedule: name, playbook, hosts, cron, timezone, next_fire
    (ISO 8601 UTC or None), last_run_id, last_status, paused, errors, overdue (the missing-run
    alarm: {due, why}, or None)."""
    now = now or datetime.now(timezone.utc)
    rows = []
    states = store_sync.schedule_states()
    problems: dict[str, list[str]] = {}
    for p in check_schedules(settings):
        problems.setdefault(p.name, []).append(str(p))
    for cfg in settings.schedules:
        trig = trigger_for(cfg)
        last = store_sync.last_schedule_run(cfg.name)
        state: Mapping[str, Any] = states.get(cfg.name) or {}
        first = store_sync.schedule_fires(cfg.name, "", 1) if last is None else []
        ref = reference(last, first[0] if first else None)
        due = next_fire(trig, ref) if ref else None
        late = overdue(trig, cfg.misfire_grace_s, ref, last,
                       store_sync.schedule_fires(cfg.name, since(due), 1000) if due else [], now,
                       state.get("changed_by") if state.get("paused") else None)
        rows.append({
            "name": cfg.name, "playbook": cfg.playbook, "hosts": list(cfg.hosts), "cron": cfg.cron,
            "every": cfg.every, "timezone": cfg.timezone, "next_fire": iso_utc(next_fire(trig, now)),
            "last_run_id": last["id"] if last else None, "last_status": last["status"] if last else None,
            "paused": bool(state.get("paused")), "paused_by": state.get("changed_by") if state.get("paused") else None,
            "errors": problems.get(cfg.name, []),
            "overdue": {"due": iso_utc(late.due), "why": late.why} if late else None,
        })
    return rows


def schedule_state(row: dict[str, Any]) -> str:
    if row.get("errors"):
        return "INVALID"
    if row.get("overdue"):
        return f"OVERDUE since {fmt_time(row['overdue']['due'])}: {row['overdue']['why']}"
    return f"paused by {row.get('paused_by') or '?'}" if row.get("paused") else "active"
