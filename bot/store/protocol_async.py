"""The audit store's async faces: each face of store/protocol.py, awaited (the bot;
`AsyncStore` runs the sync store on a worker thread; a backend with an async driver may
implement them directly). The service's faces are in store/protocol_async_service.py.

Written by scripts/gen_store_aio.py from the store's mixins (do not edit).
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

from eaglebot.store.rows import (
    ApprovalRow, AuditHead, BaselineRow, BaselineSet, ChangeRow, EventRow, FingerprintState, HealthEventRow,
    HealthStateRow, HostStepRow, IncidentRow, LatestMetric, LeaseRow, LifecycleStepRow, LockRow, MetricPoint, NewRun,
    MetricRow,
    RegressionRow, RemoteProcRow, ReplicaRow, RunRow, ScheduleFireRow, ScheduleStateRow, StaleApprovalRow, StepDataRow,
    StepEnd, StepRow, SweepPointRow, SweepRow, WarningRow,
)
from eaglebot.store.sealing import AuditKey
from eaglebot.store.protocol_async_service import (AsyncReplicasFace, AsyncSweepsFace, AsyncSchedulesFace,
            AsyncHealthFace, AsyncMaintenanceFace)
from eaglebot.store.protocol import (EngineStore, HistoryStore, MetricsReads, RunLog, SchedulerStore,
            ServiceState, StoreProtocol)

if TYPE_CHECKING:  # the engine's records (the sdk loads pydantic: `eagle history` does not)
    from eaglebot.sdk import FileChange, Metric, Regression

T = TypeVar("T")


class AsyncRunsFace(Protocol):
    """The `runs` aggregate. (store.runs)"""

    async def create_run(self, run: NewRun) -> int:
        """A new run owned by this process (its pid and start time tell a crash apart); its id."""
        ...

    async def finish_run(self, run_id: int, status: str, *, exit_code: int, error: str | None = None,
            fingerprint: dict[str, Any] | None = None) -> None:
        """How a run ended; a fingerprint given replaces the one recorded."""
        ...

    async def set_run_thread(self, run_id: int, channel: str | None, thread_ts: str | None) -> None:
        """The Slack thread that reports the run (set once its first message is posted)."""
        ...

    async def request_cancel(self, run_id: int) -> bool:
        """Ask a running run to stop (its runner polls); False when it is not running."""
        ...

    async def cancel_requested(self, run_id: int) -> bool:
        """Has someone asked this run to stop?"""
        ...

    async def get_run(self, run_id: int) -> RunRow | None:
        """One run by id, its JSON columns decoded, or None."""
        ...

    async def history(self, *, playbook: str | None = None, host: str | None = None, limit: int = 20,
            status: str | None = None, origin: str | None = None, since: str | None = None,
            top_level: bool = False) -> list[RunRow]:
        """Runs newest first, filtered by each criterion given (`since`: started at or after;"""
        ...

    async def child_counts(self, run_ids: list[int]) -> dict[int, int]:
        """Run id -> how many runs it started (tune, sweep, bisect), for the runs that started any."""
        ...

    async def children(self, run_id: int) -> list[RunRow]:
        """The runs run_id started, oldest first."""
        ...

    async def running_runs(self) -> list[RunRow]:
        """Runs still marked running, oldest first."""
        ...

    async def save_vars(self, run_id: int, variables: dict[str, Any]) -> None:
        """The resolved variables of each host of a run (redacted by the caller)."""
        ...

    async def set_fingerprint(self, run_id: int, fingerprint: dict[str, Any]) -> None:
        """The run's fingerprint (each host's software and hardware state) before it ends."""
        ...

    async def run_count(self) -> int:
        """How many runs the store holds (what an empty, filtered history says it left out)."""
        ...

    async def last_run_id(self) -> int | None:
        """The newest run's id (None in an empty store)."""
        ...

    async def last_schedule_run(self, schedule: str) -> RunRow | None:
        """The newest run a schedule started, or None."""
        ...


