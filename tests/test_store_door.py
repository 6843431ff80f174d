"""The store's one async door (store/door.py): `await store.call(fn)` runs `fn(store)` on the
writer thread, in the order the calls were made; its exception reaches the awaiting caller as
raised; a cancelled awaiter never leaves a call half-done. On both backends."""
from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

from eaglebot.errors import StoreError
from eaglebot.store import AsyncStore


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.e2e)])
async def store(request, tmp_path):
    target = str(tmp_path / "eagle.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = await AsyncStore.open(target)
    yield s
    await s.aclose()


def messages(s) -> list[str]:
    return [e["message"] for e in reversed(s.events("door", limit=1000))]


async def test_calls_run_on_one_thread_off_the_loop_in_the_order_made(store):
    threads = {await store.call(lambda s: threading.get_ident()) for _ in range(3)}
    assert len(threads) == 1 and threading.get_ident() not in threads
    # 50 writes in flight at once: they reach the store in the order they were made
    await asyncio.gather(*(store.call(lambda s, i=i: s.add_event(None, "door", f"e{i}")) for i in range(50)))
    assert await store.call(messages) == [f"e{i}" for i in range(50)]
    assert (await store.call(lambda s: s.audit_verify()))["ok"]      # the chain sealed each one


async def test_an_error_reaches_the_caller_with_its_own_type(store):
    def boom(s):
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        await store.call(boom)
    # a driver's error (here a read outside a write transaction) is the store's one sentence
    with pytest.raises(StoreError):
        await store.call(lambda s: s.db.execute("select * from no_such_table"))
    assert await store.call(lambda s: s.events("door")) == []          # the door still serves


async def test_a_cancelled_awaiter_leaves_no_call_half_done(store):
    running, release = threading.Event(), threading.Event()
    queued_ran = threading.Event()

    def slow_write(s):
        running.set()
        release.wait()
        s.add_event(None, "door", "written after its awaiter left")

    def queued(s):
        queued_ran.set()
        s.add_event(None, "door", "never")

    first = asyncio.create_task(store.call(slow_write))
    await asyncio.to_thread(running.wait)       # on the writer thread now
    second = asyncio.create_task(store.call(queued))
    await asyncio.sleep(0)                      # one loop turn: the second is queued behind it
    first.cancel()
    second.cancel()
    assert [isinstance(r, asyncio.CancelledError)
            for r in await asyncio.gather(first, second, return_exceptions=True)] == [True, True]
    release.set()
    # the next call runs after the running one ended: it ran whole, the queued one never started
    assert await store.call(messages) == ["written after its awaiter left"]
    assert not queued_ran.is_set()
    assert (await store.call(lambda s: s.audit_verify()))["ok"]


async def test_the_db_id_is_read_once_on_the_writer_thread(store):
    assert store.db_id == await store.call(lambda s: s.db_id) and len(store.db_id) >= 8


def test_each_face_names_every_public_method_of_its_mixin():
    """store/protocol*.py restate the mixins' methods for the callers' slices: a method added to
    a mixin is added to its face (mypy holds the signatures: `Store` must satisfy
    `StoreProtocol`, store/aio.py)."""
    from eaglebot.store import protocol, protocol_service
    from eaglebot.store.db import Store

    mixins = [c for c in Store.__mro__[1:] if c.__module__.startswith("eaglebot.store.")]
    for mixin in mixins:
        name = mixin.__name__.removesuffix("Mixin").replace("StoreBase", "Base") + "Face"
        face = getattr(protocol, name, None) or getattr(protocol_service, name)
        public = {n for n, f in vars(mixin).items()
                  if not n.startswith("_") and (inspect.isfunction(f) or isinstance(f, property))}
        assert public == {n for n in vars(face) if not n.startswith("_")}, name
