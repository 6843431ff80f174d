"""The front door of `eagle serve`'s HTTP ports: slow clients are shed, file descriptors stay
bounded, so the bot answers Slack (and reaches Slack's API) whatever trickles in.

aiohttp reads a request for as long as its client takes: 1,100 loopback connections sending
a byte every 8 s held every descriptor under systemd's default limit (1,024), so the bot
answered nobody, its own Slack API calls failed, and asyncio logged `Too many open files` in a
loop. Here each connection is a thin protocol around aiohttp's (`Gate.connection`) that
- gives a request's head (request line and headers) HEADER_TIMEOUT_S from its first byte
  (or from the connection's start), and its body BODY_TIMEOUT_S once the head is in; a
  request that is late is cut (the connection aborted, so its descriptor is free at once);
- admits at most `cap` connections, below the open-files limit with room for what the bot
  itself opens (Slack's API, the store, SSH) and for a burst of accepts (asyncio accepts up
  to `backlog` sockets a loop iteration, and a cut socket is closed on the next one): at the
  cap a new connection takes the place of
  the oldest one still reading its request (a slow client, most likely: Slack's requests are
  in within milliseconds); when every connection is past its request (aiohttp is answering,
  or keeping it alive for at most KEEPALIVE_S), the new one is answered 503 and closed,
  before aiohttp has spent anything on it.
What is cut is counted (the `eagle_http_shed` counter) and logged at most once a minute.
Why not a library: aiohttp has no header or body read timeout and no connection cap, and a
proxy in front (nginx's client_header_timeout) is a deployment the bot cannot assume.
"""
from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Callable

from aiohttp import web

log = logging.getLogger("eaglebot.serve")

HEADER_TIMEOUT_S = 5.0
BODY_TIMEOUT_S = 10.0
KEEPALIVE_S = 5.0          # aiohttp's idle keep-alive (AppRunner's keepalive_timeout)
MAX_CONNECTIONS = 4096     # whatever the limit: one replica answering Slack needs far fewer
MAX_HEAD = 64 * 1024       # past this aiohttp refuses the head itself (431): nothing to time
_READING = ("head", "body", "chunked")


