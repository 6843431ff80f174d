"""The bot's context in Slack: what one app's listeners, observers and approvers share, and
the middleware that hands it to every listener.

Bolt builds a fresh `AsyncBoltContext` per request; `InjectContext`, registered once by the
app factory, puts the one `SlackContext` in it, and listeners read it back, typed, with
`slack_context(context)` instead of capturing it in closures.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

import aiohttp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from eaglebot.config import Settings
from eaglebot.engine.runner import RunOutcome
from eaglebot.frontends.services import Services
from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack import budget
from eaglebot.frontends.slack.ack_gate import AckGate
from eaglebot.frontends.slack.client import slack_error
from eaglebot.frontends.slack.coalescer import UpdateCoalescer
from eaglebot.sdk import ApprovalRequest

log = logging.getLogger("eaglebot.slack")
_T = TypeVar("_T")
_KEY = "eagle"   # the key of the SlackContext in Bolt's per-request context


@dataclass
class Posted:
    """Where a message went: `ts` None and `error` set when Slack refused it."""
    ts: str | None
    channel: str | None = None
    error: str | None = None


@dataclass
class PendingApproval:
    """An approval whose buttons are out: its key lives only in this process's memory."""
    request: ApprovalRequest
    future: asyncio.Future[tuple[bool, str]]   # (approved, by whom)
    channel: str | None = None
    ts: str | None = None


class SlackContext:
    """What the listeners, observers and approvers of one app share: the services, the
    client and every way the bot speaks in Slack (each never raises)."""

    def __init__(self, services: Services, client: AsyncWebClient,
                 webhooks: Callable[[str], AsyncWebhookClient] | None = None):
        self.services = services
        self.client = client
        # the client that answers a response_url (eaglebot.testing's chat bot records them in memory)
        self._webhook_client = webhooks or self._over_http
        self.coalescer = UpdateCoalescer(client, per_message_s=max(1.0, self.settings.slack.progress_interval_s))
        self.pending: dict[str, PendingApproval] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.runs: dict[int, asyncio.Task[RunOutcome]] = {}
        self._webhooks: aiohttp.ClientSession | None = None
        self.acks = AckGate()   # GuardedApp's HTTP face counts its requests in it

    def _over_http(self, response_url: str) -> AsyncWebhookClient:
        return AsyncWebhookClient(response_url, timeout=15, session=self._webhook_session())

    def _webhook_session(self) -> aiohttp.ClientSession:
        """One HTTP session for every response_url answer: slack_sdk's webhook client makes a
        session (a connection, a TLS handshake to hooks.slack.com) per answer without one, on
        the event loop the next commands' acks wait for (tests/bench/bench_ack.py). No cookies
        kept: each answer stands alone, as with a fresh session."""
        if self._webhooks is None or self._webhooks.closed:
            self._webhooks = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        return self._webhooks

    async def aclose(self) -> None:
        """Stop posting: the pending progress updates are flushed, the response_url session closed."""
        await self.coalescer.aclose()
        if self._webhooks is not None:
            await self._webhooks.close()

    @property
    def settings(self) -> Settings:
        """The current configuration's (a reload replaces it)."""
        return self.services.settings

    def redact(self, text: str) -> str:
        return self.services.redactor.text(text)

    def spawn(self, coro: Coroutine[Any, Any, _T], name: str = "eagle-slack") -> asyncio.Task[_T]:
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def after_ack(self, coro: Coroutine[Any, Any, _T], name: str = "eagle-slack") -> asyncio.Task[_T]:
        """`spawn`, once no other request waits for its ack (slack/ack_gate.py): what a listener
        does after acking."""
        return self.spawn(self.acks.after_acks(coro), name=name)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("slack task %s failed", task.get_name(), exc_info=task.exception())

    async def post(self, channel: str, text: str, blocks: list[dict[str, Any]] | None = None, *,
                   thread_ts: str | None = None, broadcast: bool = False) -> Posted:
        """chat.postMessage with the bot token; never raises."""
        try:
            kw: dict[str, Any] = {"channel": channel, "text": self.redact(text)[:3000]}
            if blocks:
                kw["blocks"] = self.blocks(blocks)
            if thread_ts:
                kw["thread_ts"] = thread_ts
                if broadcast:
                    kw["reply_broadcast"] = True
            resp = await self.client.chat_postMessage(**kw)
            ts, ch = resp.get("ts"), resp.get("channel") or channel
            if ts:
                self.coalescer.posted(ch, ts)
            return Posted(ts, ch)
        except Exception as e:
            err = slack_error(e)
            log.warning("chat.postMessage to %s failed: %s", channel, err)
            return Posted(None, channel, err)

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        self.coalescer.update(channel, ts, self.redact(text)[:3000], self.blocks(blocks))

    def blocks(self, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Within Slack's limits, and no secret in any text (belt and braces: the store is redacted too)."""
        redacted = [{k: self._redacted(k, v) for k, v in block.items()} for block in bk.limit(blocks)]
        return budget.fit(redacted)

    def _redacted(self, key: str, value: object) -> object:
        """`value` with every `text` in it redacted, at any depth."""
        if key == "text" and isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {k: self._redacted(k, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._redacted("", v) for v in value]
        return value

    async def respond(self, response_url: str | None, text: str, blocks: list[dict[str, Any]] | None = None, *,
                      public: bool = False) -> bool:
        """Answer through the command's response_url (valid 30 min, 5 times); never raises."""
        if not response_url:
            return False
        try:
            resp = await self._webhook_client(response_url).send(
                text=self.redact(text)[:3000], blocks=self.blocks(blocks) if blocks else None,
                response_type="in_channel" if public else "ephemeral", replace_original=False)
            if resp.status_code >= 400:
                log.warning("response_url answered %s", resp.status_code)
                return False
            return True
        except Exception as e:
            log.warning("response_url failed: %s", type(e).__name__)
            return False

    async def upload(self, channel: str, thread_ts: str | None, path: str | Path, title: str) -> Posted:
        try:
            resp = await self.client.files_upload_v2(channel=channel, thread_ts=thread_ts, file=str(path),
                                                     filename=Path(path).name, title=title)
            info: dict[str, Any] = resp.get("file", {}) if hasattr(resp, "get") else {}
            return Posted(info.get("id"), channel)
        except Exception as e:
            err = slack_error(e)
            log.warning("files_upload_v2 to %s failed: %s", channel, err)
            return Posted(None, channel, err)

    def invite_hint(self, channel: str | None, run_id: int | None = None) -> str:
        where = f"<#{channel}>" if channel else "this channel"
        after = f" Run #{run_id} keeps running; `/eagle show {run_id}` has everything." if run_id else ""
        return (f":wave: I can't post in {where}: invite me with `/invite @eaglebot` "
                f"(or run the command in a channel I'm in).{after}")


class InjectContext(AsyncMiddleware):
    """The global middleware that gives every request the app's `SlackContext`."""

    def __init__(self, ctx: SlackContext):
        self.ctx = ctx

    async def async_process(self, *, req: AsyncBoltRequest, resp: BoltResponse,
                            next: Callable[[], Awaitable[BoltResponse]]) -> BoltResponse | None:
        req.context[_KEY] = self.ctx
        return await next()


def slack_context(context: AsyncBoltContext) -> SlackContext:
    """The `SlackContext` that `InjectContext` put in a listener's Bolt context."""
    ctx = context.get(_KEY)
    if not isinstance(ctx, SlackContext):
        raise RuntimeError("the SlackContext middleware did not run (register it with app.use)")
    return ctx
