"""The drain skills move the health watch's state: after a run, a host that `node.drain` took
out of its scheduler is `draining` (Slurm: jobs still running) or `drained`, and one that
`node.resume` put back is `resuming` until the watch's clean probes make it healthy (at once
when no watch is configured). Each is a transition with the run as its reason and the run's
actor, like every other (store: health_events). `auto_drain` drains a host the watch just
quarantined when `health_watch.auto_drain` says so; `auto_resume` resumes a drain the watch made
itself once its GPUs read clean, and nobody else's.

Whose a drain is: a `node.drain` that drained or cordoned the node (`made`) is its run's actor's
(`health-watch` for an automatic one); one that found the node drained already is the
scheduler's (`slurm`, `kubernetes`: a person made it), and so is one a person took over since (a
`node.resume` with `only_if_reason` found another reason: `left`)."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from eaglebot.sdk import Regression

if TYPE_CHECKING:
    from eaglebot.engine.health_watch import HostReport
    from eaglebot.engine.records import RunOutcome
    from eaglebot.engine.runner import Engine

_FROM = {"node.drain": ("suspect", "quarantined", "draining"), "node.resume": ("quarantined", "draining", "drained")}


async def fleet_hook(engine: "Engine", outcome: "RunOutcome", playbook: object) -> list[Regression]:
    """Post-run hook (the engine's signature; it flags no regression)."""
    done = [s for s in outcome.steps if s.skill in _FROM and s.status in ("ok", "changed") and s.step_id]
    if outcome.dry_run or not done:
        return []
    from eaglebot.engine.fleet_health import HOST   # (here: a run without drain steps does not load the watch)

    store = engine.store
    run = await store.call(lambda s: s.get_run(outcome.run_id))
    actor = (run["actor"] if run else None) or "?"
    rows = {r["id"]: r for r in await store.call(lambda s: s.steps(outcome.run_id))}
    for s in done:
        row = rows.get(s.step_id or -1)
        data = json.loads(row["data"] or "{}") if row else {}
        reason = f"{s.skill} in run #{outcome.run_id}: {s.summary}"
        mine = [r["gpu"] for r in await store.call(lambda st: st.health_states(s.host)) if r["state"] in _FROM[s.skill]]
        if s.skill == "node.resume" and data.get("left"):
            for gpu in mine:      # a person's drain now: the watch never resumes it
                who = str(data.get("scheduler") or "scheduler")
                await store.call(lambda st: st.health_note(s.host, gpu, reason, who, kind="takeover"))
            continue
        by = actor
        if s.skill == "node.drain":
            to = "draining" if data.get("state") == "draining" else "drained"
            if data.get("made") is False:
                by = str(data.get("scheduler") or "scheduler")
                reason += " (drained before eaglebot asked: not the watch's to resume)"
        else:
            to = "resuming" if engine.settings.health_watch is not None else "healthy"
        if not mine and s.skill == "node.drain":
            mine = [HOST]     # drained by hand while healthy: held all the same until resumed
        for gpu in mine:
            await store.call(lambda st: st.health_transition(s.host, gpu, to, reason, by))
    return []


async def auto_drain(engine: "Engine", report: "HostReport") -> int | None:
    """`health_watch.auto_drain`: a host the watch just quarantined is drained at once, the
    setting being the approval (the drain's circuit breaker still applies). The run's id, or
    None (nothing quarantined, or refused: the refusal is an audited event)."""
    from eaglebot.engine.fleet_health import ACTOR
    from eaglebot.engine.records import RunRequest
    from eaglebot.errors import UsageError

    cfg = engine.settings.health_watch
    new = [t for t in report.transitions if t[2] == "quarantined"]
    if cfg is None or not cfg.auto_drain or not new:
        return None
    reason = "; ".join(t[3] for t in new)[:150]
    req = RunRequest("drain", [report.host], {"reason": reason}, actor=ACTOR, origin="watch", assume_yes=True)
    try:
        out = await engine.run(req)
    except UsageError:
        return None
    return out.run_id


async def auto_resume(engine: "Engine", report: "HostReport") -> int | None:
    """The watch's auto-clear of a drain it made itself: its GPUs read clean for `clear_after`
    probes, so the host goes back into its scheduler, but only while the drain still carries the
    reason the watch wrote (node.resume `only_if_reason`): a drain a person made or took over is
    left, and says so. The run's id, or None."""
    from eaglebot.engine.fleet_health import ACTOR
    from eaglebot.engine.records import RunRequest
    from eaglebot.errors import UsageError

    if not report.resume:
        return None
    # the newest drain
    data = await engine.store.call(lambda s: s.last_step_data(report.host, "node.drain", "scheduler"))
    if not data or data.get("made") is not True or not data.get("reason"):
        return None
    req = RunRequest("resume", [report.host], {"only_if_reason": str(data["reason"])}, actor=ACTOR, origin="watch",
                     assume_yes=True)
    try:
        out = await engine.run(req)
    except UsageError:
        return None
    return out.run_id


async def watch_actions(engine: "Engine", report: "HostReport") -> None:
    """What the watch does after a probe besides alerting: drain what it quarantined
    (`auto_drain`), resume the drains it made once clean."""
    cfg = engine.settings.health_watch
    if cfg is not None and cfg.auto_drain:
        await auto_drain(engine, report)
    await auto_resume(engine, report)
