"""Driving a started `Scheduler` from tests through APScheduler's own API: the product has no
"fire now" (a schedule fires at its cron time), but a test cannot wait for 03:00."""
from __future__ import annotations

from datetime import datetime, timezone

from eaglebot.frontends.scheduler import ANCHOR_JOB, Scheduler


def fire_now(sched: Scheduler, name: str) -> None:
    """Make APScheduler run the schedule's job at once, as if its cron time had come."""
    assert sched._sched is not None, "start() the scheduler first"
    sched._sched.modify_job(name, next_run_time=datetime.now(timezone.utc))


def scheduled(sched: Scheduler) -> list[str]:
    """The schedules APScheduler holds a job for (the daily audit anchor left out)."""
    assert sched._sched is not None, "start() the scheduler first"
    return [j.id for j in sched._sched.get_jobs() if j.id != ANCHOR_JOB]
