"""The audit store's two faces: `AsyncStore` has every public `Store` method, with the same
signature, written out (no `__getattr__`), and each runs on the store's one writer thread."""
from __future__ import annotations

import inspect
import sys
import threading
from pathlib import Path

from eaglebot.store import AsyncStore, Store
from eaglebot.store.rows import NewRun

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import gen_store_aio  # noqa: E402


def test_every_face_of_the_store_is_the_generated_copy_of_its_mixins():
    for name, make in gen_store_aio.FILES.items():
        text = Path(inspect.getfile(AsyncStore)).with_name(name).read_text()
        assert make() == text, f"store/{name} is stale: run scripts/gen_store_aio.py after changing a store mixin"


def test_no_store_method_is_written_by_hand_twice():
    """A signature and its docstring live in the mixin alone: the faces are generated, and no
    other module under store/ defines a public method of the same name (PostgreSQL's `PgStore`
    overrides a few with its own SQL: subclasses of the mixins, which mypy holds to their
    signatures, so they restate nothing a reader must keep in step)."""
    store = Path(inspect.getfile(AsyncStore)).parent
    generated = set(gen_store_aio.FILES)
    for name in gen_store_aio.public_methods():
        owners = [p.name for p in store.glob("*.py") if p.name not in generated
                  and not p.name.startswith("pg_") and f"    def {name}(" in p.read_text()]
        assert len(owners) == 1, (name, owners)


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
        run_id = await store.call(lambda s: s.create_run(NewRun(playbook="p", hosts=["h"], inputs={}, variables={}, actor="a",
                                        origin="cli")))
        assert (await store.call(lambda s: s.get_run(run_id)))["hosts"] == ["h"]
        assert len(seen) == 1 and threading.get_ident() not in seen
    finally:
        await store.aclose()
