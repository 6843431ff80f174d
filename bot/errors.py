"""Errors a person reads: one sentence each, and the exit code they map to."""
from __future__ import annotations

from typing import Mapping, Sequence


class EagleError(Exception):
    """Base class: `str(err)` is the one sentence shown to the user."""

    exit_code = 1


class UsageError(EagleError):
    """Bad usage, invalid playbook, invalid input, unknown host: exit 2."""

    exit_code = 2


class HostBusy(UsageError):
    """Another run holds the host's lock: exit 2."""


class TransportError(EagleError):
    """A host could not be reached or a command could not be started on it."""


class StepFailed(EagleError):
    """Fails the step it is raised in, from the skill or any helper it calls: the sentence is
    the step's summary; `data`, `output` (evidence) and `warnings` are kept with the failed
    step as a returned `StepResult.failed(...)`'s would be (eaglebot.sdk says why one style)."""

    def __init__(self, summary: str, *, data: Mapping[str, object] | None = None, output: str = "",
                 warnings: Sequence[str] = ()):
        super().__init__(summary)
        self.data = dict(data or {})
        self.output = output
        self.warnings = list(warnings)


class StoreError(EagleError):
    """The audit store cannot be opened or written (disk full, read-only, corrupt): exit 1."""
