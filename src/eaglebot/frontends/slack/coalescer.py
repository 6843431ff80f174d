"""Every chat.update of the bot, coalesced and paced under Slack's rate limit."""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from eaglebot.frontends.slack.client import slack_error

log = logging.getLogger("eaglebot.slack")

UPDATES_PER_MINUTE = 45          # chat.update is Tier 3 (~50/min per workspace): stay under it


class UpdateCoalescer:
    """Every chat.update of the bot goes through here.

    Only the newest content of a message is kept; a message is edited at most once per
    `per_message_s`, and the whole bot at most `per_minute` times a minute, across runs.
    """

    def __init__(self, client: AsyncWebClient, per_message_s: float = 1.0, per_minute: int = UPDATES_PER_MINUTE):
        self.client = client
        self.per_message_s = per_message_s
        self.per_minute = per_minute
        self._pending: dict[tuple[str, str], tuple[str, list[dict[str, Any]]]] = {}
        self._last: dict[tuple[str, str], float] = {}
        self._sent: deque[float] = deque()
        self._waiters: dict[tuple[str, str], list[asyncio.Future[None]]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def posted(self, channel: str, ts: str) -> None:
        """A message was just posted: its first edit waits a full interval."""
        self._last[(channel, ts)] = time.monotonic()

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        self._pending[(channel, ts)] = (text, blocks)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="eagle-slack-updates")
        self._wake.set()

    async def flush(self, channel: str, ts: str, timeout: float = 30.0) -> None:
        key = (channel, ts)
        if key not in self._pending:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            log.warning("edit of %s not sent within %ss", key, timeout)

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            if not self._pending:
                await self._wake.wait()
                continue
            now = time.monotonic()
            while self._sent and now - self._sent[0] >= 60:
                self._sent.popleft()
            if len(self._sent) >= self.per_minute:
                await self._sleep(60 - (now - self._sent[0]))
                continue
            due = {k: self._last.get(k, float("-inf")) for k in self._pending}
            key = min(due, key=due.__getitem__)
            wait = due[key] + self.per_message_s - now
            if wait > 0:
                await self._sleep(wait)
                continue
            text, blocks = self._pending.pop(key)
            self._last[key] = now
            self._sent.append(now)
            try:
                await self.client.chat_update(channel=key[0], ts=key[1], text=text, blocks=blocks)
            except Exception as e:  # Slack down: the audit store has it all
                log.warning("chat.update %s failed: %s", key, slack_error(e))
            if key not in self._pending:
                for f in self._waiters.pop(key, []):
                    if not f.done():
                        f.set_result(None)
            if len(self._last) > 2000:
                cutoff = now - 3600
                self._last = {k: v for k, v in self._last.items() if v > cutoff or k in self._pending}

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), max(0.01, seconds))
        except asyncio.TimeoutError:
            pass

    async def aclose(self, timeout: float = 5.0) -> None:
        for key in list(self._pending):
            await self.flush(*key, timeout=timeout)
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
