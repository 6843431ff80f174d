"""The `/eagle` command router: one grammar for Slack, `eagle chat` and `eagle console`.

A command is parsed (`grammar.parse`, pure), admitted (`admit`: the one access check, pure),
then executed (`execute`: the handlers, which touch the DB and hosts). `handle` does all
three for the text front ends; Slack calls `admit` itself, before its ack, so that a refusal
is the ack's text and nothing runs before Slack has its answer. Either way a command is
authorized once: only `admit` makes the `Admitted` that `execute` takes. Every answer is a
`Reply` (`chat/reply.py`), which each front end renders its own way. This package imports no
other front end.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from eaglebot.config import Settings
from eaglebot.errors import EagleError
from eaglebot.frontends.chat.access import audit_refusal, authorize
from eaglebot.frontends.chat.caller import Caller
from eaglebot.frontends.chat.grammar import Command, parse
from eaglebot.frontends.chat.reply import Reply, error_reply
from eaglebot.frontends.chat.words import HANDLERS
from eaglebot.frontends.services import Services

log = logging.getLogger("eaglebot.chat")


@dataclass(frozen=True)
class Admitted:
    """A parsed command its caller may run. Only `admit` makes one, so `execute` needs no
    second check."""
    cmd: Command
    caller: Caller


def admit(settings: Settings, cmd: Command, caller: Caller) -> Admitted | str:
    """The command, admitted, or the sentence that refuses it (naming the eagle.yaml key).
    Pure: Slack calls it before its ack."""
    if caller.check_access:
        why = authorize(settings.access, cmd, caller.user, configured=settings.access_configured)
        if why:
            return why
    return Admitted(cmd, caller)


async def handle(services: Services, cmd: Command | str, caller: Caller) -> Reply:
    """Do what `/eagle <text>` asks. Never raises: errors become an error Reply."""
    if isinstance(cmd, str):
        cmd = parse(cmd)
    if cmd.name == "error":
        return error_reply(services.redactor.text(cmd.error or "invalid command"))
    admitted = admit(services.settings, cmd, caller)
    if isinstance(admitted, str):
        await audit_refusal(services, caller.user, cmd, admitted)
        return error_reply(admitted)
    return await execute(services, admitted)


async def execute(services: Services, admitted: Admitted) -> Reply:
    """Run an admitted command's handler. Never raises: errors become an error Reply."""
    cmd, caller = admitted.cmd, admitted.caller
    try:
        return await HANDLERS[cmd.name](services, cmd, caller)
    except EagleError as e:
        return error_reply(services.redactor.text(str(e)), e.exit_code)
    except Exception as e:  # a bug must not take the bot down; the user gets one line
        log.exception("command %r failed", cmd.text)
        return error_reply(f"internal error: {type(e).__name__}: {services.redactor.text(str(e))[:300]}", 1)
