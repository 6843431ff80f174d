"""Processes on a host: read them, tell ours from other people's, stop them safely.

Shared by the GPU and server skills. Only PIDs we were given (by nvidia-smi, fuser
or our pid files) are ever signalled; each signal re-checks the PID's start time
(/proc/PID/stat field 22) first, because PIDs are reused. A zombie holds no GPU
memory and counts as gone.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from eaglebot.sdk import SkillContext

_SEP = "\x1f"


@dataclass
class ProcInfo:
    pid: int
    user: str
    state: str          # R, S, D, Z, T, ...
    ppid: int
    pgid: int
    sid: int
    start: str          # start time in clock ticks since boot (field 22)
    comm: str
    cmdline: str

    @property
    def zombie(self) -> bool:
        return self.state in ("Z", "X")


def parse_stat(text: str) -> dict:
    """Parse /proc/PID/stat; the command name may contain spaces and parentheses."""
    text = text.strip()
    lp, rp = text.index("("), text.rindex(")")
    rest = text[rp + 2:].split()
    return {"pid": int(text[:lp].strip()), "comm": text[lp + 1:rp], "state": rest[0], "ppid": int(rest[1]),
            "pgid": int(rest[2]), "sid": int(rest[3]), "start": rest[19]}


def parse_proc_lines(out: str) -> dict[int, ProcInfo]:
    procs: dict[int, ProcInfo] = {}
    for line in out.splitlines():
        parts = line.split(_SEP)
        if len(parts) != 4:
            continue
        _pid, user, stat, cmd = parts
        try:
            st = parse_stat(stat)
        except (ValueError, IndexError):
            continue
        procs[st["pid"]] = ProcInfo(st["pid"], user, st["state"], st["ppid"], st["pgid"], st["sid"],
                                    st["start"], st["comm"], cmd.strip() or f"[{st['comm']}]")
    return procs


def _proc_script(pids: list[int]) -> str:
    ids = " ".join(str(int(p)) for p in pids)
    return (f"for p in {ids}; do if [ -r /proc/$p/stat ]; then "
            f"s=$(cat /proc/$p/stat 2>/dev/null) || continue; "
            f"u=$(stat -c %U /proc/$p 2>/dev/null || echo '?'); "
            f"c=$(tr '\\000\\n' '  ' < /proc/$p/cmdline 2>/dev/null | head -c 8192); "
            f"printf '%s\\037%s\\037%s\\037%s\\n' \"$p\" \"$u\" \"$s\" \"$c\"; fi; done; true")


async def proc_info(ctx: SkillContext, pids: list[int]) -> dict[int, ProcInfo]:
    """Owner, session, start time and command line of each PID still present."""
    if not pids:
        return {}
    res = await ctx.host.run(_proc_script(sorted(set(pids))), timeout=30)
    return parse_proc_lines(res.stdout)


def state_dir(ctx: SkillContext) -> str:
    return ctx.state_dir.rstrip("/")


async def our_sessions(ctx: SkillContext) -> set[int]:
    """Session ids of what the bot launched: each pid file names a session leader."""
    d = state_dir(ctx)
    res = await ctx.host.run(f'cat {_q(d)}/run/*.pid 2>/dev/null; true', timeout=30)
    out: set[int] = set()
    for tok in res.stdout.split():
        if tok.isdigit():
            out.add(int(tok))
    return out


def _q(path: str) -> str:
    """Quote a path for sh, keeping a leading ~/ expandable."""
    from eaglebot.transport import path_for_shell

    return path_for_shell(path)


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


def _signal_script(targets: list[ProcInfo], sig: str) -> str:
    assert sig in ("TERM", "KILL")
    parts = []
    for p in targets:
        # Signal only if the PID still has the start time we saw: PIDs are reused.
        parts.append(
            f"s=$(sed 's/.*) //' /proc/{p.pid}/stat 2>/dev/null | cut -d' ' -f20); "
            f"if [ \"$s\" = {p.start} ]; then if kill -{sig} {p.pid} 2>/dev/null; then echo sent {p.pid}; "
            f"else echo refused {p.pid}; fi; "
            f"else echo reused {p.pid}; fi")
    return "; ".join(parts) + "; true"


def _alive_script(targets: list[ProcInfo]) -> str:
    parts = []
    for p in targets:
        parts.append(
            f"r=$(sed 's/.*) //' /proc/{p.pid}/stat 2>/dev/null | cut -d' ' -f1,20); "
            f"case \"$r\" in Z*|X*|'') ;; *' '{p.start}) echo {p.pid};; esac")
    return "; ".join(parts) + "; true"


async def alive(ctx: SkillContext, targets: list[ProcInfo]) -> set[int]:
    if not targets:
        return set()
    res = await ctx.host.run(_alive_script(targets), timeout=30)
    return {int(x) for x in res.stdout.split() if x.isdigit()}


async def terminate(ctx: SkillContext, targets: list[ProcInfo], grace_s: float,
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
    remaining = [p for p in targets]
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
