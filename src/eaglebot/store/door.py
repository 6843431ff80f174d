"""The one async door to the audit store: `await door.call(fn)` runs `fn(store)` on the
store's writer thread and hands back what it returns (Datasette's `execute_fn`).

A caller is typed `Door[Slice]` with the synchronous slice of store/protocol.py it uses
(`Door[RunLog]`, `Door[HistoryStore]`, ...): `fn` gets that slice, so mypy holds what it calls
to the slice, and each call is written once, in its mixin. Calls that belong together (a check
that reads three tables) go in one `fn`: one thread hop, and no write of another task between
them. `eaglebot.store.aio.AsyncStore` is the door of both backends.
"""
from __future__ import annotations

from typing import Callable, Protocol, TypeVar

S_co = TypeVar("S_co", covariant=True)
T = TypeVar("T")


class Door(Protocol[S_co]):
    """The store `S_co`, reached from the event loop."""

    @property
    def db_id(self) -> str:
        """The audit DB's random id (the tag of a step's processes), read once when it opened."""
        ...

    async def call(self, fn: Callable[[S_co], T]) -> T:
        """`fn(store)` on the writer thread, in the order the calls were made; its result, or
        its exception as raised (a driver's error as `StoreError`). A cancelled awaiter stops
        waiting only: a call already running runs to its end (its transaction commits or rolls
        back whole), one still queued never starts."""
        ...
