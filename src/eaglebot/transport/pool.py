"""One transport per configured host, built on first use and reused by every step."""
from __future__ import annotations

import asyncio

from eaglebot.config import Settings
from eaglebot.errors import TransportError
from eaglebot.transport.base import Transport
from eaglebot.transport.local import LocalTransport
from eaglebot.transport.ssh import SSHTransport


class TransportPool:
    """Builds and caches one transport per configured host."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._t: dict[str, Transport] = {}
        # SSH connections being opened at once, across every run of the process.
        self.connecting = asyncio.Semaphore(settings.max_connecting)
        # ... and through each jump host or to each address (an sshd drops what is over its MaxStartups).
        self._via_jump: dict[str, asyncio.Semaphore] = {}

    def use(self, name: str, transport: Transport) -> None:
        """Hold `transport` for host `name` instead of building one (eaglebot.testing's chat bot:
        a configured host backed by the scripted `Host`)."""
        self._t[name] = transport

    def get(self, name: str) -> Transport:
        if name not in self._t:
            cfg = self.settings.hosts[name]
            if cfg.transport == "local":
                self._t[name] = LocalTransport(name)
            else:
                tunnel = self.get(cfg.jump) if cfg.jump else None
                if tunnel is not None and not isinstance(tunnel, SSHTransport):
                    raise TransportError(f"host {name}: jump host {cfg.jump} must be an ssh host")
                # The first hop: the jump host, or for a direct host its address (host names that
                # share one sshd, as in a test bed, share its MaxStartups too).
                hop = cfg.jump or f"{cfg.address}:{cfg.port}"
                via = self._via_jump.setdefault(hop, asyncio.Semaphore(self.settings.max_connecting_per_jump))
                self._t[name] = SSHTransport(name, cfg, tunnel=tunnel, connecting=self.connecting, via_jump=via)
        return self._t[name]

    async def reach(self, name: str) -> int:
        """Open the host's connection (its connect retries included) before a run's first step
        on it; raises HostUnreachable when it cannot. The tries it took (0: nothing to open)."""
        t = self.get(name)
        if not isinstance(t, SSHTransport):
            return 0
        await t.connect()
        return t.connect_tries

    async def close(self) -> None:
        for t in self._t.values():
            await t.close()
        self._t.clear()
