"""Plan a relaunch before anything changes, and ask once: what happens to the running server,
and which GPU processes the bot did not start the cleanup would kill.

Read-only probes only: the server on `port` (the bot's pid file and the port's listener: pid and
uptime), and the GPU holders `gpu.cleanup` would stop (the same decision, `gpus` and filters
alike). When a holder is not the bot's own (its session is not one the bot launched), ONE
approval covers the whole relaunch: the card says `the server on port 30000 (pid 898, up 3 d)
will be stopped` and lists each foreign PID. Denied or unanswered, the step fails and nothing was
touched: the server keeps serving. Approved, the foreign PIDs (with their start times, so a reused
PID is not covered) are registered as `approved`, and server.stop and gpu.cleanup act on them
without asking again; a holder that appears only later is not in the set and is asked about then.
Nothing to approve: the step says what will happen and asks nobody.

```yaml
- name: plan the relaunch
  skill: server.plan
  register: plan
  confirm: true
  with: {port: "{{ port }}", gpus: "{{ gpus | default(none) }}", grace_s: 10}
```
Registers `approved` ("pid:starttime" of the foreign holders approved), `server` (pid, up_s, ours;
or null), `foreign` (the holders' lines), `asked` (whether an approval was asked) and `by`.
"""
from __future__ import annotations

from typing import Any

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import Approval, Plan, SkillContext, StepResult

from eaglebot.facts.gpu import nvsmi
from eaglebot.facts.host import ports
from eaglebot.skills.lib import cleanup, gpu, processes, server

NAME = "server.plan"
READ_ONLY = True   # it only probes; what it decides, the steps after it carry out


class Params(gpu.GpuParams):
    port: int = Field(30000, ge=1, le=65535, description="the server's port")
    grace_s: float = Field(10.0, ge=0, le=600, description="seconds between SIGTERM and SIGKILL (said on the card)")
    action: str = Field("relaunch", description="what the run does, for the card (relaunch, rollback)")
    match: str | None = Field(None, description="gpu.cleanup's `match`: only holders whose command matches")
    user: str | None = Field(None, description="gpu.cleanup's `user`: only holders of this user")


def age(seconds: int | None) -> str:
    """3 d, 5 h, 12 min, 40 s: the server's uptime as the card says it."""
    if seconds is None:
        return "up for an unknown time"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"up {seconds // size} {unit}"
    return f"up {seconds} s"


async def _uptime(ctx: SkillContext, pid: int) -> int | None:
    res = await ctx.host.run(f"ps -o etimes= -p {int(pid)} 2>/dev/null; true", timeout=30)
    word = res.stdout.strip()
    return int(word) if word.isdigit() else None


async def running_server(ctx: SkillContext, port: int) -> dict[str, Any] | None:
    """The server on port: the bot's own (its pid file's session leader, alive) or whatever listens
    there; pid, uptime and whether the bot launched it. None: nothing runs there."""
    leader = await server.read_pid(ctx, port)
    if leader is not None and not await server.leader_alive(ctx, leader):
        leader = None
    lis = await ports.listeners(ctx.host, port)
    pid = leader if leader is not None else (min(lis.pids) if lis.pids else None)
    if pid is None:
        return None
    return {"pid": pid, "up_s": await _uptime(ctx, pid), "ours": leader is not None, "port": port}


def server_line(srv: dict[str, Any] | None, port: int) -> str:
    if srv is None:
        return f"no server runs on port {port}: nothing to stop"
    whose = "" if srv["ours"] else ", not started by the bot"
    return f"the server on port {port} (pid {srv['pid']}, {age(srv['up_s'])}{whose}) will be stopped"


async def run(ctx: SkillContext, params: Params) -> StepResult:
    port = params.port
    srv = await running_server(ctx, port)
    try:
        snap = await gpu.snapshot(ctx, params)
    except nvsmi.NvsmiError as e:
        why = f"cannot list the GPU processes to plan the {params.action}: {e}; nothing was touched"

        async def fail() -> StepResult:
            raise StepFailed(why)

        # A dry run shows the whole plan even where the GPUs cannot be listed (a bot host); a real one fails.
        return await ctx.carry_out(Plan([server_line(srv, port)], why, fail, warnings=[str(e)],
                                        data={"server": srv, "foreign": [], "approved": [], "asked": False, "by": ""}))
    sessions = await processes.our_sessions(ctx) if cleanup.cleanup_targets(snap, params) else set()
    plan = cleanup.plan_cleanup(snap, params, sessions)
    foreign = plan.foreign
    fate = server_line(srv, port)
    data: dict[str, Any] = {"server": srv, "foreign": [h.line() for h in foreign], "approved": [],
                            "asked": bool(foreign), "by": ""}
    if not foreign:
        data["by"] = "nothing to approve"
        return StepResult.ok(f"{fate}; no GPU process the bot did not start: nothing to ask", data=data)
    n = len(foreign)
    kills = (f"{n} GPU process{'es' if n != 1 else ''} the bot did not start will be killed "
             f"(SIGTERM, SIGKILL after {params.grace_s:g}s): {', '.join(str(h.pid) for h in foreign)}")
    still = (f"the server on port {port} (pid {srv['pid']}) still runs" if srv is not None
             else "the GPUs are as they were")
    approval = Approval(
        f"{params.action} on {ctx.host_name}: {fate}; {kills}", [h.line() for h in foreign], log=True,
        if_refused=f"nothing was touched: {still}",
        refused=lambda who: StepFailed(f"not approved ({who}): nothing was touched; {still}; "
                                       f"{n} process{'es' if n != 1 else ''} the bot did not start hold the GPUs: "
                                       f"{', '.join(f'{h.pid} ({h.user})' for h in foreign)}", data=data))

    async def approved() -> StepResult:
        data["approved"] = [processes.approval_key(h.proc) for h in foreign]
        data["by"] = approval.by
        return StepResult.ok(f"approved by {approval.by}: {fate}; {kills}", data=data)

    return await ctx.carry_out(Plan([fate, kills], f"would ask: {fate}; {kills}", approved, approve=approval,
                                    data=data))
