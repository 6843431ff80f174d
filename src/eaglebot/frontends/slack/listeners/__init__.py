"""The Slack app's listeners, one module per surface, as Bolt's starter template lays them out.

Each module holds module-level listener functions and a `register(app)`; `register_listeners`
is the one place the app learns them. The listeners capture nothing: the bot's context comes
from the request (`slack_context(context)`, put there by `context.InjectContext`).
"""
from __future__ import annotations

from slack_bolt.async_app import AsyncApp

from eaglebot.frontends.slack.listeners import actions, commands


def register_listeners(app: AsyncApp) -> None:
    commands.register(app)
    actions.register(app)
