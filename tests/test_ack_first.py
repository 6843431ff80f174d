"""Acks first (slack/ack_gate.py) and the replay claims batched per loop turn (slack/replay.py),
on a real SQLite store: what keeps a burst of slash commands' acks ahead of their replies."""
from __future__ import annotations

import asyncio

import pytest

from eaglebot.frontends.slack.ack_gate import AckGate
from eaglebot.frontends.slack.replay import StoreSeen
from eaglebot.store import AsyncStore


async def test_work_after_an_ack_waits_for_the_requests_still_in_flight():
    gate, order = AckGate(), []

    async def reply(name: str) -> str:
        order.append(name)
        return name

    with gate.request():
        task = asyncio.ensure_future(gate.after_acks(reply("reply"), max_wait_s=600))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not task.done() and gate.in_flight == 1
        order.append("ack")
    assert await task == "reply"
    assert order == ["ack", "reply"] and gate.in_flight == 0
    # nothing in flight: at once
    assert await gate.after_acks(reply("now")) == "now"


async def test_a_steady_stream_never_starves_the_replies():
    gate = AckGate()
    done = asyncio.Event()

    async def reply() -> None:
        done.set()

    with gate.request():   # a request that never ends: the reply still goes, after max_wait_s
        task = asyncio.ensure_future(gate.after_acks(reply(), max_wait_s=0.05))
        await asyncio.wait_for(done.wait(), 60)
        await task
        assert gate.in_flight == 1


async def test_a_reply_cancelled_while_waiting_never_starts():
    gate, started = AckGate(), []

    async def reply() -> None:
        started.append(1)

    with gate.request():
        task = asyncio.ensure_future(gate.after_acks(reply(), max_wait_s=600))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert started == []


async def test_concurrent_claims_share_thread_hops_and_each_request_is_answered_once(tmp_path):
    store = await AsyncStore.open(tmp_path / "a.db")
    calls = []
    real_call = store.call

    async def counted(fn):
        calls.append(fn)
        return await real_call(fn)

    store.call = counted   # type: ignore[method-assign]
    seen = StoreSeen(store)
    try:
        keys = [[f"body:{i}"] for i in range(40)] + [["body:7"], ["body:39"]]   # two copies among them
        answers = await asyncio.gather(*(seen.claim(k) for k in keys))
        assert answers[:40] == [True] * 40 and answers[40:] == [False, False]
        assert 1 <= len(calls) < 10   # 40 claims in a handful of hops, not 40
        # another replica on the same store (its own memory empty) refuses the copies too
        other = StoreSeen(store)
        assert await asyncio.gather(other.claim(["body:3"]), other.claim(["body:new"])) == [False, True]
        rows = store.sync.db.execute("select count(*) from seen_requests").fetchone()[0]
        assert rows == 41
    finally:
        await store.aclose()