class AsyncStepsFace(Protocol):
    """The `steps` aggregate, with the per-run result tables a step's end writes. (store.steps)"""

    async def step_started(self, run_id: int, idx: int, host: str, name: str, skill: str,
            params: dict[str, Any], section: str = "steps") -> int:
        """A step begins on a host (status running, attempt 1); its id."""
        ...

    async def step_output(self, step_id: int, text: str) -> None:
        """The streamed output so far, as kept in the store (head, marker, tail): replaces the last."""
        ...

    async def step_attempt(self, step_id: int, attempts: int) -> None:
        """A retried step's attempt count."""
        ...

    async def step_finished(self, step_id: int, end: StepEnd) -> None:
        """The step's final row and what it left (metrics, changes, warnings, regressions), in one"""
        ...

    async def close_open_steps(self, run_id: int, summary: str) -> int:
        """Steps of a finished run still marked `running` (their end was not recorded) become failed."""
        ...

    async def add_regression(self, run_id: int, r: Regression, *, host: str = "", commit: bool = True) -> None:
        """A regression (or a note of kind other than `regression`) found by the history check;"""
        ...

    async def add_warning(self, run_id: int, host: str, message: str) -> None:
        """A warning of the run on a host, not tied to one step."""
        ...

    async def steps(self, run_id: int) -> list[StepRow]:
        """A run's steps in the order they started."""
        ...

    async def metrics(self, run_id: int) -> list[MetricRow]:
        """A run's metrics in the order recorded."""
        ...

    async def changes(self, run_id: int) -> list[ChangeRow]:
        """A run's file changes in the order made."""
        ...

    async def warnings(self, run_id: int) -> list[WarningRow]:
        """A run's warnings in the order raised."""
        ...

    async def regressions(self, run_id: int) -> list[RegressionRow]:
        """A run's regressions (and notes of other kinds) in the order found."""
        ...

    async def last_backup(self, host: str, path: str, run_id: int | None = None) -> ChangeRow | None:
        """The newest change of a file on a host that kept a backup (of one run, if given)."""
        ...


class AsyncTrendsFace(Protocol):
    """Read-mostly queries over runs, steps, metrics, changes and regressions. (store.trends)"""

    async def metric_history(self, playbook: str, host: str, metric: str, *,
            before_run: int | None = None, since_run: int | None = None, limit: int = 10,
            exclude_incident_runs: bool = False, config: str | None = None) -> list[MetricPoint]:
        """Values of one metric from successful runs of playbook+host, newest first."""
        ...

    async def latest_metrics(self, names: list[str]) -> list[LatestMetric]:
        """The newest value of each of `names` per host and playbook, from successful real runs"""
        ...

    async def previous_good_run(self, playbook: str, host: str, before_run: int) -> RunRow | None:
        """The newest earlier run of playbook on host that succeeded without a flagged regression."""
        ...

    async def host_run_ids(self, host: str, *, after: int = 0, upto: int | None = None) -> list[int]:
        """Ids of the runs on a host in (after, upto], oldest first."""
        ...

    async def last_fingerprinted_run(self, host: str, upto: int) -> FingerprintState | None:
        """The newest run <= upto on host whose fingerprint describes that host (one row read,"""
        ...

    async def host_steps(self, host: str, after: int, upto: int) -> list[HostStepRow]:
        """Finished steps of runs (after, upto] on host, oldest first (for fingerprints)."""
        ...

    async def last_step_data(self, host: str, skill: str, key: str) -> dict[str, Any] | None:
        """Registered data of the newest step of `skill` on host that recorded `key`."""
        ...

    async def newest_steps(self, skill: str, limit: int = 1000) -> list[StepRow]:
        """The newest finished step of `skill` on each host, newest first (`eagle fleet`'s last checks)."""
        ...

    async def step_data_history(self, host: str, skills: list[str], contains: str, limit: int = 200,
            newest_first: bool = False) -> list[StepDataRow]:
        """Finished steps of `skills` on host whose registered data mentions `contains`, oldest first."""
        ...

    async def host_changes(self, host: str, after: int, upto: int) -> list[ChangeRow]:
        """File changes on a host by runs (after, upto], oldest first."""
        ...

    async def metrics_for_runs(self, run_ids: list[int]) -> dict[int, list[MetricRow]]:
        """Every metric of each run, in the order recorded (one query; runs without metrics absent)."""
        ...

    async def metric_value(self, run_id: int, name: str) -> float | None:
        """A run's first value of a metric, or None."""
        ...

    async def regression_counts(self, run_ids: list[int]) -> dict[int, int]:
        """Run id -> regressions flagged (kind `regression`), for the runs that have any."""
        ...

    async def flagged_runs(self, host: str, metric: str, run_ids: list[int]) -> set[int]:
        """Which of run_ids flagged a regression of metric on host."""
        ...

    async def update_regression_reason(self, run_id: int, host: str, metric: str, old: str, new: str) -> None:
        """Reword a regression's reason (e.g. once a later check attributes it)."""
        ...


