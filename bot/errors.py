"""Errors a person reads: one sentence each, and the exit code they map to."""
from __future__ import annotations


class EagleError(Exception):
    """Base class: `str(err)` is the one sentence shown to the user."""

    exit_code = 1


class UsageError(EagleError):
    """Bad usage, invalid playbook, invalid input, unknown host: exit 2."""

    exit_code = 2


class HostBusy(UsageError):
    """Another run holds the host's lock: exit 2."""


class HostQuarantined(UsageError):
    """The health watch holds the host out of relaunch, bench and schedules: exit 2."""


class TransportError(EagleError):
    """A host could not be reached or a command could not be started on it."""


class HostUnreachable(TransportError):
    """No connection to the host after the connect retries: the host is `unreachable`, not
    `failed` (exit 4 when no step failed)."""


class StepFailed(EagleError):
    """Fails the step it is raised in, from the skill or any helper it calls: the sentence is
    the step's summary, and the keywords are `StepResult.failed`'s (data, output, warnings,
    metrics...): the engine records `StepResult.failed(summary, **result)`, so nothing a
    returned failure would keep is lost (eaglebot.sdk: the one failure style)."""

    def __init__(self, summary: str, **result: object):
        super().__init__(summary)
        self.result = result


class StoreError(EagleError):
    """The audit store cannot be opened or written (disk full, read-only, corrupt): exit 1."""
