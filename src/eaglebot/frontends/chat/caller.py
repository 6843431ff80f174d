"""Who sends a command, and what their front end lends the runs it starts.

Its own module because both the router and the handlers (tuning's too) need it, and neither
may import the other's side.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from eaglebot.engine.runner import Approver, Observer, RunRequest


class Frontend(Protocol):
    """What a front end gives the router for runs: a progress view and who approves."""

    def observer(self, req: RunRequest) -> Observer | None: ...

    def approver(self, req: RunRequest, observer: Observer | None) -> Approver | None: ...


class _NoFrontend:
    def observer(self, req: RunRequest) -> Observer | None:
        return None

    def approver(self, req: RunRequest, observer: Observer | None) -> Approver | None:
        return None


@dataclass
class Caller:
    """`check_access` is False for `eagle chat` and `eagle console`: CLI runs are not subject to `access`."""
    user: str
    channel: str | None = None
    origin: str = "slack"
    check_access: bool = True
    frontend: Frontend = field(default_factory=_NoFrontend)
