"""What the scheduler needs from Slack (`scheduler.Hooks`); `eagle serve` hands it over."""
from __future__ import annotations

import logging
from pathlib import Path

from eaglebot.config import ScheduleConfig
from eaglebot.engine.runner import Observer
from eaglebot.frontends.format import slack_times
from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack.context import SlackContext
from eaglebot.frontends.slack.run_thread import SlackRunObserver

log = logging.getLogger("eaglebot.slack")


class SlackScheduleHooks:
    """Scheduled runs report in their schedule's channel (else the bot's) and end with the
    audit chain's head, an anchor kept outside the DB."""

    def __init__(self, ctx: SlackContext):
        self.ctx = ctx

    def observer(self, schedule_cfg: ScheduleConfig) -> Observer:
        channel = getattr(schedule_cfg, "channel", None) or self.ctx.settings.slack.channel
        return SlackRunObserver(self.ctx, channel, None, None, anchor=True) if channel else Observer()

    async def post(self, channel: str | None, text: str) -> str | None:
        channel = channel or self.ctx.settings.slack.channel
        if not channel:
            log.warning("no Slack channel for: %s", text)
            return None
        # (the notification text too: a raw ISO time there is what a phone shows)
        return (await self.ctx.post(channel, slack_times(text), [bk.section(slack_times(bk.escape(text)))])).ts

    async def post_tune(self, channel: str | None, text: str, run_id: int, offer: str | None) -> str | None:
        """A scheduled tuning run's report, with the Apply button of its proposal (if any)."""
        from eaglebot.frontends.chat.reply import TuneDone
        from eaglebot.frontends.slack.tuning import tune_blocks

        channel = channel or self.ctx.settings.slack.channel
        if not channel:
            log.warning("no Slack channel for: %s", text)
            return None
        return (await self.ctx.post(channel, text, tune_blocks(TuneDone(text, run_id, offer)))).ts

    async def upload(self, channel: str | None, thread_ts: str | None, path: str | Path, title: str) -> None:
        channel = channel or self.ctx.settings.slack.channel
        if channel:
            await self.ctx.upload(channel, thread_ts, path, title)