class AsyncIncidentsFace(Protocol):
    """The `incidents`, `incident_runs` and `baselines` tables. (store.incidents)"""

    async def open_incident(self, *, playbook: str, host: str, metric: str, run_id: int,
            ref_before_run: int, reference: float | None, unit: str, better: str,
            cause_id: int | None = None) -> int:
        """A new open incident, flagged by `run_id`; its id. `cause_id`: the open incident of"""
        ...

    async def incident_flagged(self, incident_id: int, run_id: int) -> None:
        """Another run flagged the same open incident."""
        ...

    async def open_incident_for(self, playbook: str, host: str, metric: str) -> IncidentRow | None:
        """The open incident of a metric of playbook on host, or None."""
        ...

    async def incidents(self, *, playbook: str | None = None, host: str | None = None,
            status: str | None = "open", run_id: int | None = None, limit: int = 100) -> list[IncidentRow]:
        """Incidents newest first, by each criterion given (`run_id`: the ones it flagged)."""
        ...

    async def incident(self, incident_id: int) -> IncidentRow | None:
        """One incident row by id, whatever its state, or None."""
        ...

    async def incident_cause(self, incident_id: int) -> list[IncidentRow]:
        """Every metric's row of one incident (cause): the row of that id and the rows that joined it."""
        ...

    async def close_incident(self, incident_id: int, kind: str, by: str, reason: str,
            run_id: int | None = None) -> bool:
        """Close an open incident (kind: recovered, baseline or ack); False when it was not open."""
        ...

    async def reference_start(self, playbook: str, host: str, metric: str) -> int | None:
        """The first run a metric's reference may use: the baseline, or the start of the"""
        ...

    async def set_baseline(self, run_id: int, set_by: str) -> BaselineSet:
        """Make a run the baseline of its playbook on each of its hosts; KeyError for no such run."""
        ...

    async def baseline(self, playbook: str, host: str) -> BaselineRow | None:
        """The baseline of a playbook on a host, or None."""
        ...


