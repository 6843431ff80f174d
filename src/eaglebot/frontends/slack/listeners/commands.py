"""The `/eagle` slash command: parsed and admitted (both pure) before the ack, so a mistake
or a refusal is the ack's own text; everything that touches the DB or a host runs after it,
in a background task."""
from __future__ import annotations

import re

from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext

from eaglebot.frontends import oplog
from eaglebot.frontends.chat.access import audit_refusal
from eaglebot.frontends.chat.grammar import parse
from eaglebot.frontends.chat.router import admit
from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack.context import slack_context
from eaglebot.frontends.slack.execute import run_admitted, slack_caller
from eaglebot.frontends.slack.payload import SlashCommandBody


async def eagle_command(ack: AsyncAck, body: SlashCommandBody, context: AsyncBoltContext) -> None:
    ctx = slack_context(context)
    cmd = parse(body.get("text") or "")
    user = body.get("user_id") or ""
    if cmd.error:
        await ack(text=f":warning: {bk.escape(ctx.redact(cmd.error))}")
        oplog.rejected(user, ctx.redact(cmd.text), ctx.redact(cmd.error))
        return
    response_url = body.get("response_url")
    admitted = admit(ctx.settings, cmd, slack_caller(ctx, user, body.get("channel_id"), response_url))
    if isinstance(admitted, str):
        await ack(text=f":no_entry: {bk.escape(admitted)}")
        oplog.rejected(user, ctx.redact(cmd.text or cmd.name), admitted)
        ctx.after_ack(audit_refusal(ctx.services, user, cmd, admitted), name="eagle-refusal")
        return
    await ack()
    ctx.after_ack(run_admitted(ctx, admitted, response_url), name="eagle-command")


def register(app: AsyncApp) -> None:
    app.command(re.compile(r"^/eagle"))(eagle_command)
