"""`/eagle reload` on one replica reaches the others (frontends/service/reload_peers.py): two replicas'
followers over one real SQLite store, each with its own reload, the request through the store."""
from __future__ import annotations

import asyncio

from eaglebot.frontends.service.reload_peers import KIND, PeerReloads
from eaglebot.store import AsyncStore


class Replica:
    def __init__(self, store, name: str, ok: bool = True):
        self.name, self.ok, self.calls = name, ok, []
        self.peers = PeerReloads(store, self.reload, every_s=0.05)

    async def reload(self, who: str) -> tuple[bool, str]:
        self.calls.append(who)
        return self.ok, "reloaded: hosts +gpu-09" if self.ok else "reload refused: eagle.yaml:3: bad"


async def _until(cond, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.02)


async def test_a_slash_reload_on_one_replica_reloads_the_others_once_and_not_itself_twice(tmp_path):
    store = await AsyncStore.open(tmp_path / "eagle.db")
    try:
        await store.call(lambda s: s.add_event(None, KIND, "UOLD"))           # a request from before these replicas started
        a, b = Replica(store, "a"), Replica(store, "b")
        for r in (a, b):
            await r.peers.prime()
        stop = asyncio.Event()
        loops = [asyncio.create_task(r.peers.run(stop)) for r in (a, b)]
        await asyncio.sleep(0.2)
        assert a.calls == [] and b.calls == []              # the old request is not replayed
        done, text = await a.peers.from_slack("UBOSS")
        assert done and "any other replica reloads its own eagle.yaml" in text
        await _until(lambda: b.calls)
        await asyncio.sleep(0.2)                            # a few more beats: nothing more happens
        stop.set()
        await asyncio.gather(*loops)
        assert a.calls == ["UBOSS"]
        assert b.calls == ["UBOSS (via another replica)"]
        assert [e["message"] for e in await store.call(lambda s: s.events(KIND))] == ["UBOSS", "UOLD"]
    finally:
        await store.aclose()


async def test_a_refused_reload_asks_no_other_replica(tmp_path):
    store = await AsyncStore.open(tmp_path / "eagle.db")
    try:
        a, b = Replica(store, "a", ok=False), Replica(store, "b")
        await a.peers.prime()
        await b.peers.prime()
        done, text = await a.peers.from_slack("UBOSS")
        assert not done and text.startswith("reload refused")
        assert await b.peers.check() is False and b.calls == []
        assert await store.call(lambda s: s.events(KIND)) == []
    finally:
        await store.aclose()
