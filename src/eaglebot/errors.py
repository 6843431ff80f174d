"""Errors a person reads: one sentence each, and the exit code they map to."""
from __future__ import annotations

from typing import Any, Generic, Mapping, TypedDict, TypeVar, Unpack


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


M = TypeVar("M")
C = TypeVar("C")
R = TypeVar("R")


class ResultKeywords(TypedDict, Generic[M, C, R], total=False):
    """What a step's result may carry besides its status and summary, declared once: the
    keywords of `StepFailed` and of eaglebot.sdk's `StepResult.ok/changed/failed/skipped`, and
    the names in `RESULT_FIELDS` (StepResult's own fields match them, tests/test_sdk_keywords.py).
    The records (Metric, FileChange, Regression) are the sdk's, a layer above: it fills them in."""

    metrics: list[M] | None
    changes: list[C] | None
    data: dict[str, Any] | None
    warnings: list[str] | None
    regressions: list[R] | None
    output: str   # evidence kept with the step (log tail, process table)
    usage: bool   # the step refused what it was asked before changing anything (a failed run of refusals exits 2)
    final: str    # one sentence on the state the run leaves the host in (a failed run's last line)


class StepFailed(EagleError):
    """Fails the step it is raised in, from the skill or any helper it calls: the sentence is
    the step's summary, and the keywords are `StepResult.failed`'s (`ResultKeywords`): the
    engine records `StepResult.failed(summary, **result)`, so nothing a returned failure would
    keep is lost (eaglebot.sdk: the one failure style).

    The keywords are declared, so mypy strict catches a misspelt one; at run time an unknown
    one is kept aside and the engine fails the step naming it, with this summary. (The records'
    types are checked in StepResult, when the engine builds the failed result.)"""

    def __init__(self, summary: str, **result: Unpack[ResultKeywords[Any, Any, Any]]):
        super().__init__(summary)
        self.result: Mapping[str, object] = result


class StoreError(EagleError):
    """The audit store cannot be opened or written (disk full, read-only, corrupt): exit 1."""
