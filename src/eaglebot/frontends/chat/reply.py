"""What the router answers: plain text plus what it says, typed, for a richer front end.

Every front end can print `Reply.text`. `Reply.body` carries the same answer as data, so
Slack (`eaglebot.frontends.slack.reply_blocks`) renders Block Kit from it without the router
knowing Block Kit exists.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from eaglebot.engine.runner import RunOutcome, RunRequest
from eaglebot.history.view import RunView


@dataclass(frozen=True)
class Listing:
    """Monospace text (a table, help), with an optional title."""
    text: str
    title: str | None = None


@dataclass(frozen=True)
class Failure:
    """A refusal or an error: one sentence that says what to do."""
    message: str


@dataclass(frozen=True)
class Note:
    """One line; `mark` says what kind of event it reports: "baseline" or None."""
    text: str
    mark: str | None = None


@dataclass(frozen=True)
class CancelRequested:
    run_id: int
    playbook: str
    by: str


@dataclass(frozen=True)
class RunShown:
    """`/eagle show ID`: a past run as the store has it."""
    view: RunView


@dataclass(frozen=True)
class LogTail:
    """The tail of a server log (already redacted); `lines` is how many lines were asked for."""
    host: str
    text: str
    lines: int


@dataclass(frozen=True)
class SweepDone:
    """A finished sweep: its ranked table, and the `/eagle` text that applies the winner."""
    text: str
    sweep_id: int
    apply: str | None = None


@dataclass(frozen=True)
class TuneDone:
    """A finished tuning run: its table, and the `/eagle` text that deploys its result after an
    approval (when it beats the current config beyond the noise and was not applied)."""
    text: str
    run_id: int
    apply: str | None = None


Body = Union[Listing, Failure, Note, CancelRequested, RunShown, LogTail, SweepDone, TuneDone]


@dataclass
class Reply:
    text: str
    body: Body
    public: bool = False                 # in the channel (else only the requester sees it)
    exit_code: int = 0
    file: Path | None = None             # an image to upload (trend)
    run_id: int | None = None
    task: asyncio.Task[RunOutcome] | None = None     # a started run
    request: RunRequest | None = None

    @property
    def is_error(self) -> bool:
        return self.exit_code != 0 and self.task is None


def error_reply(message: str, code: int = 2) -> Reply:
    return Reply(message, Failure(message), exit_code=code)


def listing(text: str, title: str | None = None, *, public: bool = False) -> Reply:
    return Reply(text, Listing(text, title), public=public)
