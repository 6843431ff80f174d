"""Acks first: the work a listener spawns after its ack waits until no HTTP request is still
on its way to an ack (or `MAX_WAIT_S` has passed), so a burst of commands is answered within
Slack's 3 s before any of them starts its reply.

Why: every request and every reply share one event loop, and a `/eagle help` costs it ~3 ms
in all (tests/bench/bench_ack.py), part before the ack (the body, the signature, Bolt's
dispatch) and part after (composing the answer, its response_url POST); with 50 commands in
flight the answers of the first interleaved with the acks of the last. Slack allows an ack
3 s and a response_url answer 30 minutes, so the answers can wait for the acks. A steady stream never starves them: each waits at most
MAX_WAIT_S. Socket Mode's acks do not go through the HTTP face: its gate stays open.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")

MAX_WAIT_S = 1.0


class AckGate:
    """Counts requests between arrival and answer; `after_acks` runs a coroutine once none is."""

    def __init__(self) -> None:
        self._in_flight = 0
        self._quiet = asyncio.Event()
        self._quiet.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @contextlib.contextmanager
    def request(self) -> Any:
        """Around one HTTP request's handling, up to its answer."""
        self._in_flight += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._quiet.set()

    async def after_acks(self, coro: Coroutine[Any, Any, _T], max_wait_s: float = MAX_WAIT_S) -> _T:
        try:
            if self._in_flight:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._quiet.wait(), max_wait_s)
        except BaseException:
            coro.close()   # cancelled while waiting: the work never started, and says nothing
            raise
        return await coro
