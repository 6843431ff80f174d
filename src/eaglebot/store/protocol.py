"""The audit store's contract, synchronous (the CLI; SQLite's and PostgreSQL's `Store`):
one Protocol per aggregate mixin (the service's in store/protocol_service.py), the
consumers' slices made of them, and `StoreProtocol`, all of them. Rows come back as the
TypedDicts of store/rows.py, whatever the backend; the event loop reaches a slice through
the door (store/door.py: `Door[EngineStore]`, ...). Each face restates its mixin's methods:
mypy checks that `Store` satisfies them (store/aio.py), tests/test_store_door.py that each
face names every public method of its mixin, tests/support/store_contract.py the behaviour any
backend must have.
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
from eaglebot.store.protocol_service import (ReplicasFace, SweepsFace, SchedulesFace, HealthFace,
            MaintenanceFace)

if TYPE_CHECKING:  # the engine's records (the sdk loads pydantic: `eagle history` does not)
    from eaglebot.sdk import FileChange, Metric, Regression


class RunsFace(Protocol):
    """The `runs` aggregate. (store.runs)"""

    def create_run(self, run: NewRun) -> int:
        """A new run owned by this process (its pid and start time tell a crash apart); its id."""
        ...

    def finish_run(self, run_id: int, status: str, *, exit_code: int, error: str | None = None,
            fingerprint: dict[str, Any] | None = None) -> None:
        """How a run ended; a fingerprint given replaces the one recorded."""
        ...

    def set_run_thread(self, run_id: int, channel: str | None, thread_ts: str | None) -> None:
        """The Slack thread that reports the run (set once its first message is posted)."""
        ...

    def request_cancel(self, run_id: int) -> bool:
        """Ask a running run to stop (its runner polls); False when it is not running."""
        ...

    def cancel_requested(self, run_id: int) -> bool:
        """Has someone asked this run to stop?"""
        ...

    def get_run(self, run_id: int) -> RunRow | None:
        """One run by id, its JSON columns decoded, or None."""
        ...

    def history(self, *, playbook: str | None = None, host: str | None = None, limit: int = 20,
            status: str | None = None, origin: str | None = None, since: str | None = None,
            top_level: bool = False) -> list[RunRow]:
        """Runs newest first, filtered by each criterion given (`since`: started at or after;
        `top_level`: no run another run started, see `children`)."""
        ...

    def child_counts(self, run_ids: list[int]) -> dict[int, int]:
        """Run id -> how many runs it started (tune, sweep, bisect), for the runs that started any."""
        ...

    def children(self, run_id: int) -> list[RunRow]:
        """The runs run_id started, oldest first."""
        ...

    def running_runs(self) -> list[RunRow]:
        """Runs still marked running, oldest first."""
        ...

    def save_vars(self, run_id: int, variables: dict[str, Any]) -> None:
        """The resolved variables of each host of a run (redacted by the caller)."""
        ...

    def set_fingerprint(self, run_id: int, fingerprint: dict[str, Any]) -> None:
        """The run's fingerprint (each host's software and hardware state) before it ends."""
        ...

    def run_count(self) -> int:
        """How many runs the store holds (what an empty, filtered history says it left out)."""
        ...

    def last_run_id(self) -> int | None:
        """The newest run's id (None in an empty store)."""
        ...

    def last_schedule_run(self, schedule: str) -> RunRow | None:
        """The newest run a schedule started, or None."""
        ...


