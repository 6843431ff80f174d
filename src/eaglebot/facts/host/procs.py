"""Processes on a host, read from /proc: the commands to run plus pure parsers.

`parse_stat` is the only parser of /proc/PID/stat in eaglebot: the skills use it through
the helpers here, and the audit store uses it to tell a live run owner from a reused PID
(field 22, the start time, differs). A zombie holds no GPU memory, no port and no lock,
so it counts as gone everywhere.

The async helpers take the host (`ctx.host`, an `eaglebot.sdk.Host`) and nothing else;
which of these processes the bot started is decided in `eaglebot.skills.lib.processes`.
"""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the store parses /proc stat records at start-up without loading the sdk (pydantic)
    from eaglebot.sdk import Host

_SEP = "\x1f"


@dataclass(frozen=True)
class Stat:
    """The fields of /proc/PID/stat that eaglebot uses (proc(5) numbers them 1-6 and 22)."""

    pid: int
    comm: str           # at most 15 bytes for a user process; may hold spaces and parentheses
    state: str          # R, S, D, Z, T, t, X, I, ...
    ppid: int
    pgrp: int
    session: int
    starttime: str      # clock ticks after boot; text, because it is only ever compared

    @property
    def zombie(self) -> bool:
        return self.state in ("Z", "X")


def parse_stat(text: str) -> Stat:
    """One /proc/PID/stat record -> Stat; ValueError when it is not one.

    The command name sits in parentheses and may itself contain `) ` (a program may call
    itself anything), so it ends at the LAST `)`: every field after it is a number or the
    one-letter state.
    """
    text = text.strip()
    lp, rp = text.find("("), text.rfind(")")
    if lp < 1 or rp < lp:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    rest = text[rp + 1:].split()
    if len(rest) < 20 or len(rest[0]) != 1:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    try:
        pid, ppid, pgrp, session = int(text[:lp]), int(rest[1]), int(rest[2]), int(rest[3])
    except ValueError:
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}") from None
    if not rest[19].isdigit():
        raise ValueError(f"not a /proc/PID/stat line: {text[:80]!r}")
    return Stat(pid, text[lp + 1:rp], rest[0], ppid, pgrp, session, rest[19])


def parse_stats(text: str) -> list[Stat]:
    """Many records, one a line (`cat /proc/[0-9]*/stat`); lines that are not a record are skipped.

    A process that exits between the shell's glob and cat's read leaves no line, and
    one whose name holds a newline splits its record: both are skipped, not guessed at.
    """
    out = []
    for line in text.splitlines():
        try:
            out.append(parse_stat(line))
        except ValueError:
            continue
    return out


def stat_command(pids: list[int] | None = None) -> str:
    """cat of /proc/PID/stat for `pids` (None: every process); exits 0 when some are gone."""
    paths = " ".join(f"/proc/{int(p)}/stat" for p in pids) if pids is not None else "/proc/[0-9]*/stat"
    return f"cat {paths} 2>/dev/null; true"


def starttime_shell(pid: int) -> str:
    """A shell word that expands to field 22 of /proc/PID/stat (empty when the PID is gone).

    Only for a check that must run in the same command as the action it guards (a kill
    right after "is this still the process we saw?"); everywhere else parse_stat reads
    the record. sed's greedy `.*) ` drops up to the last `) `, as parse_stat does.
    """
    return f"$(sed 's/.*) //' /proc/{int(pid)}/stat 2>/dev/null | cut -d' ' -f20)"


async def stats(host: Host, pids: list[int] | None = None, timeout: float = 60) -> list[Stat]:
    """/proc/PID/stat of `pids`, or of every process on the host."""
    if pids is not None and not pids:
        return []
    res = await host.run(stat_command(sorted(set(pids)) if pids is not None else None), timeout=timeout)
    return parse_stats(res.stdout)


async def stat_of(host: Host, pid: int) -> Stat | None:
    """/proc/PID/stat of one process, or None when there is no such process."""
    found = [s for s in await stats(host, [pid], timeout=30) if s.pid == pid]
    return found[0] if found else None


# -- owner and command line ------------------------------------------------------------------

@dataclass(frozen=True)
class ProcInfo:
    """A process as the skills show it: its stat record, owner and whole command line."""

    stat: Stat
    user: str
    cmdline: str

    @property
    def pid(self) -> int:
        return self.stat.pid

    @property
    def comm(self) -> str:
        return self.stat.comm

    @property
    def session(self) -> int:
        return self.stat.session

    @property
    def starttime(self) -> str:
        return self.stat.starttime

    @property
    def zombie(self) -> bool:
        return self.stat.zombie


def proc_info_command(pids: list[int]) -> str:
    """One line per PID still present: pid, owner, the stat record and the command line, \\x1f apart."""
    ids = " ".join(str(int(p)) for p in pids)
    return (f"for p in {ids}; do if [ -r /proc/$p/stat ]; then "
            f"s=$(cat /proc/$p/stat 2>/dev/null) || continue; "
            f"u=$(stat -c %U /proc/$p 2>/dev/null || echo '?'); "
            f"c=$(tr '\\000\\n' '  ' < /proc/$p/cmdline 2>/dev/null | head -c 8192); "
            f"printf '%s\\037%s\\037%s\\037%s\\n' \"$p\" \"$u\" \"$s\" \"$c\"; fi; done; true")


def parse_proc_info(out: str) -> dict[int, ProcInfo]:
    """The output of proc_info_command -> {pid: ProcInfo}; a kernel thread's command is `[comm]`."""
    procs: dict[int, ProcInfo] = {}
    for line in out.splitlines():
        parts = line.split(_SEP)
        if len(parts) != 4:
            continue
        _pid, user, stat, cmd = parts
        try:
            st = parse_stat(stat)
        except ValueError:
            continue
        procs[st.pid] = ProcInfo(st, user, cmd.strip() or f"[{st.comm}]")
    return procs


async def proc_info(host: Host, pids: list[int]) -> dict[int, ProcInfo]:
    """Owner, session, start time and command line of each PID still present."""
    if not pids:
        return {}
    res = await host.run(proc_info_command(sorted(set(pids))), timeout=30)
    return parse_proc_info(res.stdout)


# -- environment ---------------------------------------------------------------------------

def environ_command(pid: int) -> str:
    """/proc/PID/environ as one base64 line (it is NUL-separated), or UNREADABLE."""
    return f"base64 -w0 /proc/{int(pid)}/environ 2>/dev/null || echo UNREADABLE"


def parse_environ(data: bytes) -> dict[str, str]:
    """/proc/PID/environ: NUL-separated KEY=VALUE."""
    env = {}
    for item in data.split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


async def environ(host: Host, pid: int) -> dict[str, str] | None:
    """The environment a process started with, or None when this login user may not read it."""
    res = await host.run(environ_command(pid), timeout=30)
    out = res.stdout.strip()
    if not out or out == "UNREADABLE":
        return None
    try:
        return parse_environ(base64.b64decode(out, validate=True))
    except (binascii.Error, ValueError):
        return None
