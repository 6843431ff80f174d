"""The audit store's async face: every `StoreProtocol` method, run on one writer thread.

Each method is written out (no `__getattr__` forwarding) so a reader and mypy can follow a
call from a front end to the SQL; `scripts/gen_store_aio.py` writes them from the contract
(the store's mixins) into store/aio_methods.py, and `tests/test_store_async.py` checks that
they are current.
"""
from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ParamSpec, TypeVar

from eaglebot.store.aio_methods import AsyncMethods
from eaglebot.store.db import Store
from eaglebot.store.factory import open_store

if TYPE_CHECKING:
    from eaglebot.store.protocol import StoreProtocol
    from eaglebot.store.protocol_async import AsyncStoreProtocol

P = ParamSpec("P")
T = TypeVar("T")


class AsyncStore(AsyncMethods):
    """Every Store call on one worker thread: SQLite never blocks the event loop."""

    def __init__(self, store: Store, pool: ThreadPoolExecutor | None = None):
        self.sync = store
        self._pool = pool or ThreadPoolExecutor(max_workers=1, thread_name_prefix="eagle-store")

    @classmethod
    async def open(cls, path: str | Path, key_file: str | Path | None = None) -> AsyncStore:
        """Open (and migrate) the store on its writer thread, which then serves every call."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eagle-store")
        store = await asyncio.get_running_loop().run_in_executor(pool, functools.partial(_open, path, key_file))
        return cls(store, pool)

    @property
    def db_id(self) -> str:
        """The audit DB's random id (read on the writer thread by `open`)."""
        return self.sync.db_id

    async def _do(self, fn: Callable[P, T], *args: P.args, **kw: P.kwargs) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args, **kw))
        except self.sync._db_errors as e:  # a read outside a write transaction; writes raise StoreError already
            raise self.sync._fail(e) from None

    async def call(self, fn: Callable[[Store], T]) -> T:
        """Run `fn(store)` on the writer thread (store/door.py: the contract)."""
        return await self._do(fn, self.sync)

    async def aclose(self) -> None:
        """Close the store, then its writer thread."""
        await self._do(self.sync.close)
        self._pool.shutdown(wait=False)


def _open(path: str | Path, key_file: str | Path | None) -> Store:
    store = open_store(path, key_file=key_file)
    store.db_id  # read (and kept) here, on the writer thread: never first from the event loop
    return store


if TYPE_CHECKING:
    def _faces(store: Store, aio: AsyncStore) -> tuple[StoreProtocol, AsyncStoreProtocol]:
        """Never called: mypy proves here that each face implements its contract."""
        return store, aio