class StepsFace(Protocol):
    """The `steps` aggregate, with the per-run result tables a step's end writes. (store.steps)"""

    def step_started(self, run_id: int, idx: int, host: str, name: str, skill: str,
            params: dict[str, Any], section: str = "steps") -> int:
        """A step begins on a host (status running, attempt 1); its id."""
        ...

    def step_output(self, step_id: int, text: str) -> None:
        """The streamed output so far, as kept in the store (head, marker, tail): replaces the last."""
        ...

    def step_attempt(self, step_id: int, attempts: int) -> None:
        """A retried step's attempt count."""
        ...

    def step_finished(self, step_id: int, end: StepEnd) -> None:
        """The step's final row and what it left (metrics, changes, warnings, regressions), in one
        transaction: `end["output"]` (when given) replaces the stored output; the whole output's
        size, SHA-256 and file go in the same update, so the chain covers them."""
        ...

    def close_open_steps(self, run_id: int, summary: str) -> int:
        """Steps of a finished run still marked `running` (their end was not recorded) become failed."""
        ...

    def add_regression(self, run_id: int, r: Regression, *, host: str = "", commit: bool = True) -> None:
        """A regression (or a note of kind other than `regression`) found by the history check;
        `commit=False` writes inside the caller's open transaction."""
        ...

    def add_warning(self, run_id: int, host: str, message: str) -> None:
        """A warning of the run on a host, not tied to one step."""
        ...

    def steps(self, run_id: int) -> list[StepRow]:
        """A run's steps in the order they started."""
        ...

    def metrics(self, run_id: int) -> list[MetricRow]:
        """A run's metrics in the order recorded."""
        ...

    def changes(self, run_id: int) -> list[ChangeRow]:
        """A run's file changes in the order made."""
        ...

    def warnings(self, run_id: int) -> list[WarningRow]:
        """A run's warnings in the order raised."""
        ...

    def regressions(self, run_id: int) -> list[RegressionRow]:
        """A run's regressions (and notes of other kinds) in the order found."""
        ...

    def last_backup(self, host: str, path: str, run_id: int | None = None) -> ChangeRow | None:
        """The newest change of a file on a host that kept a backup (of one run, if given)."""
        ...


class TrendsFace(Protocol):
    """Read-mostly queries over runs, steps, metrics, changes and regressions. (store.trends)"""

    def metric_history(self, playbook: str, host: str, metric: str, *, before_run: int | None = None,
            since_run: int | None = None, limit: int = 10, exclude_incident_runs: bool = False,
            config: str | None = None) -> list[MetricPoint]:
        """Values of one metric from successful runs of playbook+host, newest first.

        config: only values of this configuration class and those whose class was not said (a
        skill that says none, runs from before classes were recorded); "": only the latter.

        exclude_incident_runs: leave out runs an incident flagged, unless that incident was
        accepted (closed by an ack or a baseline): a reference window never learns a drop."""
        ...

    def latest_metrics(self, names: list[str]) -> list[LatestMetric]:
        """The newest value of each of `names` per host and playbook, from successful real runs
        that no other run started (a tune's cells are not the host's result)."""
        ...

    def previous_good_run(self, playbook: str, host: str, before_run: int) -> RunRow | None:
        """The newest earlier run of playbook on host that succeeded without a flagged regression."""
        ...

    def host_run_ids(self, host: str, *, after: int = 0, upto: int | None = None) -> list[int]:
        """Ids of the runs on a host in (after, upto], oldest first."""
        ...

    def last_fingerprinted_run(self, host: str, upto: int) -> FingerprintState | None:
        """The newest run <= upto on host whose fingerprint describes that host (one row read,
        only that host's part of the fingerprint parsed)."""
        ...

    def host_steps(self, host: str, after: int, upto: int) -> list[HostStepRow]:
        """Finished steps of runs (after, upto] on host, oldest first (for fingerprints)."""
        ...

    def last_step_data(self, host: str, skill: str, key: str) -> dict[str, Any] | None:
        """Registered data of the newest step of `skill` on host that recorded `key`."""
        ...

    def newest_steps(self, skill: str, limit: int = 1000) -> list[StepRow]:
        """The newest finished step of `skill` on each host, newest first (`eagle fleet`'s last checks)."""
        ...

    def step_data_history(self, host: str, skills: list[str], contains: str, limit: int = 200,
            newest_first: bool = False) -> list[StepDataRow]:
        """Finished steps of `skills` on host whose registered data mentions `contains`, oldest first.
        Dry runs are left out: a dry run changes nothing, the evidence this history gives included."""
        ...

    def host_changes(self, host: str, after: int, upto: int) -> list[ChangeRow]:
        """File changes on a host by runs (after, upto], oldest first."""
        ...

    def metrics_for_runs(self, run_ids: list[int]) -> dict[int, list[MetricRow]]:
        """Every metric of each run, in the order recorded (one query; runs without metrics absent)."""
        ...

    def metric_value(self, run_id: int, name: str) -> float | None:
        """A run's first value of a metric, or None."""
        ...

    def regression_counts(self, run_ids: list[int]) -> dict[int, int]:
        """Run id -> regressions flagged (kind `regression`), for the runs that have any."""
        ...

    def flagged_runs(self, host: str, metric: str, run_ids: list[int]) -> set[int]:
        """Which of run_ids flagged a regression of metric on host."""
        ...

    def update_regression_reason(self, run_id: int, host: str, metric: str, old: str, new: str) -> None:
        """Reword a regression's reason (e.g. once a later check attributes it)."""
        ...


