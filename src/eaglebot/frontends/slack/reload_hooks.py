"""What a reload means for the Slack connection: a new bot token or signing secret from the
environment file. The token is checked with auth.test before the reload is done (a token
Slack refuses refuses the reload), then set on the bot's client, which every part of the bot
holds (the thread observers, the coalescer, the health alerts, Bolt's authorize), so the
next call of each uses it."""
from __future__ import annotations

import logging
import os

from slack_sdk.errors import SlackApiError

from eaglebot.frontends.slack.app import SlackBot
from eaglebot.frontends.slack.client import make_client, slack_error

log = logging.getLogger("eaglebot.slack")


class SlackReload:
    def __init__(self, bot: SlackBot):
        self.bot = bot

    async def check(self, changed: set[str]) -> str | None:
        """Before the swap: a new SLACK_BOT_TOKEN (or SLACK_API_URL) must pass auth.test; None when fine."""
        if "SLACK_SIGNING_SECRET" in changed:
            secret = os.environ.get("SLACK_SIGNING_SECRET", "").strip()
            if not secret:
                return "SLACK_SIGNING_SECRET is empty after the reload"
            self.bot.app.eagle_signing_secret = secret
        if "SLACK_APP_TOKEN" in changed:
            log.warning("SLACK_APP_TOKEN changed: the Socket Mode connection uses it from the next restart")
        if not {"SLACK_BOT_TOKEN", "SLACK_API_URL"} & changed:
            return None
        token = os.environ.get("SLACK_BOT_TOKEN", "").strip()
        if not token:
            return "SLACK_BOT_TOKEN is empty after the reload"
        client = self.bot.ctx.client
        probe = make_client(self.bot.ctx.settings, token, timeout_s=15)
        try:
            answer = (await probe.auth_test()).data
        except SlackApiError as e:
            return f"Slack refused the new SLACK_BOT_TOKEN: {slack_error(e)}"
        except Exception as e:
            return f"cannot reach Slack's Web API with the new settings ({type(e).__name__})"
        client.token, client.base_url = token, probe.base_url
        self.bot.identity["identity"] = answer if isinstance(answer, dict) else None
        return None
