"""Which processes the bot started, and stopping processes safely.

Shared by gpu.cleanup, server.stop, server.launch and bench.serving. Only PIDs we were
given (by nvidia-smi, fuser, a port's sockets or our pid files) are ever signalled, never
a process name; each signal re-checks the PID's start time first, because PIDs are reused.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from eaglebot.errors import StepFailed
from eaglebot.sdk import SkillContext, path_for_shell

from eaglebot.facts.host import procs


def state_dir(ctx: SkillContext) -> str:
    """The bot's state folder on the host, absolute (the host resolved it when the run reached it)."""
    if not ctx.state_dir.startswith("/"):
        raise StepFailed(f"no state folder on {ctx.host_name}: the host could not make state_dir "
                         f"(see this run's first step on {ctx.host_name})")
    return ctx.state_dir.rstrip("/") or "/"


def pid_files_glob(ctx: SkillContext) -> str:
    """Every pid file the bot writes (`{state_dir}/run/*.pid`), as a shell word."""
    return f"{path_for_shell(state_dir(ctx) + '/run')}/*.pid"


async def our_sessions(ctx: SkillContext) -> set[int]:
    """Session ids of what the bot launched: each pid file names a session leader."""
    res = await ctx.host.run(f"cat {pid_files_glob(ctx)} 2>/dev/null; true", timeout=30)
    return {int(tok) for tok in res.stdout.split() if tok.isdigit()}


def is_ours(p: procs.Stat | procs.ProcInfo, sessions: set[int]) -> bool:
    """Did the bot start this process? Yes when it runs in a session the bot started.

    Session, not process group and not PID:
    - spawn_detached starts every server with setsid and records the leader's PID, which
      is the session id; whatever the server forks stays in that session unless it asks
      to leave, so SGLang's `sglang::scheduler` children (and their own children) are ours
      even after the leader died, and even when a child made its own process group
      (setpgid keeps the session; torch and shells do that).
    - A child that called setsid left on purpose (a daemon it spawned): it is in a
      session we never recorded, so it is NOT ours and killing it needs approval.
    - A PID alone proves nothing: a PID from a stale pid file may now belong to anyone,
      and such a process is in its own (or its login's) session, not ours. Linux keeps a
      PID out of reuse while any live process still has it as its session id, so a
      session id from our pid files cannot be taken over while a member lives.
    """
    s = p.stat if isinstance(p, procs.ProcInfo) else p
    return s.session in sessions


def approval_key(p: procs.ProcInfo) -> str:
    """A process as an approval given earlier in a run covers it (server.plan's `approved`): its PID
    and start time, so a PID reused by another process is not covered."""
    return f"{p.pid}:{p.starttime}"


async def alive(ctx: SkillContext, targets: list[procs.ProcInfo]) -> set[int]:
    """Which targets still run: present, not a zombie, and with the start time we saw."""
    if not targets:
        return set()
    want = {p.pid: p.starttime for p in targets}
    return {s.pid for s in await procs.stats(ctx.host, list(want), timeout=30)
            if not s.zombie and want.get(s.pid) == s.starttime}


@dataclass
class KillReport:
    pid: int
    user: str
    cmdline: str
    signals: list[str] = field(default_factory=list)
    gone: bool = False
    note: str = ""

    def line(self) -> str:
        sig = "+".join(self.signals) or "none"
        state = "gone" if self.gone else "STILL RUNNING"
        note = f" ({self.note})" if self.note else ""
        return f"pid {self.pid} ({self.user}) {self.cmdline[:160]}: {sig} -> {state}{note}"


def _signal_script(targets: list[procs.ProcInfo], sig: str) -> str:
    assert sig in ("TERM", "KILL")
    parts = []
    for p in targets:
        # Check and kill in one command on the host: the PID may be reused in between.
        parts.append(
            f"s={procs.starttime_shell(p.pid)}; "
            f"if [ \"$s\" = {p.starttime} ]; then if kill -{sig} {p.pid} 2>/dev/null; then echo sent {p.pid}; "
            f"else echo refused {p.pid}; fi; "
            f"else echo reused {p.pid}; fi")
    return "; ".join(parts) + "; true"


async def terminate(ctx: SkillContext, targets: list[procs.ProcInfo], grace_s: float,
                    poll_s: float = 0.05) -> list[KillReport]:
    """SIGTERM, wait up to grace_s, SIGKILL survivors, confirm each is gone."""
    reports = {p.pid: KillReport(p.pid, p.user, p.cmdline) for p in targets}
    if not targets:
        return []
    refused: set[int] = set()
    res = await ctx.host.run(_signal_script(targets, "TERM"), timeout=30)
    for line in res.stdout.splitlines():
        word, _, pid = line.partition(" ")
        if pid.isdigit() and int(pid) in reports:
            if word == "sent":
                reports[int(pid)].signals.append("SIGTERM")
            elif word == "reused":
                reports[int(pid)].note = "exited before the signal"
            elif word == "refused":
                refused.add(int(pid))
    ctx.log(f"SIGTERM sent to {', '.join(str(p.pid) for p in targets)}; grace {grace_s:g}s")
    remaining = list(targets)
    deadline = time.monotonic() + grace_s
    while True:
        live = await alive(ctx, remaining)
        remaining = [p for p in remaining if p.pid in live]
        if not remaining or time.monotonic() >= deadline or all(p.pid in refused for p in remaining):
            break
        await asyncio.sleep(poll_s)
    if remaining:
        ctx.log(f"still running after {grace_s:g}s: {', '.join(str(p.pid) for p in remaining)}; SIGKILL")
        res = await ctx.host.run(_signal_script(remaining, "KILL"), timeout=30)
        for line in res.stdout.splitlines():
            word, _, pid = line.partition(" ")
            if word == "sent" and pid.isdigit():
                reports[int(pid)].signals.append("SIGKILL")
            elif word == "refused" and pid.isdigit():
                refused.add(int(pid))
        deadline = time.monotonic() + 10
        while remaining and time.monotonic() < deadline:
            live = await alive(ctx, remaining)
            remaining = [p for p in remaining if p.pid in live]
            if remaining:
                await asyncio.sleep(poll_s)
    for p in targets:
        reports[p.pid].gone = p.pid not in {r.pid for r in remaining}
        if not reports[p.pid].gone and p.pid in refused:
            reports[p.pid].note = "the signal was refused: not permitted for this login user"
    return list(reports.values())
