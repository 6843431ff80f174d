"""The missing-run alarm: a schedule that has not started a run by its next fire time plus
`misfire_grace_s` (the bot was down, someone paused it, every host was quarantined, its
hosts were busy) is named once in its channel, with its last run and why the next did not
start; `eagle schedule list` shows it as OVERDUE (as PyTorch's HUD warns about a job that
stopped reporting).

Pure over the audit rows: the schedule's last run and its fire records since the fire that
should have started a run. The startup misfire report (scheduler.check_misfires, fires
`missed`) already is the alarm for a bot that was down, so it is not posted twice; an alarm
posted is recorded as a fire of status `alarm` at the due time.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

from apscheduler.triggers.base import BaseTrigger

from eaglebot.frontends.cron import fmt_utc, iso_utc, next_fire
from eaglebot.store import parse_iso
from eaglebot.store.rows import RunRow, ScheduleFireRow

ALARM_CHECK_S = 60.0
ALARM = "alarm"

_WHY = {
    "paused": "the schedule is paused",
    "quarantined": "every host of it is quarantined by the health watch",
    "busy": "its hosts were busy with another run",
    "error": "it could not start (the channel has the reason it gave then)",
    "missed": "the bot was not running at its fire time",
}


@dataclass(frozen=True)
class Overdue:
    due: datetime               # the fire that should have started a run
    why: str
    last: str                   # "run #12 (succeeded) at 2026-..." or "it never ran"
    posted: bool                # already said (an alarm, or the misfire report at start)


def since(due: datetime) -> str:
    """`due` as the store's fire times compare: milliseconds, so a fire recorded at 03:00:00.123Z
    (the job's own record) and one at 03:00:00Z (a missed fire, an alarm) both sort after it."""
    return iso_utc(due).replace("Z", ".000Z")


def reference(last_run: RunRow | None, first_fire: ScheduleFireRow | None) -> datetime | None:
    """Since when a run is expected: the last run's start, else when the schedule was first seen."""
    if last_run is not None:
        return parse_iso(last_run["started_at"])
    return parse_iso(first_fire["fire_time"]) if first_fire else None


def overdue(trigger: BaseTrigger, grace_s: int, ref: datetime | None, last_run: RunRow | None,
            fires: Sequence[ScheduleFireRow], now: datetime, paused_by: str | None = None) -> Overdue | None:
    """The schedule's overdue fire, or None while it is on time. `fires`: its records since `due`."""
    due = next_fire(trigger, ref) if ref is not None else None
    if due is None or now <= due + timedelta(seconds=grace_s):
        return None
    mark = iso_utc(due)
    posted = any(f["status"] == "missed" or (f["status"] == ALARM and f["fire_time"] == mark) for f in fires)
    said = [f["status"] for f in fires if f["status"] != ALARM]
    why = next((_WHY[s] for s in reversed(said) if s in _WHY), None)
    if paused_by is not None:
        why = f"the schedule is paused (by {paused_by})"
    elif why is None:
        why = ("the bot was not running at its fire time" if not said
               else f"its last fire ended as {said[-1]!r} without a run")
    if last_run is not None:
        started = parse_iso(last_run["started_at"])
        last = f"run #{last_run['id']} ({last_run['status']}) at {fmt_utc(started) if started else '?'}"
    else:
        last = "it never ran"
    return Overdue(due, why, last, posted)


def alarm_text(name: str, described: str, o: Overdue) -> str:
    return (f":rotating_light: schedule {name} ({described}) has not run since {o.last}: the run due at "
            f"{fmt_utc(o.due)} did not start ({o.why}).")
