"""A step's streamed output: redacted line by line, kept as a tail for the live views, and
written to the audit store every `FLUSH_INTERVAL_S` by a background task.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from eaglebot.engine.redact import Redactor
from eaglebot.errors import EagleError

log = logging.getLogger("eaglebot.engine")

FLUSH_INTERVAL_S = 0.5
TAIL_LINES = 200


class OutputBuffer:
    """Lines a skill logs, on their way to the store and to the observer.

    `flush` removes lines from the buffer only after the store took them, so a flush that
    fails or is cancelled mid-write loses nothing: the next flush (or the final one) writes
    them again.
    """

    def __init__(self, redactor: Redactor, write: Callable[[str], Awaitable[None]],
                 echo: Callable[[str], None]):
        self._redactor = redactor
        self._write = write
        self._echo = echo
        self._pending: list[str] = []
        self._tail: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def line(self, line: str) -> None:
        line = self._redactor.text(line.rstrip("\n"))
        self._pending.append(line + "\n")
        self._tail.append(line)
        if len(self._tail) > TAIL_LINES:
            del self._tail[:TAIL_LINES // 2]
        try:
            self._echo(line)
        except Exception:  # a live view never fails the step
            log.exception("observer failed")

    def tail(self, n: int = 30) -> str:
        return "\n".join(self._tail[-n:])

    async def flush(self) -> None:
        # Never two at once: the flusher alone calls it until close() has waited for it to end.
        if not self._pending:
            return
        n = len(self._pending)
        await self._write("".join(self._pending[:n]))
        del self._pending[:n]

    async def _flusher(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), FLUSH_INTERVAL_S)
            except asyncio.TimeoutError:
                pass
            try:
                await self.flush()
            except Exception as e:  # the final flush tries again; the step goes on
                log.warning("streaming step output to the store failed: %s", e,
                            exc_info=not isinstance(e, EagleError))

    def start(self) -> None:
        self._task = asyncio.create_task(self._flusher())

    async def close(self) -> None:
        """Stop the periodic flush and write what is left, even when the step is being
        cancelled: a write already handed to the store's thread cannot be taken back, so
        the flusher is asked to stop rather than cancelled in the middle of one."""
        self._stop.set()
        await asyncio.shield(self._finish())

    async def _finish(self) -> None:
        if self._task is not None:
            await self._task
        await self.flush()
