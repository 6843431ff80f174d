"""After the ack: an admitted command through the router, and its reply where it belongs.

The slash command and the "Apply best" button both end here, so a run started either way
reports in the same thread, with the same approvals.
"""
from __future__ import annotations

import asyncio
import functools
import logging

from eaglebot.engine.runner import Observer, RunOutcome, RunRequest
from eaglebot.frontends import oplog
from eaglebot.frontends.chat import router
from eaglebot.frontends.chat.caller import Caller
from eaglebot.frontends.chat.reply import CancelRequested, Reply
from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack.approvals import SlackApprover
from eaglebot.frontends.slack.client import NOT_IN_CHANNEL
from eaglebot.frontends.slack.context import SlackContext
from eaglebot.frontends.slack.reply_blocks import reply_blocks
from eaglebot.frontends.slack.run_thread import SlackRunObserver

log = logging.getLogger("eaglebot.slack")


class SlackFrontend:
    """What the router needs for a run started from Slack: its thread and its approvers."""

    def __init__(self, ctx: SlackContext, channel: str | None, user: str, response_url: str | None):
        self.ctx, self.channel, self.user, self.response_url = ctx, channel, user, response_url

    def observer(self, req: RunRequest) -> Observer:
        return SlackRunObserver(self.ctx, self.channel, self.user, self.response_url)

    def approver(self, req: RunRequest, observer: Observer | None) -> SlackApprover:
        return SlackApprover(self.ctx, observer if isinstance(observer, SlackRunObserver) else None, self.channel)


def slack_caller(ctx: SlackContext, user: str, channel: str | None, response_url: str | None) -> Caller:
    """A Slack user, checked against `access`, whose runs report in `channel`."""
    return Caller(user, channel=channel, origin="slack", frontend=SlackFrontend(ctx, channel, user, response_url))


async def run_admitted(ctx: SlackContext, admitted: router.Admitted, response_url: str | None) -> None:
    """Everything after the ack: the router, then the reply where it belongs."""
    channel = admitted.caller.channel
    cmd = admitted.cmd
    with oplog.command(admitted.caller.user, ctx.redact(cmd.text or cmd.name)) as line:
        reply = await router.execute(ctx.services, admitted)
    _log_command(ctx, line, cmd.name, reply)
    if reply.task is not None:
        if reply.run_id is not None:
            ctx.runs[reply.run_id] = reply.task
            reply.task.add_done_callback(functools.partial(_run_done, ctx, reply.run_id))
        if not channel:
            await ctx.respond(response_url, reply.text)
        return
    if reply.file is not None and channel:
        parent = await ctx.post(channel, reply.text, reply_blocks(reply))
        if parent.ts:
            up = await ctx.upload(channel, parent.ts, reply.file, reply.file.name)
            if up.error:
                await ctx.respond(response_url, f"could not upload the plot: {up.error}")
        elif parent.error in NOT_IN_CHANNEL:
            await ctx.respond(response_url, ctx.invite_hint(channel))
        return
    text = bk.slack_syntax(reply.text) if reply.is_error else reply.text   # advice in Slack's words
    await ctx.respond(response_url, text, reply_blocks(reply), public=reply.public and not reply.is_error)


def _log_command(ctx: SlackContext, line: oplog.CommandLine, word: str, reply: Reply) -> None:
    """The command's one log line, unless a run it started already wrote it (a reload writes
    its own line)."""
    if word == "reload":
        return
    if reply.is_error and reply.exit_code == 2:
        line.reject(reply.text.splitlines()[0][:300] if reply.text else "refused")
        return
    if reply.run_id is not None and reply.request is not None and reply.task is not None:
        line.defer(reply.task)   # one line, with the outcome, when the run ends
        return
    if reply.is_error:
        line.emit(outcome="error", error=reply.text.splitlines()[0][:300] if reply.text else None)
        return
    body = reply.body
    outcome = f"cancel requested for run #{body.run_id}" if isinstance(body, CancelRequested) else "ok"
    line.emit(run=reply.run_id, outcome=outcome)


def _run_done(ctx: SlackContext, run_id: int, task: asyncio.Task[RunOutcome]) -> None:
    ctx.runs.pop(run_id, None)
    if not task.cancelled() and task.exception() is not None:
        log.error("run #%s crashed", run_id, exc_info=task.exception())
