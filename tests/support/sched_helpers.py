"""Driving a `Scheduler` from tests through APScheduler's own API: the product has no "fire
now" (a schedule fires at its cron time) and tells nobody when a job is done, but a test
cannot wait for 03:00 and must know when to look."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from eaglebot.frontends.service.scheduler import ALARM_JOB, ANCHOR_JOB, Scheduler


def fire_now(sched: Scheduler, name: str) -> None:
    """Make APScheduler run the schedule's job at once, as if its cron time had come."""
    assert sched._sched is not None, "start() the scheduler first"
    sched._sched.modify_job(name, next_run_time=datetime.now(timezone.utc))


def scheduled(sched: Scheduler) -> list[str]:
    """The schedules APScheduler holds a job for (the daily audit anchor and the alarm check left out)."""
    assert sched._sched is not None, "start() the scheduler first"
    return [j.id for j in sched._sched.get_jobs() if j.id not in (ANCHOR_JOB, ALARM_JOB)]


def finished_jobs(sched: Scheduler) -> asyncio.Queue[tuple[str, int | None]]:
    """Call before `start()`: a queue that gets (schedule name, run id or None) after each job."""
    done: asyncio.Queue[tuple[str, int | None]] = asyncio.Queue()
    job = sched._job

    async def watched(name: str) -> int | None:
        run_id = None
        try:
            run_id = await job(name)
            return run_id
        finally:
            done.put_nowait((name, run_id))

    sched._job = watched  # type: ignore[method-assign]   # start() hands self._job to APScheduler
    return done
