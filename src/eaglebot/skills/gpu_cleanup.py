"""Stop the processes that hold the GPUs: SIGTERM, wait `grace_s`, SIGKILL survivors, check they are gone.

Only PIDs named by nvidia-smi (or by `fuser -v /dev/nvidia*` when nvidia-smi sees none,
as in a container) are signalled, never a process name; each signal re-checks the
PID's start time because PIDs are reused. Processes in a session the bot launched
(its pid files) are its own; killing any other process needs approval when the step
has `confirm: true` (denied: nothing is killed). GPU daemons (nvidia-persistenced,
DCGM, Xorg, ...) are never touched. Zombies count as gone. Dry-run lists what would
be killed and kills nothing.

```yaml
- skill: gpu.cleanup
  confirm: true
  with: {grace_s: 10, gpus: "0,1", match: "sglang|python", user: ops}
```
Registers `killed` (pids gone), `survivors`, `processes` (pid, user, gpus, mib, command,
signals, ours) and `memory` (MiB per GPU before the cleanup).
"""
from __future__ import annotations

import re
from typing import Any, Awaitable, Callable

from pydantic import Field, field_validator

from eaglebot.errors import StepFailed
from eaglebot.sdk import Approval, Plan, SkillContext, StepResult
from eaglebot.facts.gpu import nvsmi
from eaglebot.skills.lib import cleanup, gpu, processes

NAME = "gpu.cleanup"


class Params(gpu.GpuParams):
    grace_s: float = Field(10.0, ge=0, le=600, description="seconds between SIGTERM and SIGKILL")
    match: str | None = Field(None, description="only processes whose command line matches this regular expression")
    user: str | None = Field(None, description="only processes of this user")
    approved: list[str] = Field(default_factory=list, description=(
        "processes an approval earlier in the run already covers (server.plan's `approved`: pid:starttime): "
        "stopped without asking again; a process not in it is asked about as usual"))

    @field_validator("match")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"not a regular expression: {e}") from None
        return v


async def run(ctx: SkillContext, params: Params) -> StepResult:
    try:
        snap = await gpu.snapshot(ctx, params)
    except nvsmi.NvsmiError as e:
        # A dry run shows the whole plan even where the GPUs cannot be listed (a bot host); a real one fails.
        return await ctx.carry_out(Plan(
            [f"stop the GPU processes nvidia-smi lists (SIGTERM, SIGKILL after {params.grace_s:g}s)"],
            f"cannot list GPU processes now: {e}", _raise(e), warnings=[str(e)]))
    for note in snap.notes:
        ctx.log(note)
    sessions = await processes.our_sessions(ctx) if cleanup.cleanup_targets(snap, params) else set()
    plan = cleanup.plan_cleanup(snap, params, sessions)
    targets, ours, foreign = plan.targets, plan.ours, plan.foreign
    data: dict[str, Any] = {"killed": [], "survivors": [], "processes": [], "memory": dict(snap.used),
                  "unexplained": dict(snap.unexplained)}
    warnings = [n for n in snap.notes if "neither" in n or "not visible" in n]
    warnings += [f"left GPU daemon pid {h.pid} ({h.proc.comm}) alone" for h in plan.protected]
    if not targets:
        return StepResult.ok(plan.nothing_to_do, data=data, warnings=warnings, output="".join(n + "\n" for n in snap.notes))

    ctx.log(gpu.table(targets))
    planned = [f"{plan.why(h)} {h.line()}" for h in targets]
    data["processes"] = [dict(h.as_dict(), ours=h.pid in ours, signals=[]) for h in targets]
    approval = None
    covered = [h for h in foreign if processes.approval_key(h.proc) in params.approved]
    if covered:
        ctx.log(f"approved earlier in this run: {', '.join(str(h.pid) for h in covered)}")
    new = [h for h in foreign if h not in covered]
    if new:
        n = len(new)
        again = " (not in the set approved earlier in this run)" if params.approved else ""
        approval = Approval(
            f"kill {n} GPU process{'es' if n != 1 else ''} the bot did not start on {ctx.host_name} "
            f"(SIGTERM, then SIGKILL after {params.grace_s:g}s){again}", [h.line() for h in new],
            refused=lambda who: StepFailed(
                f"not approved ({who}): nothing was killed; {n} process{'es' if n != 1 else ''} "
                f"the bot did not start hold the GPUs{again}: {', '.join(f'{h.pid} ({h.user})' for h in new)}",
                data=data, output="\n".join(planned) + "\n", warnings=warnings),
            log=True)
    return await ctx.carry_out(Plan(
        [f"stop {line}" for line in planned],
        f"would stop {len(targets)} GPU process{'es' if len(targets) != 1 else ''} "
        f"({len(foreign)} not started by the bot): {', '.join(str(h.pid) for h in targets)}",
        lambda: _stop(ctx, params, plan, snap, data, warnings), approve=approval,
        data=data, output="\n".join(planned) + "\n", warnings=warnings))


def _raise(e: Exception) -> Callable[[], Awaitable[StepResult]]:
    async def fail() -> StepResult:
        raise e
    return fail


async def _stop(ctx: SkillContext, params: Params, plan: cleanup.CleanupPlan, snap: gpu.Snapshot,
                data: dict[str, Any], warnings: list[str]) -> StepResult:
    targets, ours = plan.targets, plan.ours
    reports = await processes.terminate(ctx, [h.proc for h in targets], params.grace_s)
    by_pid = {r.pid: r for r in reports}
    lines = []
    for h, d in zip(targets, data["processes"]):
        r = by_pid[h.pid]
        d["signals"] = list(r.signals)
        d["gone"] = r.gone
        gpus = ",".join(map(str, h.gpus))
        mib = "?" if h.mib is None else h.mib
        lines.append(f"{r.line()} [GPU {gpus}, {mib} MiB, {'ours' if h.pid in ours else 'foreign'}]")
    for line in lines:
        ctx.log(line)
    data["killed"] = [r.pid for r in reports if r.gone]
    data["survivors"] = [r.pid for r in reports if not r.gone]
    out = "\n".join(lines) + "\n" + "".join(n + "\n" for n in snap.notes)
    if data["survivors"]:
        bad = [by_pid[p] for p in data["survivors"]]
        raise StepFailed(
            f"{len(bad)} GPU process{'es' if len(bad) != 1 else ''} still running after "
            f"{'+'.join(bad[0].signals) or 'no signal'}: "
            + "; ".join(f"pid {r.pid} ({r.user}) {r.cmdline[:80]}{' - ' + r.note if r.note else ''}" for r in bad),
            data=data, output=out, warnings=warnings)
    killed = [by_pid[h.pid] for h in targets]
    desc = "; ".join(f"{r.pid} ({r.user}, {'+'.join(r.signals) or 'already gone'}) {r.cmdline[:60]}"
                     for r in killed[:4])
    more = f"; and {len(killed) - 4} more" if len(killed) > 4 else ""
    n = len(killed)
    return StepResult.changed(f"stopped {n} GPU process{'es' if n != 1 else ''}: {desc}{more}",
                              data=data, output=out, warnings=warnings)
