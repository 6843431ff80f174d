"""The audit store's two faces: `AsyncStore` has every public `Store` method, with the same
signature, written out (no `__getattr__`), and each runs on the store's one writer thread."""
from __future__ import annotations

import inspect
import sys
import threading
from pathlib import Path

from eaglebot.store import AsyncStore, Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import gen_store_aio  # noqa: E402


def test_async_face_is_the_generated_copy_of_the_sync_face():
    text = Path(inspect.getfile(AsyncStore)).with_name("aio_methods.py").read_text()
    assert gen_store_aio.generated() == text, "run scripts/gen_store_aio.py after changing StoreProtocol"
    protocol = Path(inspect.getfile(AsyncStore)).with_name("protocol_async.py").read_text()
    assert protocol == gen_store_aio.protocol_source(), "run scripts/gen_store_aio.py after changing StoreProtocol"


def test_the_contract_lists_every_public_method_of_the_sync_store():
    public = {n for n in dir(Store) if not n.startswith("_") and callable(getattr(Store, n))}
    assert public == set(gen_store_aio.public_methods()) | gen_store_aio.SKIP


def test_every_store_method_has_an_async_twin_with_the_same_signature():
    assert not hasattr(AsyncStore, "__getattr__")
    for name in gen_store_aio.public_methods():
        sync, aio = inspect.signature(getattr(Store, name)), inspect.signature(getattr(AsyncStore, name))
        assert inspect.iscoroutinefunction(getattr(AsyncStore, name)), name
        assert list(sync.parameters) == list(aio.parameters), name
        assert [p.kind for p in sync.parameters.values()] == [p.kind for p in aio.parameters.values()], name


async def test_async_calls_run_on_one_writer_thread_off_the_event_loop(tmp_path):
    store = await AsyncStore.open(tmp_path / "eagle.db")
    try:
        seen = {await store.call(lambda s: threading.get_ident()) for _ in range(5)}
        run_id = await store.create_run(playbook="p", hosts=["h"], inputs={}, variables={}, actor="a",
                                        origin="cli")
        assert (await store.get_run(run_id))["hosts"] == ["h"]
        assert len(seen) == 1 and threading.get_ident() not in seen
    finally:
        await store.aclose()
