"""Cron as a crontab writes it (or a fixed interval, `every: 5m`), in APScheduler 3's terms,
and the fire-time arithmetic the scheduler and `eagle schedule list` share. Pure: no store,
no event loop.

APScheduler 3 differs from crontab in two ways that would fire jobs on the wrong days: it
counts day-of-week 0 as Monday, and it ANDs a restricted day-of-month with a restricted
day-of-week where cron ORs them. `trigger_for` translates the first and refuses the second.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import overload
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from eaglebot.config import ScheduleConfig
from eaglebot.errors import UsageError


# Interval fires are counted from the epoch, not from each process's start: every replica (and
# the leader that takes over) computes the same fire times, so a fire is claimed once.
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class AlignedInterval(IntervalTrigger):  # type: ignore[misc]  # APScheduler 3 is untyped
    """An interval whose fires stay on the epoch's grid: APScheduler's IntervalTrigger adds the
    interval to the previous fire, so a fire moved to "now" (a new leader's catch-up of a
    missed fire) would shift every later one off the grid, late for its slot and apart from
    what the other replicas compute."""

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        nxt: datetime | None = super().get_next_fire_time(None, now)
        if nxt is not None and previous_fire_time is not None and nxt <= previous_fire_time:
            nxt = super().get_next_fire_time(None, previous_fire_time + timedelta(microseconds=1))
        return nxt


def trigger_for(cfg: ScheduleConfig) -> BaseTrigger:
    try:
        tz = ZoneInfo(cfg.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(f"schedule {cfg.name!r}: unknown timezone {cfg.timezone!r} "
                         f"(use an IANA name such as UTC or Europe/Berlin)") from None
    if cfg.every is not None:
        return AlignedInterval(seconds=cfg.every_s, start_date=EPOCH, timezone=timezone.utc)
    try:
        fields = (cfg.cron or "").split()
        if len(fields) != 5:
            raise ValueError(f"wrong number of fields; got {len(fields)}")
        minute, hour, day, month, dow = fields
        if day != "*" and dow != "*":
            raise ValueError("restrict day-of-month or day-of-week, not both (cron ORs them, "
                             "APScheduler 3 would AND them)")
        return CronTrigger(minute=minute, hour=hour, day=day, month=month, day_of_week=crontab_dow(dow),
                           timezone=tz)
    except ValueError as e:
        raise UsageError(f"schedule {cfg.name!r}: invalid cron {cfg.cron!r} ({e}); "
                         f"expected 5 fields: minute hour day month day-of-week") from None


_DOW_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


def crontab_dow(field: str) -> str:
    """A crontab day-of-week field (0 or 7 = Sunday) in APScheduler 3's terms.

    APScheduler 3 counts 0 = Monday, even in `CronTrigger.from_crontab`, so "0 3 * * 1"
    would fire on Tuesdays. Numbers, ranges and steps become explicit day names.
    """
    if not any(ch.isdigit() for ch in field.replace("*/", "")) and "/" not in field:
        return field
    days: set[int] = set()
    for part in field.split(","):
        rng, _, step_s = part.partition("/")
        step = int(step_s) if step_s else 1
        if step < 1:
            raise ValueError(f"bad step in day-of-week {field!r}")
        if rng == "*":
            lo, hi = 0, 6
        else:
            a, _, b = rng.partition("-")
            lo = _dow_num(a)
            hi = _dow_num(b) if b else (lo if not step_s else 6)
            if b and b.strip() == "7":
                hi = 7
        if lo > hi:
            raise ValueError(f"bad range in day-of-week {field!r}")
        days.update(d % 7 for d in range(lo, hi + 1, step))
    return ",".join(_DOW_NAMES[d] for d in sorted(days))


def _dow_num(s: str) -> int:
    s = s.strip().lower()
    if s.isdigit() and 0 <= int(s) <= 7:
        return int(s)
    if s[:3] in _DOW_NAMES:
        return _DOW_NAMES.index(s[:3])
    raise ValueError(f"bad day of week {s!r}")


def when(cron: str | None, every: str | None, tz: str) -> str:
    """How a schedule says when it fires: `every 5m`, or its cron and timezone."""
    return f"every {every}" if every is not None else f"{cron} ({tz})"


def next_fire(trigger: BaseTrigger, after: datetime) -> datetime | None:
    """The first fire time strictly after `after`."""
    nxt: datetime | None = trigger.get_next_fire_time(None, after + timedelta(microseconds=1))
    return nxt


def fires_between(trigger: BaseTrigger, start: datetime, end: datetime, cap: int = 1000) -> list[datetime]:
    """Fire times t with start < t <= end (at most cap of them, the newest kept)."""
    out: list[datetime] = []
    t = next_fire(trigger, start)
    while t is not None and t <= end:
        out.append(t)
        if len(out) > cap:
            out.pop(0)
        t = next_fire(trigger, t)
    return out


def slot_at(trigger: BaseTrigger, now: datetime, lookback_s: float) -> datetime:
    """The fire a job running at `now` is for: the latest fire time at or before `now` (within
    `lookback_s`, the schedule's grace: APScheduler runs nothing later), else `now`."""
    fires = fires_between(trigger, now - timedelta(seconds=lookback_s + 1), now, cap=1)
    return fires[-1] if fires else now


@overload
def iso_utc(d: datetime) -> str: ...
@overload
def iso_utc(d: None) -> None: ...
@overload
def iso_utc(d: datetime | None) -> str | None: ...


def iso_utc(d: datetime | None) -> str | None:
    if d is None:
        return None
    return d.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def fmt_utc(d: datetime) -> str:
    return d.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
