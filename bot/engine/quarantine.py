"""A quarantined host (the health watch) refuses relaunch, bench and scheduled runs.

A request that names one is refused as a usage error (exit 2) with the reason, unless it says
`force` (an approver's call: the front ends check who may), which is recorded as an event. A
scheduled run skips the held hosts and says so; it is refused only when no host is left.
"""
from __future__ import annotations

from dataclasses import replace

from eaglebot.engine.records import Prepared, RunRequest
from eaglebot.errors import HostQuarantined
from eaglebot.store.protocol_async import AsyncStoreProtocol
from eaglebot.store.rows import HealthStateRow

# The shipped playbooks that must not run on a sick GPU (their numbers would mislead).
GUARDED = ("relaunch", "bench")


def _why(host: str, row: HealthStateRow) -> str:
    what = "the host" if row["gpu"] < 0 else f"GPU {row['gpu']}"
    return f"{host} is {row['state']} since {row['since']} ({what}: {row['reason'] or 'no reason recorded'})"


async def health_guard(store: AsyncStoreProtocol, req: RunRequest, prep: Prepared) -> Prepared:
    """The request's hosts less the held ones (schedules), or HostQuarantined naming why."""
    if req.dry_run or (prep.playbook.name not in GUARDED and req.origin != "schedule"):
        return prep
    held = {h: row for h in prep.hosts if (row := await store.health_held(h)) is not None}
    if not held:
        return prep
    if req.force:
        for h, row in held.items():
            await store.add_event(None, "forced", f"{req.actor} ran {prep.playbook.name} with --force: {_why(h, row)}")
        return prep
    if req.origin == "schedule":
        left = [h for h in prep.hosts if h not in held]
        for h, row in held.items():
            await store.add_event(None, "quarantine_skip", f"schedule {req.schedule or '?'} skipped {_why(h, row)}")
        if left:
            return replace(prep, hosts=left)
    first = next(iter(held))
    raise HostQuarantined(f"{_why(first, held[first])}; {prep.playbook.name} refused (an approver may pass --force)")
