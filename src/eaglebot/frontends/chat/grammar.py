"""The `/eagle` grammar: slash text -> `Command`, pure and cheap.

Slack parses before it acks, so nothing here touches the DB, a host or the settings; the same
`parse` serves `eagle chat` and `eagle console`. Each word's arguments are read by the parser
its entry in `chat/words.py` names (`chat/args.py`; the tuning words' in `chat/tuning.py`).
"""
from __future__ import annotations

import shlex

from eaglebot.frontends.chat import args
from eaglebot.frontends.chat.command import CONTROL, Command as Command, err, shown
from eaglebot.frontends.chat.words import BY_NAME, RUN

MAX_TEXT = 4000          # a slash command is at most 4000 characters in Slack too


def unescape(text: str) -> str:
    """Undo Slack's escaping of &, < and > (in that order: `&amp;lt;` stays `&lt;`)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def parse(text: str) -> Command:
    """Slash text -> Command. Pure: no DB, no host, no settings. Never raises."""
    if len(text) > MAX_TEXT:
        return err(text, f"the command is too long ({len(text)} characters; the limit is {MAX_TEXT})")
    text = unescape(text).strip()
    if CONTROL.search(text.replace("\x00", "")):
        return err(text, "the command contains control characters; type it as plain text")
    cmd = _parse_words(text)
    # A NUL inside an input's value goes on to the engine, which refuses it naming the input
    # (an input error with its `rejected` row, like any other invalid value); anywhere else it is
    # refused here.
    names = (cmd.playbook or "") + "".join(cmd.hosts) + "".join(k for k, _ in cmd.inputs)
    if "\x00" in text and cmd.name != "error" and (cmd.name != "run" or "\x00" in names):
        return err(text, "the command contains control characters; type it as plain text")
    return cmd


def _parse_words(text: str) -> Command:
    try:
        words = shlex.split(text)
    except ValueError as e:
        return err(text, f"cannot read the command: {e} (quotes must be balanced, e.g. key=\"a b\")")
    if not words:
        return Command("help", text=text)
    word, rest = words[0], words[1:]
    entry = BY_NAME.get(word.lower())
    if entry is not None:
        return entry.parse(entry.name, rest, text)
    if not args.NAME.match(word) or word.endswith((".yaml", ".yml")):
        return err(text, f"unknown command {shown(word)}: try `/eagle help` or `/eagle playbooks`")
    return RUN.parse(word, rest, text)
