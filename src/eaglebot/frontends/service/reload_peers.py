"""`/eagle reload` reaches every replica, not only the one Slack delivered it to.

Slack hands a slash command to one replica (Socket Mode: any one of its connections; HTTP: the
one the load balancer picked). The replica that got it reloads itself, then writes a
`reload_all` event to the shared store; every other replica looks for a newer one at each beat
(BEAT_S) and reloads itself from its own eagle.yaml, each reload audited as usual (`reload`
events, one log line). A SIGHUP stays local: `systemctl reload` is per machine, and a
configuration tool that changes each machine's file signals each one.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, TYPE_CHECKING

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import ApprovalsFace


log = logging.getLogger("eaglebot.reload")

KIND = "reload_all"
BEAT_S = 2.0

Reload = Callable[[str], Awaitable[tuple[bool, str]]]


class PeerReloads:
    """The Slack path of a reload (`from_slack`) and the loop that follows other replicas' (`run`)."""

    def __init__(self, store: Door[ApprovalsFace], reload: Reload, *, every_s: float = BEAT_S):
        self.store = store
        self._reload = reload
        self.every_s = every_s
        self.seen = 0   # the newest reload_all event this replica has acted on (or wrote)
        # Held from writing our own request until `seen` covers it, and by each look: else the
        # follower loop could read our own event in between and reload this replica twice.
        self._lock = asyncio.Lock()

    async def _newest(self) -> tuple[int, str] | None:
        rows = await self.store.call(lambda s: s.events(KIND, limit=1))
        return (rows[0]["id"], rows[0]["message"]) if rows else None

    async def prime(self) -> None:
        """At start: requests made before this replica existed are not for it (it read the config now)."""
        newest = await self._newest()
        self.seen = newest[0] if newest else 0

    async def from_slack(self, who: str) -> tuple[bool, str]:
        """Reload here; once done, ask every other replica to do the same."""
        done, text = await self._reload(who)
        if not done:
            return done, text
        try:
            async with self._lock:
                await self.store.call(lambda s: s.add_event(None, KIND, who))
                newest = await self._newest()
                if newest:
                    self.seen = max(self.seen, newest[0])
        except Exception as e:
            log.warning("could not ask the other replicas to reload: %s", e)
            return done, f"{text} (the other replicas, if any, were NOT asked: {e})"
        return done, f"{text}; any other replica reloads its own eagle.yaml within {self.every_s:g} s"

    async def check(self) -> bool:
        """One look for a newer request; reload here if there is one (True)."""
        async with self._lock:
            newest = await self._newest()
            if newest is None or newest[0] <= self.seen:
                return False
            self.seen = newest[0]
        await self._reload(f"{newest[1]} (via another replica)")
        return True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.every_s)
                return
            except asyncio.TimeoutError:
                pass
            try:
                await self.check()
            except Exception as e:   # the store is down for a moment: look again at the next beat
                log.warning("looking for other replicas' reloads: %s", e)
