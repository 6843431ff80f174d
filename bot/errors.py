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


class TransportError(EagleError):
    """A host could not be reached or a command could not be started on it."""


class StepFailed(EagleError):
    """Raised inside a skill to fail its step with one sentence."""


class StoreError(EagleError):
    """The audit store cannot be opened or written (disk full, read-only, corrupt): exit 1."""
