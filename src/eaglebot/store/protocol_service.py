"""The audit store's contract, synchronous: the faces of the service's state and the audit
administration (store/protocol.py has the rest and `StoreProtocol`).
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from eaglebot.store.rows import (
    ApprovalRow, AuditHead, BaselineRow, BaselineSet, ChangeRow, EventRow, FingerprintState, HealthEventRow,
    HealthStateRow, HostStepRow, IncidentRow, LatestMetric, LeaseRow, LifecycleStepRow, LockRow, MetricPoint, NewRun,
    MetricRow,
    RegressionRow, RemoteProcRow, ReplicaRow, RunRow, ScheduleFireRow, ScheduleStateRow, StaleApprovalRow, StepDataRow,
    StepEnd, StepRow, SweepPointRow, SweepRow, WarningRow,
)
from eaglebot.store.sealing import AuditKey

if TYPE_CHECKING:  # the engine's records (the sdk loads pydantic: `eagle history` does not)
    from eaglebot.sdk import FileChange, Metric, Regression


class ReplicasFace(Protocol):
    """The `leases`, `replicas`, `schedule_claims` and `seen_requests` tables. (store.replicas)"""

    def claim_requests(self, keys: list[str], window_s: float, max_keys: int) -> bool:
        """Record a Slack request's `keys` for `window_s`, for every replica: True when none was
        seen within its window (answer it), False when one was (a copy). One transaction, so
        two replicas racing with one request cannot both win; expired keys are dropped, and
        past `max_keys` the soonest to expire."""
        ...

    def lease_acquire(self, name: str, holder: str, ttl_s: float) -> bool:
        """Take the lease `name` if it is free or expired, renew it if `holder` has it; True
        while `holder` holds it (until now + ttl_s unless renewed). One transaction; a new
        holder is recorded as a chained `leader` event."""
        ...

    def lease_release(self, name: str, holder: str) -> None:
        """Give the lease up at once (a replica stopping cleanly), if `holder` has it."""
        ...

    def lease_holder(self, name: str) -> LeaseRow | None:
        """The lease's row (holder, acquired, renewed, expires), expired or not; None if free."""
        ...

    def replica_beat(self, replica_id: str, *, hostname: str, pid: int, proc_start: str | None,
            version: str) -> None:
        """A replica is alive now (its first beat records when it started); replicas gone
        for a day are forgotten."""
        ...

    def replicas(self) -> list[ReplicaRow]:
        """Every replica that beat within the last day, most recently seen first."""
        ...

    def claim_fire(self, schedule: str, fire_time: str, holder: str) -> int | None:
        """Claim one fire of a schedule (its slot's time, the same on every replica) and record
        it `started`: the fire's id, or None when another replica (or an earlier leader)
        claimed that slot already. One transaction."""
        ...


class SweepsFace(Protocol):
    """The `sweeps` and `sweep_points` tables (their JSON columns come back decoded). (store.sweeps)"""

    def create_sweep(self, *, kind: str, playbook: str, host: str, spec: dict[str, Any], actor: str,
            origin: str, points: list[tuple[dict[str, Any], str, str]]) -> int:
        """A sweep and its points: (inputs, status 'pending' or 'skipped', reason)."""
        ...

    def get_sweep(self, sweep_id: int) -> SweepRow | None:
        """A sweep by id, spec and result decoded, or None."""
        ...

    def sweep_points(self, sweep_id: int) -> list[SweepPointRow]:
        """A sweep's points in grid order, inputs ({} if none) and result decoded."""
        ...

    def sweep_point_done(self, sweep_id: int, idx: int, status: str, run_id: int | None,
            result: dict[str, Any] | None, reason: str = "") -> None:
        """How one point ended: its run and what it measured."""
        ...

    def add_sweep_point(self, sweep_id: int, inputs: dict[str, Any]) -> int:
        """Append a pending point (a bisection's next probe); its index."""
        ...

    def finish_sweep(self, sweep_id: int, status: str, result: dict[str, Any] | None) -> None:
        """How the sweep ended, and its result."""
        ...


class SchedulesFace(Protocol):
    """The `schedule_fires` and `schedule_state` tables. (store.schedules)"""

    def record_fire(self, schedule: str, fire_time: str, status: str, run_id: int | None = None) -> int:
        """A schedule fired (or was skipped) for `fire_time`; the fire's id."""
        ...

    def update_fire(self, fire_id: int, status: str, run_id: int | None = None) -> None:
        """A fire's outcome (and the run it started, when known)."""
        ...

    def last_fire(self, schedule: str) -> ScheduleFireRow | None:
        """A schedule's latest fire (by fire time), or None."""
        ...

    def schedule_fires(self, schedule: str, since: str = "", limit: int = 100) -> list[ScheduleFireRow]:
        """A schedule's fires at or after `since` (ISO time; "" from the first), oldest first."""
        ...

    def set_schedule_paused(self, name: str, paused: bool, changed_by: str) -> bool:
        """Pause or resume a schedule; False when it already was in that state."""
        ...

    def schedule_states(self) -> dict[str, ScheduleStateRow]:
        """Schedule name -> its paused state, for the schedules ever paused or resumed."""
        ...


class HealthFace(Protocol):
    """The `health_state`, `health_events` and `health_cursors` tables. (store.health)"""

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
            expected: bool = False, at: str | None = None) -> None:
        """An Xid the watch read from a host's kernel log (each one once), with the lifecycle
        window it fell in; `expected`: an application's Xid in the bot's own teardown (kind
        `xid_expected`, never counted towards a rule's fail_after); `at`: the Xid's own time (ISO,
        from the kernel's timestamp), else now."""
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


class MaintenanceFace(Protocol):
    """Whole-DB operations: audit checks, backup, writability, prune. (store.maintenance)"""

    def audit_verify(self, head: str | None = None, key: AuditKey | list[AuditKey] | None = None) -> dict[str, Any]:
        """Walk the audit hash chain (`eagle audit verify`): ok, head, first_broken, problems,
        seals. With `key` (a verification or sealing key; one per key era of a rotated chain)
        every seal it can derive is checked."""
        ...

    def audit_rotate_key(self) -> AuditKey:
        """`eagle audit rotate-key`: a sealed 'R' entry names the next key, and the key file is
        replaced with it before that transaction commits, so every entry after it (this
        process's or another's, which reads the replaced file at its next seal) is sealed with
        the next key. Returns the next key's key_0 (its verification key)."""
        ...

    def run_audit_problems(self, run_id: int) -> list[str]:
        """One run's rows (the run, its steps, metrics, changes, approvals, events, warnings,
        regressions) checked against the audit chain: a sentence per edited row."""
        ...

    def audit_head(self) -> AuditHead:
        """The newest sealed link of the audit chain: the anchor posted outside the DB."""
        ...

    def backup(self, dest: Path) -> AuditHead:
        """A consistent copy of the whole DB (SQLite's online backup: the bot may keep
        writing) at `dest`, a new file with this DB's mode; the chain head the COPY holds (the
        live DB may have moved on while it was taken)."""
        ...

    def check_writable(self) -> None:
        """Raise if the audit DB cannot take a write lock now (doctor)."""
        ...

    def prune_count(self, older_than: timedelta) -> int:
        """How many runs `prune(older_than)` would delete."""
        ...

    def prune(self, older_than: timedelta) -> int:
        """Delete finished runs started before now - older_than, with their child rows.

        Baseline runs are kept; so is the newest fire record of each schedule (misfire
        detection reads it)."""
        ...