class AsyncApprovalsFace(Protocol):
    """The `approvals` and `events` tables. (store.approvals)"""

    async def approval_requested(self, run_id: int, step_idx: int, host: str, step: str, action: str,
            details: list[str]) -> int:
        """A pending approval for one step on one host; its id."""
        ...

    async def approval_decided(self, approval_id: int, status: str, decided_by: str) -> bool:
        """Record a decision once; a second decision on the same request is refused."""
        ...

    async def get_approval(self, approval_id: int) -> ApprovalRow | None:
        """An approval by id, or None."""
        ...

    async def set_approval_message(self, approval_id: int, channel: str | None, ts: str | None,
            requester: str | None = None) -> None:
        """The Slack message that asks (and who asked); values not given are kept."""
        ...

    async def pending_approval(self, run_id: int, step_idx: int, host: str) -> ApprovalRow | None:
        """The newest pending approval of a step on a host, or None."""
        ...

    async def stale_approvals(self) -> list[StaleApprovalRow]:
        """Pending approvals whose run is no longer running (its process died): nobody waits on them."""
        ...

    async def add_event(self, run_id: int | None, kind: str, message: str) -> None:
        """A note on a run (or on the bot, run_id None)."""
        ...

    async def add_rejection(self, kind: str, actor: str, text: str, reason: str, run_id: int | None = None) -> None:
        """A refused request (kind `rejected` or `access_denied`): an event, never a run row."""
        ...

    async def events(self, kind: str | None = None, limit: int = 100) -> list[EventRow]:
        """Events newest first (of one kind, if given)."""
        ...


class AsyncLocksFace(Protocol):
    """The `locks` and `remote_procs` tables, and `recover`. (store.locks)"""

    async def recover(self) -> list[int]:
        """Turn `running` runs whose process is gone into `interrupted`; free their locks."""
        ...

    async def start_run(self, lock: list[str], run: NewRun) -> int:
        """Create the run row and lock `lock` in one transaction: a busy host raises HostBusy"""
        ...

    async def acquire_hosts(self, run_id: int, hosts: list[str]) -> None:
        """Lock every host for this run, all or none; a busy host raises HostBusy."""
        ...

    async def release_hosts(self, run_id: int) -> None:
        """Free the run's host locks (kept, ownerless, where its processes were not stopped)."""
        ...

    async def locks(self) -> list[LockRow]:
        """Every host lock, by host."""
        ...

    async def procs_record(self, run_id: int, step_id: int, host: str, *, tag: str, state: str, note: str,
            pgids: list[int] | None = None) -> int:
        """A step's processes had to be killed: `stopped` (verified gone) or `pending` (the"""
        ...

    async def steps_beside(self, host: str, run_id: int, after_id: int | None) -> tuple[int, list[StepRow]]:
        """(the newest step's id, the steps of other runs on `host` that may be running code:
        running under a lock on it, or started after `after_id`)."""
        ...

    async def pending_procs(self, host: str) -> list[RemoteProcRow]:
        """Process groups on host that a finished (or crashed) run did not stop."""
        ...

    async def procs_cleaned(self, proc_id: int, *, by_run: int, note: str) -> None:
        """The pending processes were stopped (or found gone) by run `by_run`; the step that"""
        ...

    async def step_procs(self, step_id: int) -> list[RemoteProcRow]:
        """The process records of one step."""
        ...


class AsyncBaseFace(Protocol):
    """The connection and the sealed write transaction every aggregate mixin writes through. (store.base)"""

    async def proc_tag(self, run_id: int, step_id: int) -> str:
        """The tag the processes of one step carry on their host (`<db_id>-<run>-<step>`)."""
        ...


class AsyncRunLog(AsyncBaseFace, AsyncRunsFace, AsyncStepsFace, AsyncApprovalsFace, AsyncLocksFace,
            Protocol):
    """What a run writes and reads back as it goes (the engine): the run, its steps and what they
    leave, approvals and events, host locks and the processes a step started."""

    @property
    def sync(self) -> RunLog:
        """The synchronous store underneath, as this slice."""
        ...

    async def call(self, fn: Callable[[RunLog], T]) -> T:
        """Run `fn(store)` on the store's side: several reads that belong together at once."""
        ...


