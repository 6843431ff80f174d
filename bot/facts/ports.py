"""Who listens on a TCP port, read from /proc: the commands to run plus pure parsers.

Two steps, because the kernel keeps the two halves apart: /proc/net/tcp{,6} maps a
LISTEN socket to its inode, and only the /proc/PID/fd links say which process holds
that inode. A listener this login user may not look into (another user's process)
shows up as an inode with no PID: `Listeners.unseen`. No `ss`/`lsof`: neither is
on every host, /proc is.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

from eaglebot.sdk import Host

TCP_TABLES_COMMAND = "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true"
_LISTEN = "0A"   # TCP_LISTEN in the `st` column


def parse_listening_inodes(proc_net_tcp: str, port: int) -> set[str]:
    """Socket inodes LISTENing on `port` in /proc/net/tcp{,6} text."""
    out: set[str] = set()
    for line in proc_net_tcp.splitlines():
        parts = line.split()
        if len(parts) < 10 or parts[0] == "sl" or ":" not in parts[1]:
            continue
        try:
            lport = int(parts[1].rsplit(":", 1)[1], 16)
        except ValueError:
            continue
        if lport == port and parts[3] == _LISTEN and parts[9] != "0":
            out.add(parts[9])
    return out


def socket_owners_command(inodes: set[str]) -> str:
    """find the /proc/PID/fd links to these socket inodes."""
    # find's -lname takes a glob: the brackets of `socket:[INODE]` must be escaped.
    expr = " -o ".join("-lname " + shlex.quote("socket:\\[" + i + "\\]") for i in sorted(inodes))
    return f"find /proc/[0-9]*/fd \\( {expr} \\) -print 2>/dev/null; true"


def parse_fd_socket_pids(find_output: str) -> set[int]:
    """PIDs from `find /proc/*/fd -lname 'socket:[INODE]'` lines (`/proc/PID/fd/N`)."""
    out: set[int] = set()
    for line in find_output.splitlines():
        parts = line.strip().split("/")
        if len(parts) >= 4 and parts[1] == "proc" and parts[2].isdigit():
            out.add(int(parts[2]))
    return out


@dataclass
class Listeners:
    pids: set[int]
    unseen: bool   # a socket listens but no visible process owns it (another user's)

    @property
    def busy(self) -> bool:
        return bool(self.pids) or self.unseen


async def listeners(host: Host, port: int) -> Listeners:
    """Who LISTENs on TCP `port` on the host."""
    res = await host.run(TCP_TABLES_COMMAND, timeout=30)
    inodes = parse_listening_inodes(res.stdout, port)
    if not inodes:
        return Listeners(set(), False)
    res = await host.run(socket_owners_command(inodes), timeout=60)
    pids = parse_fd_socket_pids(res.stdout)
    return Listeners(pids, not pids)