class IncidentsFace(Protocol):
    """The `incidents`, `incident_runs` and `baselines` tables. (store.incidents)"""

    def open_incident(self, *, playbook: str, host: str, metric: str, run_id: int, ref_before_run: int,
            reference: float | None, unit: str, better: str, cause_id: int | None = None) -> int:
        """A new open incident, flagged by `run_id`; its id. `cause_id`: the open incident of
        the same cause it joins (another metric that moved at the same change point)."""
        ...

    def incident_flagged(self, incident_id: int, run_id: int) -> None:
        """Another run flagged the same open incident."""
        ...

    def open_incident_for(self, playbook: str, host: str, metric: str) -> IncidentRow | None:
        """The open incident of a metric of playbook on host, or None."""
        ...

    def incidents(self, *, playbook: str | None = None, host: str | None = None,
            status: str | None = "open", run_id: int | None = None, limit: int = 100) -> list[IncidentRow]:
        """Incidents newest first, by each criterion given (`run_id`: the ones it flagged)."""
        ...

    def incident(self, incident_id: int) -> IncidentRow | None:
        """One incident row by id, whatever its state, or None."""
        ...

    def incident_cause(self, incident_id: int) -> list[IncidentRow]:
        """Every metric's row of one incident (cause): the row of that id and the rows that joined it."""
        ...

    def close_incident(self, incident_id: int, kind: str, by: str, reason: str, run_id: int | None = None) -> bool:
        """Close an open incident (kind: recovered, baseline or ack); False when it was not open."""
        ...

    def reference_start(self, playbook: str, host: str, metric: str) -> int | None:
        """The first run a metric's reference may use: the baseline, or the start of the
        newest incident an operator accepted (ack), whichever is later."""
        ...

    def set_baseline(self, run_id: int, set_by: str) -> BaselineSet:
        """Make a run the baseline of its playbook on each of its hosts; KeyError for no such run."""
        ...

    def baseline(self, playbook: str, host: str) -> BaselineRow | None:
        """The baseline of a playbook on a host, or None."""
        ...


class ApprovalsFace(Protocol):
    """The `approvals` and `events` tables. (store.approvals)"""

    def approval_requested(self, run_id: int, step_idx: int, host: str, step: str, action: str,
            details: list[str]) -> int:
        """A pending approval for one step on one host; its id."""
        ...

    def approval_decided(self, approval_id: int, status: str, decided_by: str) -> bool:
        """Record a decision once; a second decision on the same request is refused."""
        ...

    def get_approval(self, approval_id: int) -> ApprovalRow | None:
        """An approval by id, or None."""
        ...

    def set_approval_message(self, approval_id: int, channel: str | None, ts: str | None,
            requester: str | None = None) -> None:
        """The Slack message that asks (and who asked); values not given are kept."""
        ...

    def pending_approval(self, run_id: int, step_idx: int, host: str) -> ApprovalRow | None:
        """The newest pending approval of a step on a host, or None."""
        ...

    def stale_approvals(self) -> list[StaleApprovalRow]:
        """Pending approvals whose run is no longer running (its process died): nobody waits on them."""
        ...

    def add_event(self, run_id: int | None, kind: str, message: str) -> None:
        """A note on a run (or on the bot, run_id None)."""
        ...

    def add_rejection(self, kind: str, actor: str, text: str, reason: str, run_id: int | None = None) -> None:
        """A refused request (kind `rejected` or `access_denied`): an event, never a run row."""
        ...

    def events(self, kind: str | None = None, limit: int = 100) -> list[EventRow]:
        """Events newest first (of one kind, if given)."""
        ...


