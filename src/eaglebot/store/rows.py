"""The rows the store gives back, typed: one TypedDict per audit table (`select *` order),
then the results of queries that join or derive (their own keys).

Every backend returns these shapes with exactly these keys (tests/support/store_contract.py checks
it). Columns are nullable where the schema lets them be; the JSON columns of `runs`,
`sweeps` and `sweep_points` come back decoded, the others as the JSON text written.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NotRequired, Required, TypedDict

if TYPE_CHECKING:  # the engine's records (the sdk loads pydantic: `eagle history` does not)
    from eaglebot.sdk import FileChange, Metric, Regression


class NewRun(TypedDict, total=False):
    """A run to create (`start_run`): who asked, for what, from where; the rest is the store's."""
    playbook: Required[str]
    hosts: Required[list[str]]
    inputs: Required[dict[str, Any]]
    variables: Required[dict[str, Any]]
    actor: Required[str]
    origin: Required[str]
    dry_run: bool
    rerun_of: int | None
    parent_run_id: int | None       # the tune/sweep/bisect/draft-repair run that started this one
    schedule: str | None
    channel: str | None
    thread_ts: str | None
    source: str | None
    status: str


class StepEnd(TypedDict, total=False):
    """How a step ended (`step_finished`): its final row and what it left. `output` (when given)
    replaces the stored output; its size, SHA-256 and file are written with it."""
    run_id: Required[int]
    host: Required[str]
    status: Required[str]
    summary: Required[str]
    duration_ms: Required[int]
    attempts: Required[int]
    data: dict[str, Any] | None
    metrics: list[Metric] | None
    changes: list[FileChange] | None
    warnings: list[str] | None
    regressions: list[Regression] | None
    output: str | None
    output_bytes: int | None
    output_sha256: str | None
    output_file: str | None


class RunRow(TypedDict):
    id: int
    playbook: str
    status: str
    actor: str | None
    origin: str | None
    pid: int | None
    hostname: str | None
    proc_start: str | None
    hosts: list[str]                 # decoded from JSON
    inputs: dict[str, Any]           # decoded from JSON
    vars: dict[str, Any] | None      # decoded from JSON (rendered variables, saved at the end)
    started_at: str | None
    finished_at: str | None
    dry_run: int
    rerun_of: int | None
    schedule: str | None
    channel: str | None
    thread_ts: str | None
    cancel_requested: int
    error: str | None
    fingerprint: dict[str, Any] | None  # decoded from JSON
    exit_code: int | None
    source: str | None
    parent_run_id: int | None        # the tune/sweep/bisect/draft-repair run that started this one


class StepRow(TypedDict):
    id: int
    run_id: int
    idx: int
    section: str | None
    host: str
    name: str
    skill: str
    status: str
    summary: str | None
    output: str | None
    params: str | None               # JSON text, as written
    data: str | None                 # JSON text, as written
    attempts: int | None
    duration_ms: int | None
    started_at: str | None
    finished_at: str | None
    output_bytes: int | None
    output_sha256: str | None
    output_file: str | None


class MetricRow(TypedDict):
    id: int
    run_id: int
    step_id: int | None
    host: str
    name: str
    value: float
    unit: str | None
    better: str | None
    config_class: str | None


class ChangeRow(TypedDict):
    id: int
    run_id: int
    step_id: int | None
    host: str
    path: str
    before_sha256: str | None
    after_sha256: str | None
    diff: str | None
    backup_path: str | None
    created_at: str | None


class WarningRow(TypedDict):
    id: int
    run_id: int
    step_id: int | None
    host: str | None
    message: str


class RegressionRow(TypedDict):
    id: int
    run_id: int
    host: str | None
    metric: str
    value: float | None
    reference: float | None
    delta_pct: float | None
    reason: str | None
    kind: str | None


class EventRow(TypedDict):
    id: int
    run_id: int | None
    at: str
    kind: str
    message: str
    actor: str | None
    text: str | None
    reason: str | None


class ApprovalRow(TypedDict):
    id: int
    run_id: int
    step_idx: int
    host: str
    step: str
    action: str
    details: str | None
    status: str
    decided_by: str | None
    requested_at: str | None
    decided_at: str | None
    requester: str | None
    channel: str | None
    message_ts: str | None


class LockRow(TypedDict):
    host: str
    run_id: int
    pid: int | None
    hostname: str | None
    proc_start: str | None
    acquired_at: str | None
    reason: str | None


class BaselineRow(TypedDict):
    playbook: str
    host: str
    run_id: int
    set_by: str | None
    set_at: str | None


class ScheduleFireRow(TypedDict):
    id: int
    schedule: str
    fire_time: str
    run_id: int | None
    status: str
    recorded_at: str | None


class ScheduleStateRow(TypedDict):
    name: str
    paused: int
    changed_by: str | None
    changed_at: str | None


