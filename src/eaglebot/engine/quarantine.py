"""A quarantined host (the health watch) refuses relaunch, bench and scheduled runs.

A request that names one is refused as a usage error (exit 2) with the reason, unless it says
`force` (an approver's call: the front ends check who may), which is recorded as an event. A
scheduled run skips the held hosts and says so; it is refused only when no host is left.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import replace

from eaglebot.engine.records import Prepared, RunRequest
from eaglebot.errors import HostQuarantined
from eaglebot.store.rows import HealthStateRow

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import EngineStore

# The shipped playbooks that must not run on a sick GPU (their numbers would mislead).
GUARDED = ("relaunch", "bench")
DRAIN = "drain"


def _why(host: str, row: HealthStateRow) -> str:
    what = "the host" if row["gpu"] < 0 else f"GPU {row['gpu']}"
    return f"{host} is {row['state']} since {row['since']} ({what}: {row['reason'] or 'no reason recorded'})"


async def drain_breaker(store: Door[EngineStore], prep: Prepared, limit: int) -> None:
    """The circuit breaker on drains, automatic or approved: no more than `limit` watched hosts
    draining or drained at once."""
    states = await store.call(lambda s: s.health_states())
    drained = {r["host"] for r in states if r["state"] in ("draining", "drained")}
    new = [h for h in prep.hosts if h not in drained]
    if new and len(drained) + len(new) > limit:
        raise HostQuarantined(f"circuit breaker: {len(drained)} host{'s are' if len(drained) != 1 else ' is'} "
                              f"draining or drained already and at most {limit} may be "
                              f"(health_watch.max_quarantined_pct); drain of {', '.join(new)} refused")


async def health_guard(store: Door[EngineStore], req: RunRequest, prep: Prepared,
                       drain_limit: int | None = None) -> Prepared:
    """The request's hosts less the held ones (schedules), or HostQuarantined naming why.
    `drain_limit`: with a health watch, how many hosts may be draining or drained at once."""
    if prep.playbook.name == DRAIN and drain_limit is not None and not req.dry_run:
        await drain_breaker(store, prep, drain_limit)
    if req.dry_run or (prep.playbook.name not in GUARDED and req.origin != "schedule"):
        return prep
    held = await store.call(lambda s: {h: row for h in prep.hosts if (row := s.health_held(h)) is not None})
    if not held:
        return prep
    if req.force:
        for h, row in held.items():
            forced = f"{req.actor} ran {prep.playbook.name} with --force: {_why(h, row)}"
            await store.call(lambda s: s.add_event(None, "forced", forced))
        return prep
    if req.origin == "schedule":
        left = [h for h in prep.hosts if h not in held]
        for h, row in held.items():
            skipped = f"schedule {req.schedule or '?'} skipped {_why(h, row)}"
            await store.call(lambda s: s.add_event(None, "quarantine_skip", skipped))
        if left:
            return replace(prep, hosts=left)
    first = next(iter(held))
    raise HostQuarantined(f"{_why(first, held[first])}; {prep.playbook.name} refused (an approver may pass --force)")