class LocksFace(Protocol):
    """The `locks` and `remote_procs` tables, and `recover`. (store.locks)"""

    def recover(self) -> list[int]:
        """Turn `running` runs whose process is gone into `interrupted`; free their locks."""
        ...

    def start_run(self, lock: list[str], run: NewRun) -> int:
        """Create the run row and lock `lock` in one transaction: a busy host raises HostBusy
        and leaves no run row behind (a refused request is an event, not a run)."""
        ...

    def acquire_hosts(self, run_id: int, hosts: list[str]) -> None:
        """Lock every host for this run, all or none; a busy host raises HostBusy."""
        ...

    def release_hosts(self, run_id: int) -> None:
        """Free the run's host locks (kept, ownerless, where its processes were not stopped)."""
        ...

    def locks(self) -> list[LockRow]:
        """Every host lock, by host."""
        ...

    def procs_record(self, run_id: int, step_id: int, host: str, *, tag: str, state: str, note: str,
            pgids: list[int] | None = None) -> int:
        """A step's processes had to be killed: `stopped` (verified gone) or `pending` (the
        host was unreachable; the next run on the host stops them before its first step).
        A crashed run's running steps get a `pending` row from `recover`."""
        ...

    def steps_beside(self, host: str, run_id: int, after_id: int | None) -> tuple[int, list[StepRow]]:
        """(the newest step's id, the steps of other runs on `host` that may be running code:
        running under a lock on it, or started after `after_id`)."""
        ...

    def pending_procs(self, host: str) -> list[RemoteProcRow]:
        """Process groups on host that a finished (or crashed) run did not stop."""
        ...

    def procs_cleaned(self, proc_id: int, *, by_run: int, note: str) -> None:
        """The pending processes were stopped (or found gone) by run `by_run`; the step that
        started them says so."""
        ...

    def step_procs(self, step_id: int) -> list[RemoteProcRow]:
        """The process records of one step."""
        ...


class BaseFace(Protocol):
    """The connection and the sealed write transaction every aggregate mixin writes through. (store.base)"""

    @property
    def db_id(self) -> str:
        """A random id of this audit DB: in the tag of every process a step starts
        (`<db_id>-<run>-<step>`), so two bots' runs on one host never share a tag."""
        ...

    def proc_tag(self, run_id: int, step_id: int) -> str:
        """The tag the processes of one step carry on their host (`<db_id>-<run>-<step>`)."""
        ...

    def close(self) -> None:
        """Close the connection (the store is not usable afterwards)."""
        ...


class RunLog(BaseFace, RunsFace, StepsFace, ApprovalsFace, LocksFace, Protocol):
    """What a run writes and reads back as it goes (the engine): the run, its steps and what they
    leave, approvals and events, host locks and the processes a step started."""


class EngineStore(BaseFace, RunsFace, StepsFace, ApprovalsFace, LocksFace, TrendsFace, IncidentsFace,
            HealthFace, SweepsFace, Protocol):
    """What the engine holds (`Engine.store`): the run's log (`RunLog`), the health guard's reads, the
    skills' `AuditView` (trends), and what it hands its store to: the post-run hooks (history's
    judgement and incidents, the fleet's health) and the tuning it runs (sweeps)."""


class HistoryStore(RunsFace, StepsFace, TrendsFace, IncidentsFace, ApprovalsFace, Protocol):
    """What history reads and records (regressions, incidents, baselines, fingerprints, trends, the
    warnings and events it leaves) and what the views of a run read."""


class ScheduleReads(RunsFace, SchedulesFace, Protocol):
    """What the schedules' view reads (`/eagle schedule`, `eagle schedule list`): each schedule's last
    run, its fires and its pause."""


class SchedulerStore(RunsFace, StepsFace, TrendsFace, IncidentsFace, ApprovalsFace, SchedulesFace,
            ReplicasFace, MaintenanceFace, Protocol):
    """What `eagle serve`'s scheduler reads and writes: the fires, their claims among the replicas and
    the pauses, each schedule's runs and what its report reads of them (history's reads: the run's
    view, its trends), and the audit head it posts."""


class MetricsReads(IncidentsFace, HealthFace, TrendsFace, Protocol):
    """What `/metrics` reads of the store at each scrape: the open incidents, the quarantined GPUs and
    hosts, and the latest bench results per host."""


class ServiceState(SchedulesFace, ReplicasFace, HealthFace, SweepsFace, ApprovalsFace, LocksFace, Protocol):
    """What `eagle serve` keeps (schedules and their fires, the replicas' lease and heartbeats, Slack's
    seen requests, the health watch and the events it writes, sweeps), and what the watch reads of
    the steps beside a probe (the locks' face: `steps_beside`, `pending_procs`)."""


class AuditAdmin(BaseFace, MaintenanceFace, Protocol):
    """The audit trail's administration: verify, head, backup, prune, writability."""


class StoreProtocol(RunsFace, StepsFace, TrendsFace, IncidentsFace, ApprovalsFace, LocksFace,
            ReplicasFace, SweepsFace, SchedulesFace, HealthFace, MaintenanceFace, BaseFace, Protocol):
    """The audit store, synchronous: each call is one transaction (writes) or one read."""
