"""The health watch's part of the store contract (`StoreProtocol` extends it): each host's and
GPU's state, its events (transitions, the Xids read with their lifecycle window, notes), the
lifecycle steps the windows come from, and how far each host's kernel log was read."""
from __future__ import annotations

from typing import Protocol

from eaglebot.store.rows import HealthEventRow, HealthStateRow, LifecycleStepRow


class HealthProtocol(Protocol):
    """The fleet health watch's rows."""

    # -- health watch ----------------------------------------------------------------------------
    def health_states(self, host: str | None = None) -> list[HealthStateRow]:
        """Every host's and GPU's state row (healthy ones included once they had a finding), by host, GPU."""
        ...

    def health_transition(self, host: str, gpu: int, state: str, reason: str, actor: str) -> bool:
        """Move one host's GPU (-1: the host) to `state` with its reason and actor, as one event;
        the clean count starts over. False (nothing written) when it already is in that state
        (`expected` is written again: its reason and time say which teardown it was)."""
        ...

    def health_set_clean(self, host: str, gpu: int, clean: int) -> None:
        """The clean probes counted in a row towards clearing one host's GPU (0: a finding again)."""
        ...

    def health_set_alert(self, host: str, gpu: int, channel: str | None, message_ts: str | None) -> None:
        """The Slack message of the incident of one host's GPU (updated in place as it evolves)."""
        ...

    def health_silence(self, host: str, gpu: int, until: str, by: str) -> bool:
        """Silence the alerts of one host's GPU incident until `until` (ISO time), as an event;
        False when it has no state row."""
        ...

    def health_record_xid(self, host: str, gpu: int, code: int, reason: str, window: str | None = None,
                          expected: bool = False) -> None:
        """An Xid the watch read from a host's kernel log (each one once), with the lifecycle
        window it fell in; `expected`: an application's Xid in the bot's own teardown (kind
        `xid_expected`, never counted towards a rule's fail_after)."""
        ...

    def health_note(self, host: str, gpu: int, reason: str, actor: str, kind: str = "note") -> None:
        """Something the watch said about one host's GPU without changing its state (it left a
        person's drain alone), as an event. Kind `takeover`: the drain is someone else's now (a
        person changed it in the scheduler): the row's reason and actor say whose, and its clean
        probes start over (so the watch says, once, that it left it)."""
        ...

    def health_lifecycle_steps(self, host: str, limit: int = 64) -> list[LifecycleStepRow]:
        """The newest `limit` steps on a host that kill, verify or launch (the watch's lifecycle
        windows), oldest first, with their run's status."""
        ...

    def health_xid_count(self, host: str, gpu: int, code: int, since: str) -> int:
        """How many times Xid `code` was read on one host's GPU at or after `since` (ISO time)."""
        ...

    def health_events(self, host: str | None = None, limit: int = 100) -> list[HealthEventRow]:
        """The watch's events, newest first (of one host when given)."""
        ...

    def health_held(self, host: str) -> HealthStateRow | None:
        """The row that keeps a host out of relaunch, bench and schedules (quarantined or being
        drained), or None when it may run."""
        ...

    def health_cursor(self, host: str) -> float | None:
        """How far (kernel log seconds) the watch has read a host's kernel log, or None (never)."""
        ...

    def health_set_cursor(self, host: str, cursor: float | None, status: str) -> None:
        """A host's probe ended: its kernel log cursor and the probe's status (ok, hung, failed)."""
        ...
