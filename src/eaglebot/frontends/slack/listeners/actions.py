"""Buttons: Approve / Deny on a `confirm` step, a sweep's "Apply best", and a health alert's
Drain / Run health (each an `/eagle` text run as typed) and Silence 24 h.

Both ack at once and do their work in a background task: a click is decided against the
store (who started the run), which the ack must not wait on.
"""
from __future__ import annotations

import re

from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext

from eaglebot.frontends import oplog
from eaglebot.frontends.chat.access import allowed, audit_refusal
from eaglebot.frontends.chat.grammar import parse
from eaglebot.frontends.chat.router import admit
from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack.approvals import decide
from eaglebot.frontends.slack.context import slack_context
from eaglebot.frontends.slack.execute import run_admitted, slack_caller
from eaglebot.frontends.slack.health_alerts import HEALTH_RUN_ACTION, HEALTH_SILENCE_ACTION, silence_incident
from eaglebot.frontends.slack.payload import ActionBody, BlockActionsBody
from eaglebot.frontends.slack.tuning import APPLY_BEST_ACTION


async def approval_clicked(ack: AsyncAck, body: BlockActionsBody, action: ActionBody,
                           context: AsyncBoltContext) -> None:
    await ack()
    ctx = slack_context(context)
    ctx.spawn(decide(ctx, body, action), name="eagle-approval")


async def apply_best_clicked(ack: AsyncAck, body: BlockActionsBody, action: ActionBody,
                             context: AsyncBoltContext) -> None:
    """Exactly typing the button's `/eagle` text, in the channel of the button's message."""
    await ack()
    ctx = slack_context(context)
    cmd = parse(str(action.get("value") or ""))
    if not (cmd.name == "run" or (cmd.name == "tune" and cmd.args[:1] == ("apply",))):   # a sweep's, a tuning's
        return
    user = (body.get("user") or {}).get("id") or ""
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")
    response_url = body.get("response_url")
    admitted = admit(ctx.settings, cmd, slack_caller(ctx, user, channel, response_url))
    if isinstance(admitted, str):
        oplog.rejected(user, ctx.redact(cmd.text or cmd.name), admitted)
        ctx.after_ack(audit_refusal(ctx.services, user, cmd, admitted), name="eagle-refusal")
        ctx.after_ack(ctx.respond(response_url, f":no_entry: {bk.escape(admitted)}"), name="eagle-refusal-reply")
        return
    ctx.after_ack(run_admitted(ctx, admitted, response_url), name="eagle-apply-best")


async def silence_clicked(ack: AsyncAck, body: BlockActionsBody, action: ActionBody,
                          context: AsyncBoltContext) -> None:
    await ack()
    ctx = slack_context(context)
    user = (body.get("user") or {}).get("id") or ""
    channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")
    ts = (body.get("message") or {}).get("ts") or (body.get("container") or {}).get("message_ts")

    async def work() -> None:
        answer = await silence_incident(ctx.client, ctx.services.store, allowed(ctx.settings.access.operators, user),
                                        user, str(action.get("value") or ""), channel, ts)
        await ctx.respond(body.get("response_url"), bk.escape(answer))
    ctx.spawn(work(), name="eagle-health-silence")


def register(app: AsyncApp) -> None:
    app.action(re.compile(f"^({bk.APPROVE_ACTION}|{bk.DENY_ACTION})$"))(approval_clicked)
    app.action(re.compile(f"^({APPLY_BEST_ACTION}|{HEALTH_RUN_ACTION}_(drain|health))$"))(apply_best_clicked)
    app.action(re.compile(f"^{HEALTH_SILENCE_ACTION}$"))(silence_clicked)