class IncidentRow(TypedDict):
    id: int
    playbook: str
    host: str
    metric: str
    status: str
    opened_run: int
    ref_before_run: int | None
    reference: float | None
    unit: str | None
    better: str | None
    opened_at: str | None
    last_run: int | None
    closed_run: int | None
    closed_at: str | None
    closed_kind: str | None
    closed_by: str | None
    reason: str | None
    cause_id: int | None             # the incident this metric's row belongs to (one cause), else NULL


class HealthStateRow(TypedDict):
    host: str
    gpu: int                         # -1: the host itself (its probe, nvidia-smi as a whole)
    state: str                       # healthy, suspect, quarantined, draining, drained, resuming
    since: str
    reason: str | None
    clean: int                       # clean probes in a row, towards clear_after
    actor: str | None
    channel: str | None              # the Slack message of this incident, updated in place
    message_ts: str | None
    silenced_until: str | None       # no alert updates for this incident until then (ISO time)
    silenced_by: str | None


class HealthEventRow(TypedDict):
    id: int
    host: str
    gpu: int
    kind: str                        # transition, xid, xid_expected (the bot's own teardown), silence, note, takeover
    code: int | None                 # the Xid (kinds xid, xid_expected)
    from_state: str | None           # an Xid's: the host's lifecycle window (teardown, launch, steady, idle)
    to_state: str | None
    reason: str | None
    actor: str | None
    at: str


class LifecycleStepRow(TypedDict):
    """A step that moves a host through the workload's lifecycle (`health_lifecycle_steps`)."""
    run_id: int
    skill: str                       # gpu.cleanup, server.stop, gpu.verify, server.launch
    status: str
    started_at: str | None
    finished_at: str | None
    run_status: str
    run_finished_at: str | None


class SweepRow(TypedDict):
    id: int
    kind: str
    playbook: str
    host: str
    spec: dict[str, Any]             # decoded from JSON
    status: str
    actor: str | None
    origin: str | None
    created_at: str | None
    finished_at: str | None
    result: dict[str, Any] | None    # decoded from JSON


class SweepPointRow(TypedDict):
    id: int
    sweep_id: int
    idx: int
    inputs: dict[str, Any]           # decoded from JSON
    status: str
    reason: str | None
    run_id: int | None
    result: dict[str, Any] | None    # decoded from JSON


class RemoteProcRow(TypedDict):
    id: int
    run_id: int
    step_id: int
    host: str
    tag: str
    pgids: str
    state: str
    note: str | None
    created_at: str | None
    cleaned_at: str | None
    step_started_at: NotRequired[str | None]   # (pending_procs: the step's start, to find its processes by)


# -- query results that are not one table's row ---------------------------------------------

class StaleApprovalRow(ApprovalRow):
    """An approval joined with its run (`stale_approvals`): where to resolve its message."""
    run_status: str
    run_channel: str | None
    run_thread_ts: str | None
    playbook: str


class LatestMetric(TypedDict):
    """The newest value of one metric of one playbook on one host (`latest_metrics`)."""
    host: str
    playbook: str
    name: str
    value: float
    run_id: int


class MetricPoint(TypedDict):
    """One value of a metric in a run (`metric_history`), with the run's start time."""
    run_id: int
    value: float
    unit: str | None
    better: str | None
    started_at: str | None
    config_class: str | None         # the configuration class it was measured under (None: not said)


class StepDataRow(TypedDict):
    """A finished step's registered data (`step_data_history`)."""
    run_id: int
    skill: str
    status: str
    data: str | None                 # JSON text, as written


class HostStepRow(TypedDict):
    """A finished step that says something about a host's state (`host_steps`)."""
    run_id: int
    skill: str
    status: str
    params: str | None               # JSON text, as written
    data: str | None                 # JSON text, as written


class FingerprintState(TypedDict):
    """A host's part of the newest run fingerprint that describes it (`last_fingerprinted_run`)."""
    run_id: int
    state: dict[str, Any]


class BaselineSet(TypedDict):
    """What `set_baseline` recorded: the run, its playbook and the hosts it is baseline of."""
    playbook: str
    hosts: list[str]
    run_id: int


class AuditHead(TypedDict):
    """The newest sealed link of the audit chain (None, None for an empty chain)."""
    seq: int | None
    hash: str | None


class LeaseRow(TypedDict):
    """Who holds a named lease (the leader's), since when, last renewed, and until when."""
    name: str
    holder: str
    acquired_at: str | None
    renewed_at: str | None
    expires_at: str | None


class ReplicaRow(TypedDict):
    """An `eagle serve` process sharing the store, as its last heartbeat described it."""
    id: str
    hostname: str | None
    pid: int | None
    proc_start: str | None
    started_at: str | None
    seen_at: str | None
    version: str | None
