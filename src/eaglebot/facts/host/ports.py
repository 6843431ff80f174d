"""Who listens on a TCP port, read from /proc: the commands to run plus pure parsers.

Two steps, because the kernel keeps the two halves apart: /proc/net/tcp{,6} maps a
LISTEN socket to its inode, and only the /proc/PID/fd links say which process holds
that inode. A listener this login user may not look into (another user's process)
shows up as an inode with no PID: `Listeners.unseen`. No `ss`/`lsof`: neither is
on every host, /proc is.
"""
from __future__ import annotations

import ipaddress
import shlex
from dataclasses import dataclass, field

from eaglebot.sdk import Host

TCP_TABLES_COMMAND = "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true"
_LISTEN = "0A"   # TCP_LISTEN in the `st` column


def _address(hex_addr: str) -> str | None:
    """/proc/net/tcp's local address: 8 hex digits (IPv4) or 32 (IPv6), each 32-bit word in the
    host's byte order (little-endian on x86 and ARM)."""
    try:
        raw = bytes.fromhex(hex_addr)
    except ValueError:
        return None
    if len(raw) not in (4, 16):
        return None
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def parse_listening(proc_net_tcp: str, port: int) -> dict[str, str]:
    """Socket inode -> local address of each LISTEN socket on `port` in /proc/net/tcp{,6} text."""
    out: dict[str, str] = {}
    for line in proc_net_tcp.splitlines():
        parts = line.split()
        if len(parts) < 10 or parts[0] == "sl" or ":" not in parts[1]:
            continue
        addr, _, hex_port = parts[1].rpartition(":")
        try:
            lport = int(hex_port, 16)
        except ValueError:
            continue
        if lport == port and parts[3] == _LISTEN and parts[9] != "0":
            out[parts[9]] = _address(addr) or "?"
    return out


_WILDCARDS = ("", "0.0.0.0", "::", "[::]", "*")


def probe_address(bind: str) -> str:
    """Where the bot's own requests reach a server bound to `bind` (its --host), as a URL's host:
    a wildcard (0.0.0.0, ::) answers on 127.0.0.1, any other address only on itself (127.0.0.2
    too: every 127/8 address is its own socket)."""
    b = bind.strip()
    if b in _WILDCARDS:
        return "127.0.0.1"
    b = b.strip("[]")
    return f"[{b}]" if ":" in b else b


def probe_address_of(addresses: list[str]) -> str:
    """Where to reach what listens on these local addresses (from `parse_listening`): 127.0.0.1
    when one is a wildcard or 127.0.0.1 itself, else the first (IPv4 before IPv6)."""
    if not addresses or any(a in ("0.0.0.0", "::", "127.0.0.1") for a in addresses):
        return "127.0.0.1"
    return probe_address(sorted(addresses, key=lambda a: (":" in a, a))[0])


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
    addresses: list[str] = field(default_factory=list)   # the local addresses it listens on

    @property
    def busy(self) -> bool:
        return bool(self.pids) or self.unseen


async def listeners(host: Host, port: int) -> Listeners:
    """Who LISTENs on TCP `port` on the host."""
    res = await host.run(TCP_TABLES_COMMAND, timeout=30)
    found = parse_listening(res.stdout, port)
    if not found:
        return Listeners(set(), False)
    res = await host.run(socket_owners_command(set(found)), timeout=60)
    pids = parse_fd_socket_pids(res.stdout)
    return Listeners(pids, not pids, sorted(set(found.values())))


async def listen_addresses(host: Host, port: int) -> list[str]:
    """The local addresses something LISTENs on at TCP `port` on the host (one read of /proc)."""
    res = await host.run(TCP_TABLES_COMMAND, timeout=30)
    return sorted(set(parse_listening(res.stdout, port).values()))
