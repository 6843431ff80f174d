"""One leader among the `eagle serve` replicas of one store: a lease with an expiry.

Every replica beats (`replica_beat`) and tries the `leader` lease every BEAT_S; the one that
holds it fires the schedules and runs the health watch (`Duties`), the others only answer
Slack. A leader that dies stops renewing: its lease expires after LEASE_TTL_S and the next
replica to try takes it, so a dead leader is replaced within LEASE_TTL_S + BEAT_S (12 s).

Stall and clock safety: a leader counts its term on its own monotonic clock from the moment
BEFORE the renewal it sent (the lease in the store expires TTL after the write, which is
later), and steps down STEP_DOWN_MARGIN_S before that: a renewal that fails, hangs on the
store or returns late ends its duties while its lease is still valid, so two replicas never
lead at once as long as the machines' clocks agree within the margin (NTP keeps them to
milliseconds). A process frozen past its term (SIGSTOP, swap) may wake up believing it leads
until the loop's next tick: the fires it could start then are fenced by the store, where each
(schedule, fire time) is claimed once (`claim_fire`).
"""
from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from typing import Protocol, TYPE_CHECKING

from eaglebot import __version__
from eaglebot.frontends.replicas_text import LEADER
from eaglebot.store.base import proc_start_time

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import ServiceState

log = logging.getLogger("eaglebot.leader")

LEASE_TTL_S = 10.0
BEAT_S = 2.0
STEP_DOWN_MARGIN_S = 3.0
RECOVER_EVERY = 3   # beats between the leader's sweeps for runs of dead replicas


class Duties(Protocol):
    """What the leader does: started on election, stopped on losing the lease (or at exit)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def sweep(self) -> None:
        """Every few beats while leading: release what dead replicas left (their runs, locks)."""
        ...


def replica_id() -> str:
    """hostname:pid:random: unique even when a pid is reused."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Leadership:
    """The election loop of one replica. `run(stop)` until `stop` is set, then step down and
    release the lease, so the next leader does not wait for it to expire."""

    def __init__(self, store: Door[ServiceState], duties: Duties, *, ttl_s: float = LEASE_TTL_S,
                 beat_s: float = BEAT_S, margin_s: float = STEP_DOWN_MARGIN_S, rid: str | None = None):
        self.store = store
        self.duties = duties
        self.ttl_s, self.beat_s, self.margin_s = ttl_s, beat_s, margin_s
        self.id = rid or replica_id()
        self.leading = False
        self._until = 0.0   # monotonic: the end of this term, unless renewed

    def is_leader(self) -> bool:
        """True while this replica leads and its term has not run out (monotonic clock)."""
        return self.leading and time.monotonic() < self._until

    async def run(self, stop: asyncio.Event) -> None:
        beats = 0
        start = proc_start_time(os.getpid())
        try:
            while not stop.is_set():
                sent = time.monotonic()
                budget = self.ttl_s - self.margin_s   # a leader's answer must come within its term
                if self.leading:
                    budget = max(0.0, min(budget, self._until - sent))
                held = False
                try:
                    held = await asyncio.wait_for(self._renew(start), budget)
                except Exception as e:   # the store is down or slow: not leading is the safe answer
                    log.warning("leader lease: %s", str(e) or type(e).__name__)
                if held:
                    self._until = sent + self.ttl_s - self.margin_s
                    if not self.leading:
                        await self._elected()
                    beats += 1
                    if beats % RECOVER_EVERY == 0:
                        await self._sweep()
                elif self.leading:
                    await self._deposed("another replica holds the lease")
                await self._sleep(stop)
        finally:
            if self.leading:
                await self._deposed("stopping")
            try:
                await self.store.call(lambda s: s.lease_release(LEADER, self.id))
            except Exception as e:
                log.warning("could not release the leader lease: %s", e)

    async def _renew(self, start: str | None) -> bool:
        await self.store.call(lambda s: s.replica_beat(self.id, hostname=socket.gethostname(), pid=os.getpid(),
                                                       proc_start=start, version=__version__))
        return await self.store.call(lambda s: s.lease_acquire(LEADER, self.id, self.ttl_s))

    async def _sleep(self, stop: asyncio.Event) -> None:
        """Until the next beat; a leader whose term runs out first steps down right then."""
        wait = self.beat_s
        if self.leading:
            wait = max(0.0, min(wait, self._until - time.monotonic()))
        try:
            await asyncio.wait_for(stop.wait(), wait)
        except asyncio.TimeoutError:
            pass
        if self.leading and time.monotonic() >= self._until:
            await self._deposed("the lease was not renewed in time")

    async def _elected(self) -> None:
        self.leading = True
        log.info("replica %s is the leader: schedules and the health watch run here", self.id)
        try:
            await self.duties.start()
        except Exception:
            log.exception("starting the leader's duties failed")

    async def _deposed(self, why: str) -> None:
        self.leading = False
        log.info("replica %s is no longer the leader (%s)", self.id, why)
        try:
            await self.duties.stop()
        except Exception:
            log.exception("stopping the leader's duties failed")

    async def _sweep(self) -> None:
        try:
            await self.duties.sweep()
        except Exception:
            log.exception("the leader's sweep failed")
