"""A parsed `/eagle` command, and the refusal a parser returns in its place.

Its own module because the parsers, the handlers and the access checks all take one, and the
table of words (`chat/words.py`) that ties them together sits above all three.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from eaglebot.engine.redact import Redactor

Access = Literal["free", "view", "operate", "approve"]   # approve: the bot's own configuration
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class Command:
    name: str                                   # a built-in word, "run" or "error"
    args: tuple[str, ...] = ()
    playbook: str | None = None
    hosts: tuple[str, ...] = ()
    inputs: tuple[tuple[str, str], ...] = ()
    dry_run: bool = False
    error: str | None = None
    text: str = ""
    force: bool = False                         # run on a quarantined host (approvers only)

    @property
    def run_id(self) -> int:
        return int(self.args[-1].lstrip("#"))


_REDACT = Redactor()  # built-in token patterns + this process's secrets: before any truncation


def shown(tok: str, n: int = 40) -> str:
    """A word the user typed, safe to echo in a refusal: redacted, no control characters, short."""
    tok = CONTROL.sub("?", _REDACT.text(tok))
    return repr(tok if len(tok) <= n else tok[:n] + "…")


def err(text: str, msg: str) -> Command:
    return Command("error", error=msg, text=text[:200])
