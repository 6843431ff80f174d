"""Stop the SGLang server on a port: the one the bot launched, and whatever else listens there.

The bot's own server is found through its pid file (`{state_dir}/run/server-{port}.pid`,
a session leader); its whole session goes (SGLang's `sglang::scheduler` children share
it). A listener the bot did not start is stopped only with approval: on a step with
`confirm: true` the bot asks; without it the step fails and names the process.
SIGTERM first, SIGKILL after `grace_s`. Nothing running is a no-op (`ok`).

```yaml
- name: stop old server
  skill: server.stop
  confirm: true
  with: {port: "{{ port }}", grace_s: 15}
```
Registers `stopped` (PIDs) and `port`.
"""
from __future__ import annotations

import asyncio
import time

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import Approval, Plan, SkillContext, SkillParams, StepResult

from eaglebot.facts.host import ports, procs
from eaglebot.skills.lib import processes, server

NAME = "server.stop"


class Params(SkillParams):
    port: int = Field(30000, ge=1, le=65535, description="the server's port")
    grace_s: float = Field(15.0, ge=0, le=600, description="seconds between SIGTERM and SIGKILL")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    port = params.port
    # -- probe
    leader = await server.read_pid(ctx, port)
    # Linux does not reuse a PID while it is still some live process's session id, so
    # members of the session survive their leader (orphaned schedulers) and are ours.
    members = await server.session_members(ctx, leader) if leader is not None else []
    lis = await ports.listeners(ctx.host, port)
    sessions = await processes.our_sessions(ctx)
    infos = await procs.proc_info(ctx.host, sorted(set(members) | lis.pids))
    if leader in members and leader in infos and not server.looks_like_sglang(infos[leader]):
        ctx.log(f"pid file names pid {leader}, now a different program ({infos[leader].cmdline[:120]}): stale")
        members = []
    listening = [infos[p] for p in sorted(lis.pids) if p in infos]
    foreign = [p for p in listening if not processes.is_ours(p, sessions)]
    ours = [infos[p] for p in members if p in infos]
    ours += [p for p in listening if processes.is_ours(p, sessions) and p.pid not in members]
    if lis.unseen:
        raise StepFailed(
            f"port {port} is held by a process this user cannot see (another user's); "
            f"ask its owner or an administrator to stop it")
    if not ours and not foreign:
        idle = StepResult.ok(f"no server running on port {port}", data={"stopped": [], "port": port})
        if leader is None:
            return idle

        async def forget() -> StepResult:
            await server.remove_pid_file(ctx, port)
            return idle

        # The stale pid file goes quietly: a dry-run says the same, and leaves it.
        return await ctx.carry_out(Plan([], idle.summary, forget, preview=idle))
    evidence = "\n".join(server.describe(p) for p in ours + foreign)
    # -- decide
    approval = None
    if foreign:
        details = [server.describe(p) for p in foreign]
        if not ctx.confirm:
            raise StepFailed(
                f"port {port} is held by {len(foreign)} process(es) the bot did not start "
                f"({', '.join(str(p.pid) for p in foreign)}); refusing to stop them without approval "
                f"(add `confirm: true` to the step, or stop them yourself)", output=evidence)
        approval = Approval(f"stop {len(foreign)} process(es) listening on port {port} that the bot did not start",
                            details, log=True, refused=lambda who: StepFailed(
                                f"stopping the listener(s) on port {port} was not approved ({who})", output=evidence))
    return await ctx.carry_out(Plan([f"stop {server.describe(p)}" for p in ours + foreign],
                                    f"would stop {len(ours) + len(foreign)} process(es) on port {port}",
                                    lambda: _stop(ctx, port, ours + foreign, params.grace_s), approve=approval,
                                    output=evidence))


async def _stop(ctx: SkillContext, port: int, targets: list[procs.ProcInfo], grace_s: float) -> StepResult:
    # -- act
    reports = await processes.terminate(ctx, targets, grace_s)
    left = [r for r in reports if not r.gone]
    output = "\n".join(r.line() for r in reports)
    for r in reports:
        ctx.log(r.line())
    if left:
        raise StepFailed(f"{len(left)} process(es) survived SIGKILL on port {port}: "
                         f"{', '.join(str(r.pid) for r in left)}", output=output)
    await server.remove_pid_file(ctx, port)
    deadline = time.monotonic() + 10
    while (await ports.listeners(ctx.host, port)).busy:
        if time.monotonic() > deadline:
            raise StepFailed(f"port {port} is still in use after stopping the server", output=output)
        await asyncio.sleep(0.2)
    killed = [r.pid for r in reports]
    hard = [r.pid for r in reports if "SIGKILL" in r.signals]
    note = f" ({len(hard)} needed SIGKILL)" if hard else ""
    return StepResult.changed(f"stopped {len(killed)} process(es) on port {port}{note}: "
                              f"{', '.join(map(str, killed))}",
                              data={"stopped": killed, "port": port}, output=output)