class AsyncEngineStore(AsyncBaseFace, AsyncRunsFace, AsyncStepsFace, AsyncApprovalsFace, AsyncLocksFace,
            AsyncTrendsFace, AsyncIncidentsFace, AsyncHealthFace, AsyncSweepsFace, Protocol):
    """What the engine holds (`Engine.store`): the run's log (`RunLog`), the health guard's reads, the
    skills' `AuditView` (trends), and what it hands its store to: the post-run hooks (history's
    judgement and incidents, the fleet's health) and the tuning it runs (sweeps)."""

    @property
    def sync(self) -> EngineStore:
        """The synchronous store underneath, as this slice."""
        ...

    async def call(self, fn: Callable[[EngineStore], T]) -> T:
        """Run `fn(store)` on the store's side: several reads that belong together at once."""
        ...


class AsyncHistoryStore(AsyncRunsFace, AsyncStepsFace, AsyncTrendsFace, AsyncIncidentsFace,
            AsyncApprovalsFace, Protocol):
    """What history reads and records (regressions, incidents, baselines, fingerprints, trends, the
    warnings and events it leaves) and what the views of a run read."""

    @property
    def sync(self) -> HistoryStore:
        """The synchronous store underneath, as this slice."""
        ...

    async def call(self, fn: Callable[[HistoryStore], T]) -> T:
        """Run `fn(store)` on the store's side: several reads that belong together at once."""
        ...


class AsyncSchedulerStore(AsyncRunsFace, AsyncStepsFace, AsyncTrendsFace, AsyncIncidentsFace,
            AsyncApprovalsFace, AsyncSchedulesFace, AsyncReplicasFace, AsyncMaintenanceFace, Protocol):
    """What `eagle serve`'s scheduler reads and writes: the fires, their claims among the replicas and
    the pauses, each schedule's runs and what its report reads of them (history's reads: the run's
    view, its trends), and the audit head it posts."""

    @property
    def sync(self) -> SchedulerStore:
        """The synchronous store underneath, as this slice."""
        ...

    async def call(self, fn: Callable[[SchedulerStore], T]) -> T:
        """Run `fn(store)` on the store's side: several reads that belong together at once."""
        ...


class AsyncMetricsReads(AsyncIncidentsFace, AsyncHealthFace, AsyncTrendsFace, Protocol):
    """What `/metrics` reads of the store at each scrape: the open incidents, the quarantined GPUs and
    hosts, and the latest bench results per host."""

    @property
    def sync(self) -> MetricsReads:
        """The synchronous store underneath, as this slice."""
        ...

    async def call(self, fn: Callable[[MetricsReads], T]) -> T:
        """Run `fn(store)` on the store's side: several reads that belong together at once."""
        ...


class AsyncServiceState(AsyncSchedulesFace, AsyncReplicasFace, AsyncHealthFace, AsyncSweepsFace,
            AsyncApprovalsFace, AsyncLocksFace, Protocol):
    """What `eagle serve` keeps (schedules and their fires, the replicas' lease and heartbeats, Slack's
    seen requests, the health watch and the events it writes, sweeps)."""

    @property
    def sync(self) -> ServiceState:
        """The synchronous store underneath, as this slice."""
        ...

    async def call(self, fn: Callable[[ServiceState], T]) -> T:
        """Run `fn(store)` on the store's side: several reads that belong together at once."""
        ...


class AsyncStoreProtocol(AsyncRunsFace, AsyncStepsFace, AsyncTrendsFace, AsyncIncidentsFace,
            AsyncApprovalsFace, AsyncLocksFace, AsyncReplicasFace, AsyncSweepsFace, AsyncSchedulesFace,
            AsyncHealthFace, AsyncMaintenanceFace, AsyncBaseFace, Protocol):
    """The audit store for the event loop: every `StoreProtocol` method as a coroutine."""

    @property
    def sync(self) -> StoreProtocol:
        """The synchronous store underneath (e.g. its `db_id`, read without a thread hop)."""
        ...

    async def call(self, fn: Callable[[StoreProtocol], T]) -> T:
        """Run `fn(store)` on the store's side: several reads that belong together at once."""
        ...

    async def aclose(self) -> None:
        """Close the store and release what runs it."""
        ...
