"""The audit store's async door (store/door.py): `await store.call(fn)` runs `fn(store)` on
the store's one writer thread, so SQLite (or psycopg) never blocks the event loop.

One thread: calls run one at a time, in the order they were made, so the audit chain sees
writes in that order. A call is the caller's synchronous slice, written once, in its mixin;
there is no awaited copy of each method to keep in step.
"""
from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeVar

from eaglebot.store.db import Store
from eaglebot.store.factory import open_store

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import StoreProtocol

T = TypeVar("T")


class AsyncStore:
    """A `Store` reached from the event loop: each call on its one worker thread."""

    def __init__(self, store: Store, pool: ThreadPoolExecutor | None = None):
        self.sync = store   # the store itself: for what already runs on its thread, and tests
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

    async def call(self, fn: Callable[[Store], T]) -> T:
        """Run `fn(store)` on the writer thread (store/door.py: the contract). A cancelled
        awaiter stops waiting only: the executor runs a started call to its end and drops
        one still queued."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, self.sync)
        except self.sync._db_errors as e:  # a read outside a write transaction; writes raise StoreError already
            raise self.sync._fail(e) from None

    async def aclose(self) -> None:
        """Close the store, then its writer thread."""
        await self.call(lambda s: s.close())
        self._pool.shutdown(wait=False)


def _open(path: str | Path, key_file: str | Path | None) -> Store:
    store = open_store(path, key_file=key_file)
    store.db_id  # read (and kept) here, on the writer thread: never first from the event loop
    return store


if TYPE_CHECKING:
    def _faces(store: Store, door: AsyncStore) -> tuple[StoreProtocol, Door[StoreProtocol]]:
        """Never called: mypy proves here that the store and its door implement their contracts."""
        return store, door
