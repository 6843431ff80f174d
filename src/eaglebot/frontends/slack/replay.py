"""Slack requests are answered once: a replay within Slack's 5-minute window does nothing.

A correctly signed request stays valid for the 5 minutes of clock skew Slack allows, so
whoever captured one (a proxy log, a shared HAR file) could re-send it and start the same
run again; Slack itself re-sends a request it thinks we missed (`X-Slack-Retry-Num`, the
same body under a new timestamp). Each request is known by the SHA-256 of its body, which
holds its `trigger_id` (unique per user action). The `trigger_id` is not a key of its own: a
signed body cannot be altered, so no replay carries it in another body, and a client that
reuses one for distinct commands (test harnesses do) would have its later commands dropped.

`SeenRequests` is the seam. `StoreSeen`, what `eagle serve` uses, keeps the set in the audit
store (`seen_requests`: a unique key and an expiry, pruned as it goes, at most MAX_KEYS), so
every replica on one store answers a request once, whichever replica each copy reaches:
Slack's retry often goes to another one behind the load balancer. `MemorySeen` is one
process's set: what `StoreSeen` falls back to while the store cannot answer (the request is
then still refused on the replica that saw it).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import OrderedDict
from typing import Any, Protocol, Sequence, TYPE_CHECKING

from eaglebot.errors import EagleError

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import ServiceState

log = logging.getLogger("eaglebot.slack")

WINDOW_S = 5 * 60          # Slack refuses a signature timestamp older than this: nothing older can be replayed
MAX_KEYS = 50_000          # ~ 170 requests a second for 5 minutes, a few MiB; the oldest go first


class SeenRequests(Protocol):
    async def claim(self, keys: Sequence[str]) -> bool:
        """Record `keys`; True when none of them was seen within the window (answer the request),
        False when one was (a replay: answer 200 and do nothing). Check-and-record is one step,
        so two copies racing each other cannot both win."""
        ...


class MemorySeen:
    """One process's seen-set: a TTL of `window_s`, at most `max_keys` keys (oldest evicted)."""

    def __init__(self, window_s: float = WINDOW_S, max_keys: int = MAX_KEYS) -> None:
        self.window_s = window_s
        self.max_keys = max_keys
        self._until: OrderedDict[str, float] = OrderedDict()   # insertion order == expiry order

    async def claim(self, keys: Sequence[str]) -> bool:
        now = time.monotonic()
        while self._until and next(iter(self._until.values())) <= now:
            self._until.popitem(last=False)
        if any(k in self._until for k in keys):
            return False
        for k in keys:
            self._until[k] = now + self.window_s
        while len(self._until) > self.max_keys:
            self._until.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._until)


class StoreSeen:
    """The seen-set of every replica on one store (the module docstring). The claims that
    arrive in one turn of the event loop go to the store together, one thread hop for all
    (each still its own transaction): 50 commands at once otherwise queued 50 hops on the loop
    their acks wait for (tests/bench/bench_ack.py)."""

    def __init__(self, store: Door[ServiceState], window_s: float = WINDOW_S, max_keys: int = MAX_KEYS) -> None:
        self.store, self.window_s, self.max_keys = store, window_s, max_keys
        self.local = MemorySeen(window_s, max_keys)
        self._batch: list[tuple[list[str], asyncio.Future[bool]]] = []
        self._flushes: set[asyncio.Task[None]] = set()

    async def claim(self, keys: Sequence[str]) -> bool:
        local = await self.local.claim(keys)   # (this replica's own copies are refused without a query)
        if not local:
            return False
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bool] = loop.create_future()
        self._batch.append((list(keys), answer))
        if len(self._batch) == 1:
            loop.call_soon(self._flush)   # after the rest of this turn's callbacks have claimed too
        return await answer

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        task = asyncio.get_running_loop().create_task(self._claim_all(batch), name="eagle-seen-claims")
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _claim_all(self, batch: list[tuple[list[str], asyncio.Future[bool]]]) -> None:
        window_s, max_keys = self.window_s, self.max_keys

        def claim_each(store: ServiceState) -> list[bool | EagleError]:
            out: list[bool | EagleError] = []
            for keys, _ in batch:
                try:
                    out.append(store.claim_requests(keys, window_s, max_keys))
                except EagleError as e:
                    out.append(e)
            return out

        try:
            results: list[bool | EagleError] = await self.store.call(claim_each)
        except EagleError as e:
            results = [e] * len(batch)
        except BaseException as e:   # cancelled with the service, or a bug: no claim waits forever
            for _, answer in batch:
                if answer.done():
                    continue
                if isinstance(e, Exception):
                    answer.set_exception(e)
                else:
                    answer.cancel()
            raise
        for (_, answer), result in zip(batch, results):
            if isinstance(result, EagleError):
                log.warning("the audit store could not check a Slack request for replays (%s): "
                            "checked on this replica only", result)
                result = True
            if not answer.done():
                answer.set_result(result)


def request_keys(raw_body: str, body: dict[str, Any]) -> list[str]:
    """The identity of one request: its body's hash (trigger_id included). Socket Mode has no
    raw body: its payload is hashed canonically, so a re-delivery under a new envelope id is
    the same request."""
    if "ssl_check" in body and "command" not in body:
        return []   # Slack's periodic certificate probe: identical each time, and it starts nothing
    raw = raw_body or json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return ["body:" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()]