def raise_open_files_limit() -> tuple[int, int]:
    """The soft open-files limit raised to the hard one (systemd's default is 1024 soft,
    524288 hard; the shipped unit sets LimitNOFILE): (soft, hard) now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft, hard


def _soft(soft_limit: int | None) -> int:
    soft = soft_limit if soft_limit is not None else resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def accept_backlog(soft_limit: int | None = None) -> int:
    """listen(2)'s backlog, which is also how many sockets asyncio accepts in one go."""
    return max(16, min(128, _soft(soft_limit) // 8))


def connection_cap(soft_limit: int | None = None) -> int:
    """How many connections a port admits: under the open-files limit by an eighth of it (at
    least 64) for the bot's own descriptors and by two bursts of accepts, at most
    MAX_CONNECTIONS (1,024 open files: 640 connections)."""
    soft = _soft(soft_limit)
    return max(8, min(MAX_CONNECTIONS, soft - max(64, soft // 8) - 2 * accept_backlog(soft)))


class Gate:
    """The connections of one listening port: the cap, and what was shed."""

    def __init__(self, cap: int, on_shed: Callable[[str], None] | None = None,
                 header_timeout_s: float = HEADER_TIMEOUT_S, body_timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.cap, self.on_shed = cap, on_shed
        self.header_timeout_s, self.body_timeout_s = header_timeout_s, body_timeout_s
        self.live: dict[_Guarded, None] = {}   # in the order they came
        self.shed: dict[str, int] = {}
        self._logged_at = 0.0
        self._unlogged = 0

    def connection(self, inner: Callable[[], asyncio.Protocol]) -> asyncio.Protocol:
        """The protocol for one accepted connection, around the one `inner()` makes (aiohttp's:
        made only for a connection that is admitted)."""
        return _Guarded(self, inner)

    def _admit(self, conn: _Guarded) -> bool:
        if len(self.live) >= self.cap:
            victim = next((c for c in self.live if c.phase in _READING), None)
            if victim is None:
                return False
            victim.cut("over the connection cap")
        self.live[conn] = None
        return True

    def _count(self, reason: str) -> None:
        self.shed[reason] = self.shed.get(reason, 0) + 1
        if self.on_shed is not None:
            self.on_shed(reason)
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= 60:
            log.warning("shed %d slow or excess HTTP connection(s) (%s; %d open, at most %d)",
                        self._unlogged, ", ".join(f"{k}: {v}" for k, v in sorted(self.shed.items())),
                        len(self.live), self.cap)
            self._logged_at, self._unlogged = now, 0


class _Guarded(asyncio.Protocol):
    """One connection: aiohttp's protocol `inner`, with the request's framing followed just
    far enough to time its head and body (Content-Length; a chunked body keeps the body's
    deadline until it is answered)."""

    inner: asyncio.Protocol

    def __init__(self, gate: Gate, make: Callable[[], asyncio.Protocol]):
        self.gate, self.make = gate, make
        self.transport: asyncio.Transport | None = None
        self.phase = "head"
        self.head = b""
        self.need = 0
        self.timer: asyncio.TimerHandle | None = None
        self.admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.gate._admit(self):
            self.gate._count("refused at the connection cap")
            transport.write(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            transport.abort()
            return
        self.admitted = True
        self.inner = self.make()
        self._arm(self.gate.header_timeout_s)
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        self._follow(data)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def pause_writing(self) -> None:
        if self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.gate.live.pop(self, None)
        if self.admitted:
            self.inner.connection_lost(exc)

    def cut(self, reason: str) -> None:
        self._disarm()
        self.gate.live.pop(self, None)
        self.gate._count(reason)
        if self.transport is not None:
            self.transport.abort()

    def _arm(self, seconds: float) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        what = "its request's head" if self.phase == "head" else "its request's body"
        self.timer = loop.call_later(seconds, self.cut, f"{what} was not in within {seconds:g}s")

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _follow(self, data: bytes) -> None:
        pos = 0
        while pos < len(data):
            if self.phase == "done":   # the next request (keep-alive): its head's time starts now
                self.phase, self.head = "head", b""
                self._arm(self.gate.header_timeout_s)
            if self.phase == "head":
                start = max(0, len(self.head) - 3)
                self.head += data[pos:]
                end = self.head.find(b"\r\n\r\n", start)
                if end < 0:
                    if len(self.head) > MAX_HEAD:
                        self.phase = "done"   # aiohttp answers 431 and closes
                        self._disarm()
                    return
                pos = len(data) - (len(self.head) - end - 4)
                self._headed(self.head[:end])
                continue
            if self.phase == "body":
                n = min(self.need, len(data) - pos)
                self.need -= n
                pos += n
                if self.need == 0:
                    self.phase = "done"
                    self._disarm()
                continue
            return   # chunked: the rest is body until it is answered

    def _headed(self, head: bytes) -> None:
        length, chunked = 0, False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length" and value.strip().isdigit():
                length = int(value.strip())
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        self.head = b""
        if chunked:
            self.phase = "chunked"
        elif length:
            self.phase, self.need = "body", length
        else:
            self.phase = "done"
            self._disarm()
            return
        self._arm(self.gate.body_timeout_s)


class Listener:
    """A port `listen` opened: its aiohttp runner and its listening socket."""

    def __init__(self, runner: web.AppRunner, server: asyncio.AbstractServer, gate: Gate):
        self.runner, self.server, self.gate = runner, server, gate

    async def close(self) -> None:
        """Stop accepting, then close the connections (aiohttp lets the answers under way finish)."""
        self.server.close()
        await self.runner.cleanup()


async def _say_keepalive(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """`Keep-Alive: timeout=5` on an answer that keeps its connection: a client that reuses an
    idle connection knows when we close it (without it, one got resets after 5 s idle)."""
    if response.keep_alive is not False and request.keep_alive:
        response.headers.setdefault("Keep-Alive", f"timeout={KEEPALIVE_S:g}")


async def listen(app: web.Application, host: str, port: int, *, on_shed: Callable[[str], None] | None = None,
                 cap: int | None = None) -> Listener:
    """Serve `app` on host:port behind a `Gate` (at most `cap` connections, by default
    `connection_cap()` of this process's open-files limit)."""
    app.on_response_prepare.append(_say_keepalive)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=KEEPALIVE_S)
    await runner.setup()
    factory = runner.server
    assert factory is not None
    gate = Gate(cap if cap is not None else connection_cap(), on_shed)
    try:
        server = await asyncio.get_running_loop().create_server(lambda: gate.connection(factory), host, port,
                                                                backlog=accept_backlog())
    except BaseException:
        await runner.cleanup()
        raise
    return Listener(runner, server, gate)
