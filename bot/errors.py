"""Errors a person reads: one sentence each, and the exit code they map to."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence


class EagleError(Exception):
    """Base class: `str(err)` is the one sentence shown to the user."""

    exit_code = 1


class UsageError(EagleError):
    """Bad usage, invalid playbook, invalid input, unknown host: exit 2."""

    exit_code = 2


class AccessDenied(UsageError):
    """A chat user off the allowlist of a playbook a command would run (`access.playbooks`): exit 2,
    audited as `access_denied`."""


class HostBusy(UsageError):
    """Another run holds the host's lock: exit 2. `run_id` holds it, since `since` (stored UTC)."""

    def __init__(self, message: str, run_id: int | None = None, since: str | None = None):
        super().__init__(message)
        self.run_id, self.since = run_id, since


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
    returned failure would keep is lost (eaglebot.sdk: the one failure style).

    The keywords are declared, so mypy strict catches a misspelt one; at run time an unknown
    one is kept aside (`unknown`) and the engine fails the step naming it, with this summary."""

    if TYPE_CHECKING:
        # (the field types live in eaglebot.sdk, a layer above this module: checked there, in
        # StepResult, when the engine builds the failed result)
        def __init__(self, summary: str, *, data: Mapping[str, object] | None = None, output: str = "",
                     warnings: Sequence[str] | None = None, metrics: Sequence[object] | None = None,
                     changes: Sequence[object] | None = None, regressions: Sequence[object] | None = None,
                     usage: bool = False) -> None: ...
    else:
        def __init__(self, summary, **result):
            super().__init__(summary)
            self.result = result

    result: dict[str, object]


class StoreError(EagleError):
    """The audit store cannot be opened or written (disk full, read-only, corrupt): exit 1."""
