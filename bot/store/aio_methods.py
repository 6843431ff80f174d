"""The methods of `AsyncStore` (store/aio.py): every store method run on the store's
writer thread, written out (no `__getattr__` forwarding) so a reader and mypy can follow a
call from a front end to the SQL.

Written by scripts/gen_store_aio.py from the store's mixins (do not edit).
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ParamSpec, TypeVar

from eaglebot.store.rows import (
    ApprovalRow, AuditHead, BaselineRow, BaselineSet, ChangeRow, EventRow, FingerprintState, HealthEventRow,
    HealthStateRow, HostStepRow, IncidentRow, LatestMetric, LeaseRow, LifecycleStepRow, LockRow, MetricPoint, NewRun,
    MetricRow,
    RegressionRow, RemoteProcRow, ReplicaRow, RunRow, ScheduleFireRow, ScheduleStateRow, StaleApprovalRow, StepDataRow,
    StepEnd, StepRow, SweepPointRow, SweepRow, WarningRow,
)
from eaglebot.store.sealing import AuditKey

if TYPE_CHECKING:
    from eaglebot.sdk import FileChange, Metric, Regression
    from eaglebot.store.db import Store

P = ParamSpec("P")
T = TypeVar("T")


class AsyncMethods:
    """Each store call awaited; `AsyncStore` gives the store (`sync`) and the thread (`_do`)."""

    sync: Store

    async def _do(self, fn: Callable[P, T], *args: P.args, **kw: P.kwargs) -> T:
        raise NotImplementedError

    async def create_run(self, run: NewRun) -> int:
        """A new run owned by this process (its pid and start time tell a crash apart); its id."""
        return await self._do(self.sync.create_run, run)

    async def finish_run(self, run_id: int, status: str, *, exit_code: int, error: str | None = None,
            fingerprint: dict[str, Any] | None = None) -> None:
        """How a run ended; a fingerprint given replaces the one recorded."""
        return await self._do(self.sync.finish_run, run_id, status, exit_code=exit_code, error=error,
            fingerprint=fingerprint)

    async def set_run_thread(self, run_id: int, channel: str | None, thread_ts: str | None) -> None:
        """The Slack thread that reports the run (set once its first message is posted)."""
        return await self._do(self.sync.set_run_thread, run_id, channel, thread_ts)

    async def request_cancel(self, run_id: int) -> bool:
        """Ask a running run to stop (its runner polls); False when it is not running."""
        return await self._do(self.sync.request_cancel, run_id)

    async def cancel_requested(self, run_id: int) -> bool:
        """Has someone asked this run to stop?"""
        return await self._do(self.sync.cancel_requested, run_id)

    async def get_run(self, run_id: int) -> RunRow | None:
        """One run by id, its JSON columns decoded, or None."""
        return await self._do(self.sync.get_run, run_id)

    async def history(self, *, playbook: str | None = None, host: str | None = None, limit: int = 20,
            status: str | None = None, origin: str | None = None, since: str | None = None,
            top_level: bool = False) -> list[RunRow]:
        """Runs newest first, filtered by each criterion given (`since`: started at or after;"""
        return await self._do(self.sync.history, playbook=playbook, host=host, limit=limit, status=status,
            origin=origin, since=since, top_level=top_level)

    async def child_counts(self, run_ids: list[int]) -> dict[int, int]:
        """Run id -> how many runs it started (tune, sweep, bisect), for the runs that started any."""
        return await self._do(self.sync.child_counts, run_ids)

    async def children(self, run_id: int) -> list[RunRow]:
        """The runs run_id started, oldest first."""
        return await self._do(self.sync.children, run_id)

    async def running_runs(self) -> list[RunRow]:
        """Runs still marked running, oldest first."""
        return await self._do(self.sync.running_runs)

    async def save_vars(self, run_id: int, variables: dict[str, Any]) -> None:
        """The resolved variables of each host of a run (redacted by the caller)."""
        return await self._do(self.sync.save_vars, run_id, variables)

    async def set_fingerprint(self, run_id: int, fingerprint: dict[str, Any]) -> None:
        """The run's fingerprint (each host's software and hardware state) before it ends."""
        return await self._do(self.sync.set_fingerprint, run_id, fingerprint)

    async def run_count(self) -> int:
        """How many runs the store holds (what an empty, filtered history says it left out)."""
        return await self._do(self.sync.run_count)

    async def last_run_id(self) -> int | None:
        """The newest run's id (None in an empty store)."""
        return await self._do(self.sync.last_run_id)

    async def last_schedule_run(self, schedule: str) -> RunRow | None:
        """The newest run a schedule started, or None."""
        return await self._do(self.sync.last_schedule_run, schedule)

    async def step_started(self, run_id: int, idx: int, host: str, name: str, skill: str,
            params: dict[str, Any], section: str = "steps") -> int:
        """A step begins on a host (status running, attempt 1); its id."""
        return await self._do(self.sync.step_started, run_id, idx, host, name, skill, params, section)

    async def step_output(self, step_id: int, text: str) -> None:
        """The streamed output so far, as kept in the store (head, marker, tail): replaces the last."""
        return await self._do(self.sync.step_output, step_id, text)

    async def step_attempt(self, step_id: int, attempts: int) -> None:
        """A retried step's attempt count."""
        return await self._do(self.sync.step_attempt, step_id, attempts)

    async def step_finished(self, step_id: int, end: StepEnd) -> None:
        """The step's final row and what it left (metrics, changes, warnings, regressions), in one"""
        return await self._do(self.sync.step_finished, step_id, end)

    async def close_open_steps(self, run_id: int, summary: str) -> int:
        """Steps of a finished run still marked `running` (their end was not recorded) become failed."""
        return await self._do(self.sync.close_open_steps, run_id, summary)

    async def add_regression(self, run_id: int, r: Regression, *, host: str = "", commit: bool = True) -> None:
        """A regression (or a note of kind other than `regression`) found by the history check;"""
        return await self._do(self.sync.add_regression, run_id, r, host=host, commit=commit)

    async def add_warning(self, run_id: int, host: str, message: str) -> None:
        """A warning of the run on a host, not tied to one step."""
        return await self._do(self.sync.add_warning, run_id, host, message)

    async def steps(self, run_id: int) -> list[StepRow]:
        """A run's steps in the order they started."""
        return await self._do(self.sync.steps, run_id)

    async def metrics(self, run_id: int) -> list[MetricRow]:
        """A run's metrics in the order recorded."""
        return await self._do(self.sync.metrics, run_id)

    async def changes(self, run_id: int) -> list[ChangeRow]:
        """A run's file changes in the order made."""
        return await self._do(self.sync.changes, run_id)

    async def warnings(self, run_id: int) -> list[WarningRow]:
        """A run's warnings in the order raised."""
        return await self._do(self.sync.warnings, run_id)

    async def regressions(self, run_id: int) -> list[RegressionRow]:
        """A run's regressions (and notes of other kinds) in the order found."""
        return await self._do(self.sync.regressions, run_id)

    async def last_backup(self, host: str, path: str, run_id: int | None = None) -> ChangeRow | None:
        """The newest change of a file on a host that kept a backup (of one run, if given)."""
        return await self._do(self.sync.last_backup, host, path, run_id)

    async def metric_history(self, playbook: str, host: str, metric: str, *,
            before_run: int | None = None, since_run: int | None = None, limit: int = 10,
            exclude_incident_runs: bool = False, config: str | None = None) -> list[MetricPoint]:
        """Values of one metric from successful runs of playbook+host, newest first."""
        return await self._do(self.sync.metric_history, playbook, host, metric, before_run=before_run,
            since_run=since_run, limit=limit, exclude_incident_runs=exclude_incident_runs, config=config)

    async def latest_metrics(self, names: list[str]) -> list[LatestMetric]:
        """The newest value of each of `names` per host and playbook, from successful real runs"""
        return await self._do(self.sync.latest_metrics, names)

    async def previous_good_run(self, playbook: str, host: str, before_run: int) -> RunRow | None:
        """The newest earlier run of playbook on host that succeeded without a flagged regression."""
        return await self._do(self.sync.previous_good_run, playbook, host, before_run)

    async def host_run_ids(self, host: str, *, after: int = 0, upto: int | None = None) -> list[int]:
        """Ids of the runs on a host in (after, upto], oldest first."""
        return await self._do(self.sync.host_run_ids, host, after=after, upto=upto)

    async def last_fingerprinted_run(self, host: str, upto: int) -> FingerprintState | None:
        """The newest run <= upto on host whose fingerprint describes that host (one row read,"""
        return await self._do(self.sync.last_fingerprinted_run, host, upto)

    async def host_steps(self, host: str, after: int, upto: int) -> list[HostStepRow]:
        """Finished steps of runs (after, upto] on host, oldest first (for fingerprints)."""
        return await self._do(self.sync.host_steps, host, after, upto)

    async def last_step_data(self, host: str, skill: str, key: str) -> dict[str, Any] | None:
        """Registered data of the newest step of `skill` on host that recorded `key`."""
        return await self._do(self.sync.last_step_data, host, skill, key)

    async def newest_steps(self, skill: str, limit: int = 1000) -> list[StepRow]:
        """The newest finished step of `skill` on each host, newest first (`eagle fleet`'s last checks)."""
        return await self._do(self.sync.newest_steps, skill, limit)

    async def step_data_history(self, host: str, skills: list[str], contains: str, limit: int = 200,
            newest_first: bool = False) -> list[StepDataRow]:
        """Finished steps of `skills` on host whose registered data mentions `contains`, oldest first."""
        return await self._do(self.sync.step_data_history, host, skills, contains, limit, newest_first)

    async def host_changes(self, host: str, after: int, upto: int) -> list[ChangeRow]:
        """File changes on a host by runs (after, upto], oldest first."""
        return await self._do(self.sync.host_changes, host, after, upto)

    async def metrics_for_runs(self, run_ids: list[int]) -> dict[int, list[MetricRow]]:
        """Every metric of each run, in the order recorded (one query; runs without metrics absent)."""
        return await self._do(self.sync.metrics_for_runs, run_ids)

    async def metric_value(self, run_id: int, name: str) -> float | None:
        """A run's first value of a metric, or None."""
        return await self._do(self.sync.metric_value, run_id, name)

    async def regression_counts(self, run_ids: list[int]) -> dict[int, int]:
        """Run id -> regressions flagged (kind `regression`), for the runs that have any."""
        return await self._do(self.sync.regression_counts, run_ids)

    async def flagged_runs(self, host: str, metric: str, run_ids: list[int]) -> set[int]:
        """Which of run_ids flagged a regression of metric on host."""
        return await self._do(self.sync.flagged_runs, host, metric, run_ids)

    async def update_regression_reason(self, run_id: int, host: str, metric: str, old: str, new: str) -> None:
        """Reword a regression's reason (e.g. once a later check attributes it)."""
        return await self._do(self.sync.update_regression_reason, run_id, host, metric, old, new)

    async def open_incident(self, *, playbook: str, host: str, metric: str, run_id: int,
            ref_before_run: int, reference: float | None, unit: str, better: str,
            cause_id: int | None = None) -> int:
        """A new open incident, flagged by `run_id`; its id. `cause_id`: the open incident of"""
        return await self._do(self.sync.open_incident, playbook=playbook, host=host, metric=metric,
            run_id=run_id, ref_before_run=ref_before_run, reference=reference, unit=unit, better=better,
            cause_id=cause_id)

    async def incident_flagged(self, incident_id: int, run_id: int) -> None:
        """Another run flagged the same open incident."""
        return await self._do(self.sync.incident_flagged, incident_id, run_id)

    async def open_incident_for(self, playbook: str, host: str, metric: str) -> IncidentRow | None:
        """The open incident of a metric of playbook on host, or None."""
        return await self._do(self.sync.open_incident_for, playbook, host, metric)

    async def incidents(self, *, playbook: str | None = None, host: str | None = None,
            status: str | None = "open", run_id: int | None = None, limit: int = 100) -> list[IncidentRow]:
        """Incidents newest first, by each criterion given (`run_id`: the ones it flagged)."""
        return await self._do(self.sync.incidents, playbook=playbook, host=host, status=status,
            run_id=run_id, limit=limit)

    async def incident(self, incident_id: int) -> IncidentRow | None:
        """One incident row by id, whatever its state, or None."""
        return await self._do(self.sync.incident, incident_id)

    async def incident_cause(self, incident_id: int) -> list[IncidentRow]:
        """Every metric's row of one incident (cause): the row of that id and the rows that joined it."""
        return await self._do(self.sync.incident_cause, incident_id)

    async def close_incident(self, incident_id: int, kind: str, by: str, reason: str,
            run_id: int | None = None) -> bool:
        """Close an open incident (kind: recovered, baseline or ack); False when it was not open."""
        return await self._do(self.sync.close_incident, incident_id, kind, by, reason, run_id)

    async def reference_start(self, playbook: str, host: str, metric: str) -> int | None:
        """The first run a metric's reference may use: the baseline, or the start of the"""
        return await self._do(self.sync.reference_start, playbook, host, metric)

    async def set_baseline(self, run_id: int, set_by: str) -> BaselineSet:
        """Make a run the baseline of its playbook on each of its hosts; KeyError for no such run."""
        return await self._do(self.sync.set_baseline, run_id, set_by)

    async def baseline(self, playbook: str, host: str) -> BaselineRow | None:
        """The baseline of a playbook on a host, or None."""
        return await self._do(self.sync.baseline, playbook, host)

    async def approval_requested(self, run_id: int, step_idx: int, host: str, step: str, action: str,
            details: list[str]) -> int:
        """A pending approval for one step on one host; its id."""
        return await self._do(self.sync.approval_requested, run_id, step_idx, host, step, action, details)

    async def approval_decided(self, approval_id: int, status: str, decided_by: str) -> bool:
        """Record a decision once; a second decision on the same request is refused."""
        return await self._do(self.sync.approval_decided, approval_id, status, decided_by)

    async def get_approval(self, approval_id: int) -> ApprovalRow | None:
        """An approval by id, or None."""
        return await self._do(self.sync.get_approval, approval_id)

    async def set_approval_message(self, approval_id: int, channel: str | None, ts: str | None,
            requester: str | None = None) -> None:
        """The Slack message that asks (and who asked); values not given are kept."""
        return await self._do(self.sync.set_approval_message, approval_id, channel, ts, requester)

    async def pending_approval(self, run_id: int, step_idx: int, host: str) -> ApprovalRow | None:
        """The newest pending approval of a step on a host, or None."""
        return await self._do(self.sync.pending_approval, run_id, step_idx, host)

    async def stale_approvals(self) -> list[StaleApprovalRow]:
        """Pending approvals whose run is no longer running (its process died): nobody waits on them."""
        return await self._do(self.sync.stale_approvals)

    async def add_event(self, run_id: int | None, kind: str, message: str) -> None:
        """A note on a run (or on the bot, run_id None)."""
        return await self._do(self.sync.add_event, run_id, kind, message)

    async def add_rejection(self, kind: str, actor: str, text: str, reason: str, run_id: int | None = None) -> None:
        """A refused request (kind `rejected` or `access_denied`): an event, never a run row."""
        return await self._do(self.sync.add_rejection, kind, actor, text, reason, run_id)

    async def events(self, kind: str | None = None, limit: int = 100) -> list[EventRow]:
        """Events newest first (of one kind, if given)."""
        return await self._do(self.sync.events, kind, limit)

    async def recover(self) -> list[int]:
        """Turn `running` runs whose process is gone into `interrupted`; free their locks."""
        return await self._do(self.sync.recover)

    async def start_run(self, lock: list[str], run: NewRun) -> int:
        """Create the run row and lock `lock` in one transaction: a busy host raises HostBusy"""
        return await self._do(self.sync.start_run, lock, run)

    async def acquire_hosts(self, run_id: int, hosts: list[str]) -> None:
        """Lock every host for this run, all or none; a busy host raises HostBusy."""
        return await self._do(self.sync.acquire_hosts, run_id, hosts)

    async def release_hosts(self, run_id: int) -> None:
        """Free the run's host locks (kept, ownerless, where its processes were not stopped)."""
        return await self._do(self.sync.release_hosts, run_id)

    async def locks(self) -> list[LockRow]:
        """Every host lock, by host."""
        return await self._do(self.sync.locks)

    async def procs_record(self, run_id: int, step_id: int, host: str, *, tag: str, state: str, note: str,
            pgids: list[int] | None = None) -> int:
        """A step's processes had to be killed: `stopped` (verified gone) or `pending` (the"""
        return await self._do(self.sync.procs_record, run_id, step_id, host, tag=tag, state=state,
            note=note, pgids=pgids)

    async def steps_beside(self, host: str, run_id: int, after_id: int | None) -> tuple[int, list[StepRow]]:
        """(the newest step's id, the steps of other runs on `host` that may be running code:
        running under a lock on it, or started after `after_id`)."""
        return await self._do(self.sync.steps_beside, host, run_id, after_id)

    async def pending_procs(self, host: str) -> list[RemoteProcRow]:
        """Process groups on host that a finished (or crashed) run did not stop."""
        return await self._do(self.sync.pending_procs, host)

    async def procs_cleaned(self, proc_id: int, *, by_run: int, note: str) -> None:
        """The pending processes were stopped (or found gone) by run `by_run`; the step that"""
        return await self._do(self.sync.procs_cleaned, proc_id, by_run=by_run, note=note)

    async def step_procs(self, step_id: int) -> list[RemoteProcRow]:
        """The process records of one step."""
        return await self._do(self.sync.step_procs, step_id)

    async def claim_requests(self, keys: list[str], window_s: float, max_keys: int) -> bool:
        """Record a Slack request's `keys` for `window_s`, for every replica: True when none was"""
        return await self._do(self.sync.claim_requests, keys, window_s, max_keys)

    async def lease_acquire(self, name: str, holder: str, ttl_s: float) -> bool:
        """Take the lease `name` if it is free or expired, renew it if `holder` has it; True"""
        return await self._do(self.sync.lease_acquire, name, holder, ttl_s)

    async def lease_release(self, name: str, holder: str) -> None:
        """Give the lease up at once (a replica stopping cleanly), if `holder` has it."""
        return await self._do(self.sync.lease_release, name, holder)

    async def lease_holder(self, name: str) -> LeaseRow | None:
        """The lease's row (holder, acquired, renewed, expires), expired or not; None if free."""
        return await self._do(self.sync.lease_holder, name)

    async def replica_beat(self, replica_id: str, *, hostname: str, pid: int, proc_start: str | None,
            version: str) -> None:
        """A replica is alive now (its first beat records when it started); replicas gone"""
        return await self._do(self.sync.replica_beat, replica_id, hostname=hostname, pid=pid,
            proc_start=proc_start, version=version)

    async def replicas(self) -> list[ReplicaRow]:
        """Every replica that beat within the last day, most recently seen first."""
        return await self._do(self.sync.replicas)

    async def claim_fire(self, schedule: str, fire_time: str, holder: str) -> int | None:
        """Claim one fire of a schedule (its slot's time, the same on every replica) and record"""
        return await self._do(self.sync.claim_fire, schedule, fire_time, holder)

    async def create_sweep(self, *, kind: str, playbook: str, host: str, spec: dict[str, Any], actor: str,
            origin: str, points: list[tuple[dict[str, Any], str, str]]) -> int:
        """A sweep and its points: (inputs, status 'pending' or 'skipped', reason)."""
        return await self._do(self.sync.create_sweep, kind=kind, playbook=playbook, host=host, spec=spec,
            actor=actor, origin=origin, points=points)

    async def get_sweep(self, sweep_id: int) -> SweepRow | None:
        """A sweep by id, spec and result decoded, or None."""
        return await self._do(self.sync.get_sweep, sweep_id)

    async def sweep_points(self, sweep_id: int) -> list[SweepPointRow]:
        """A sweep's points in grid order, inputs ({} if none) and result decoded."""
        return await self._do(self.sync.sweep_points, sweep_id)

    async def sweep_point_done(self, sweep_id: int, idx: int, status: str, run_id: int | None,
            result: dict[str, Any] | None, reason: str = "") -> None:
        """How one point ended: its run and what it measured."""
        return await self._do(self.sync.sweep_point_done, sweep_id, idx, status, run_id, result, reason)

    async def add_sweep_point(self, sweep_id: int, inputs: dict[str, Any]) -> int:
        """Append a pending point (a bisection's next probe); its index."""
        return await self._do(self.sync.add_sweep_point, sweep_id, inputs)

    async def finish_sweep(self, sweep_id: int, status: str, result: dict[str, Any] | None) -> None:
        """How the sweep ended, and its result."""
        return await self._do(self.sync.finish_sweep, sweep_id, status, result)

    async def record_fire(self, schedule: str, fire_time: str, status: str, run_id: int | None = None) -> int:
        """A schedule fired (or was skipped) for `fire_time`; the fire's id."""
        return await self._do(self.sync.record_fire, schedule, fire_time, status, run_id)

    async def update_fire(self, fire_id: int, status: str, run_id: int | None = None) -> None:
        """A fire's outcome (and the run it started, when known)."""
        return await self._do(self.sync.update_fire, fire_id, status, run_id)

    async def last_fire(self, schedule: str) -> ScheduleFireRow | None:
        """A schedule's latest fire (by fire time), or None."""
        return await self._do(self.sync.last_fire, schedule)

    async def schedule_fires(self, schedule: str, since: str = "", limit: int = 100) -> list[ScheduleFireRow]:
        """A schedule's fires at or after `since` (ISO time; "" from the first), oldest first."""
        return await self._do(self.sync.schedule_fires, schedule, since, limit)

    async def set_schedule_paused(self, name: str, paused: bool, changed_by: str) -> bool:
        """Pause or resume a schedule; False when it already was in that state."""
        return await self._do(self.sync.set_schedule_paused, name, paused, changed_by)

    async def schedule_states(self) -> dict[str, ScheduleStateRow]:
        """Schedule name -> its paused state, for the schedules ever paused or resumed."""
        return await self._do(self.sync.schedule_states)

    async def health_states(self, host: str | None = None) -> list[HealthStateRow]:
        """Every host's and GPU's state row (healthy ones included once they had a finding), by host, GPU."""
        return await self._do(self.sync.health_states, host)

    async def health_transition(self, host: str, gpu: int, state: str, reason: str, actor: str) -> bool:
        """Move one host's GPU (-1: the host) to `state` with its reason and actor, as one event;"""
        return await self._do(self.sync.health_transition, host, gpu, state, reason, actor)

    async def health_set_clean(self, host: str, gpu: int, clean: int) -> None:
        """The clean probes counted in a row towards clearing one host's GPU (0: a finding again)."""
        return await self._do(self.sync.health_set_clean, host, gpu, clean)

    async def health_set_alert(self, host: str, gpu: int, channel: str | None, message_ts: str | None) -> None:
        """The Slack message of the incident of one host's GPU (updated in place as it evolves)."""
        return await self._do(self.sync.health_set_alert, host, gpu, channel, message_ts)

    async def health_silence(self, host: str, gpu: int, until: str, by: str) -> bool:
        """Silence the alerts of one host's GPU incident until `until` (ISO time), as an event;"""
        return await self._do(self.sync.health_silence, host, gpu, until, by)

    async def health_record_xid(self, host: str, gpu: int, code: int, reason: str,
            window: str | None = None, expected: bool = False, at: str | None = None) -> None:
        """An Xid the watch read from a host's kernel log (each one once), with the lifecycle"""
        return await self._do(self.sync.health_record_xid, host, gpu, code, reason, window, expected, at)

    async def health_note(self, host: str, gpu: int, reason: str, actor: str, kind: str = "note") -> None:
        """Something the watch said about one host's GPU without changing its state (it left a"""
        return await self._do(self.sync.health_note, host, gpu, reason, actor, kind)

    async def health_lifecycle_steps(self, host: str, limit: int = 64) -> list[LifecycleStepRow]:
        """The newest `limit` steps on a host that kill, verify or launch (the watch's lifecycle"""
        return await self._do(self.sync.health_lifecycle_steps, host, limit)

    async def health_xid_count(self, host: str, gpu: int, code: int, since: str) -> int:
        """How many times Xid `code` was read on one host's GPU at or after `since` (ISO time)."""
        return await self._do(self.sync.health_xid_count, host, gpu, code, since)

    async def health_events(self, host: str | None = None, limit: int = 100) -> list[HealthEventRow]:
        """The watch's events, newest first (of one host when given)."""
        return await self._do(self.sync.health_events, host, limit)

    async def health_held(self, host: str) -> HealthStateRow | None:
        """The row that keeps a host out of relaunch, bench and schedules (quarantined or being"""
        return await self._do(self.sync.health_held, host)

    async def health_cursor(self, host: str) -> float | None:
        """How far (kernel log seconds) the watch has read a host's kernel log, or None (never)."""
        return await self._do(self.sync.health_cursor, host)

    async def health_set_cursor(self, host: str, cursor: float | None, status: str) -> None:
        """A host's probe ended: its kernel log cursor and the probe's status (ok, hung, failed)."""
        return await self._do(self.sync.health_set_cursor, host, cursor, status)

    async def audit_verify(self, head: str | None = None, key: AuditKey | list[AuditKey] | None = None) -> dict[str, Any]:
        """Walk the audit hash chain (`eagle audit verify`): ok, head, first_broken, problems,"""
        return await self._do(self.sync.audit_verify, head, key)

    async def audit_rotate_key(self) -> AuditKey:
        """`eagle audit rotate-key`: a sealed 'R' entry names the next key, and the key file is"""
        return await self._do(self.sync.audit_rotate_key)

    async def run_audit_problems(self, run_id: int) -> list[str]:
        """One run's rows (the run, its steps, metrics, changes, approvals, events, warnings,"""
        return await self._do(self.sync.run_audit_problems, run_id)

    async def audit_head(self) -> AuditHead:
        """The newest sealed link of the audit chain: the anchor posted outside the DB."""
        return await self._do(self.sync.audit_head)

    async def backup(self, dest: Path) -> AuditHead:
        """A consistent copy of the whole DB (SQLite's online backup: the bot may keep"""
        return await self._do(self.sync.backup, dest)

    async def check_writable(self) -> None:
        """Raise if the audit DB cannot take a write lock now (doctor)."""
        return await self._do(self.sync.check_writable)

    async def prune_count(self, older_than: timedelta) -> int:
        """How many runs `prune(older_than)` would delete."""
        return await self._do(self.sync.prune_count, older_than)

    async def prune(self, older_than: timedelta) -> int:
        """Delete finished runs started before now - older_than, with their child rows."""
        return await self._do(self.sync.prune, older_than)

    async def proc_tag(self, run_id: int, step_id: int) -> str:
        """The tag the processes of one step carry on their host (`<db_id>-<run>-<step>`)."""
        return await self._do(self.sync.proc_tag, run_id, step_id)
