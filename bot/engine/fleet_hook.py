"""The drain skills move the health watch's state: after a run, a host that `node.drain` took
out of its scheduler is `draining` (Slurm: jobs still running) or `drained`, and one that
`node.resume` put back is `resuming` until the watch's clean probes make it healthy (at once
when no watch is configured). Each is a transition with the run as its reason and the run's
actor, like every other (store: health_events)."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from eaglebot.engine.fleet_health import HOST
from eaglebot.sdk import Regression

if TYPE_CHECKING:
    from eaglebot.engine.records import RunOutcome
    from eaglebot.engine.runner import Engine

_FROM = {"node.drain": ("suspect", "quarantined", "draining"), "node.resume": ("quarantined", "draining", "drained")}


async def fleet_hook(engine: "Engine", outcome: "RunOutcome", playbook: object) -> list[Regression]:
    """Post-run hook (the engine's signature; it flags no regression)."""
    done = [s for s in outcome.steps if s.skill in _FROM and s.status in ("ok", "changed") and s.step_id]
    if outcome.dry_run or not done:
        return []
    store = engine.store
    run = await store.get_run(outcome.run_id)
    actor = (run["actor"] if run else None) or "?"
    rows = {r["id"]: r for r in await store.steps(outcome.run_id)}
    for s in done:
        row = rows.get(s.step_id or -1)
        data = json.loads(row["data"] or "{}") if row else {}
        if s.skill == "node.drain":
            to = "draining" if data.get("state") == "draining" else "drained"
        else:
            to = "resuming" if engine.settings.health_watch is not None else "healthy"
        mine = [r["gpu"] for r in await store.health_states(s.host) if r["state"] in _FROM[s.skill]]
        if not mine and s.skill == "node.drain":
            mine = [HOST]     # drained by hand while healthy: held all the same until resumed
        for gpu in mine:
            await store.health_transition(s.host, gpu, to, f"{s.skill} in run #{outcome.run_id}: {s.summary}", actor)
    return []
