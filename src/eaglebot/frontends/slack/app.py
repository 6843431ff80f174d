"""The Slack front end: a Bolt AsyncApp built by `build_app(services, ...)`.

It only parses, authorizes, renders and posts. Every run goes through `Engine.start` (via
the chat router), like the CLI. `eagle serve` (frontends/service/serve.py) builds it, connects it to
Slack and starts the scheduler next to it. This module wires the parts: the guarded app
(http.py), the bot's context handed to every listener by one middleware (context.py), and
the listeners, one module per surface (listeners/). Slack is a view of the audit store: a
Slack failure is logged, never raised into a run.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable

from slack_bolt.authorization import AuthorizeResult
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from eaglebot.engine.output import printable
from eaglebot.frontends.services import Services
from eaglebot.frontends.slack.client import make_client
from eaglebot.frontends.slack.context import InjectContext, SlackContext
from eaglebot.frontends.slack.http import GuardedApp
from eaglebot.frontends.slack.listeners import register_listeners
from eaglebot.frontends.slack.replay import StoreSeen
from eaglebot.frontends.slack.schedule_hooks import SlackScheduleHooks


@dataclass
class SlackBot:
    app: GuardedApp
    ctx: SlackContext
    identity: dict[str, Any] = field(default_factory=dict)   # {"identity": auth.test's answer}
    hooks: SlackScheduleHooks = field(init=False)

    def __post_init__(self) -> None:
        self.hooks = SlackScheduleHooks(self.ctx)

    async def aclose(self, grace_s: float = 30.0) -> None:
        """Cancel the runs this bot started (their always-steps run), then stop posting."""
        runs = {rid: t for rid, t in self.ctx.runs.items() if not t.done()}
        for rid in runs:
            self.ctx.services.cancel(rid)
        if runs:
            await asyncio.wait(runs.values(), timeout=grace_s)
        if self.ctx.tasks:
            await asyncio.wait(list(self.ctx.tasks), timeout=5)
        await self.ctx.aclose()


def build_app(services: Services, *, client: AsyncWebClient | None = None, token: str | None = None,
              signing_secret: str | None = None, identity: dict[str, Any] | None = None,
              webhooks: Callable[[str], AsyncWebhookClient] | None = None) -> SlackBot:
    """A Bolt AsyncApp for `services`. Tokens come from the caller (the environment), never the config.
    `webhooks`: the client for a response_url (default: over HTTP)."""
    client = client or make_client(services.settings, token)
    ctx = SlackContext(services, client, webhooks)
    cache: dict[str, Any] = {"identity": identity}

    async def authorize(enterprise_id: str | None, team_id: str | None, logger: logging.Logger) -> AuthorizeResult:
        # One auth.test for the life of the app (`eagle serve` does it at start), not per request.
        if cache["identity"] is None:
            cache["identity"] = (await client.auth_test()).data
        return AuthorizeResult.from_auth_test_response(auth_test_response=cache["identity"],
                                                       bot_token=client.token)

    # Bolt's own client carries no token: each request gets the bot token from `authorize`.
    bolt_client = AsyncWebClient(base_url=client.base_url, timeout=client.timeout,
                                 retry_handlers=list(client.retry_handlers or []))
    app = GuardedApp(
        client=bolt_client,
        # Without a secret (Socket Mode) no HTTP request can be signed correctly.
        signing_secret=signing_secret or secrets.token_hex(32),
        authorize=authorize,
        reject=functools.partial(_record_rejection, ctx),
        seen=StoreSeen(services.store),
        acks=ctx.acks,
    )
    app.use(InjectContext(ctx))
    register_listeners(app)
    return SlackBot(app, ctx, cache)


def _record_rejection(ctx: SlackContext, actor: str, what: str, why: str) -> None:
    """A refused request's `rejected` event, written after the answer, off the request's path:
    the ack never waits on the DB. (printable: a Socket Mode payload's JSON may carry a lone
    surrogate, which SQLite refuses.)"""
    services = ctx.services
    who, said, reason = printable(actor) or "unknown", services.redactor.text(printable(what)), printable(why)
    ctx.after_ack(services.store.call(lambda s: s.add_rejection("rejected", who, said, reason)), name="eagle-rejected")
