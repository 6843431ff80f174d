"""The audit DB's schema, as named migrations applied in order, each in one transaction.

The shape of sqlite-utils' `Migrations` (named functions over a `Database`, ordered, each
applied once inside a transaction with its record), kept here rather than used because the
store needs three things it does not do: the record is `PRAGMA user_version` (what every
existing DB already carries, so v1..v8 files migrate as before), the transaction is the
store's `_tx` (BEGIN IMMEDIATE: one process migrates while the others wait; the audit chain
is sealed before COMMIT), and the chained migrations add an 'M' entry to the chain
(`chain.record_migration`). Every migration is idempotent (tables, columns and indexes are
created only when missing), so a DB edited back to an older version still converges.

To change the schema: append a migration with the next number; if it touches a chained
table, add its columns to `chain.CHAIN_SCHEMA` under that number and record it. A new table
is made with `db.table(name).create(...)` (on PostgreSQL that gives it the hidden `rowid` the
chain names rows by, store/pg_conn.py); indexes and added columns are plain DDL both take.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from eaglebot.store import chain
from eaglebot.store.base import Database, StoreBase


@dataclass(frozen=True)
class Migration:
    """One schema change: `fn(db, from_version)`, where from_version is the version the DB
    had before this opening's migrations (the chain's genesis entry says where it started)."""

    version: int
    name: str
    fn: Callable[[Database, int], None]


def _initial(db: Database, from_version: int) -> None:
    """The audit tables of schema v1 and their indexes."""
    db.table("runs").create({
        "id": int, "playbook": str, "status": str, "actor": str, "origin": str,
        "pid": int, "hostname": str, "proc_start": str, "hosts": str, "inputs": str,
        "vars": str, "started_at": str, "finished_at": str, "dry_run": int,
        "rerun_of": int, "schedule": str, "channel": str, "thread_ts": str,
        "cancel_requested": int, "error": str, "fingerprint": str, "exit_code": int,
        "source": str,
    }, pk="id", if_not_exists=True, not_null={"playbook", "status"},
        defaults={"cancel_requested": 0, "dry_run": 0})
    db.table("steps").create({
        "id": int, "run_id": int, "idx": int, "section": str, "host": str, "name": str,
        "skill": str, "status": str, "summary": str, "output": str, "params": str,
        "data": str, "attempts": int, "duration_ms": int, "started_at": str,
        "finished_at": str,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
    db.table("metrics").create({
        "id": int, "run_id": int, "step_id": int, "host": str, "name": str,
        "value": float, "unit": str, "better": str,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
    db.table("changes").create({
        "id": int, "run_id": int, "step_id": int, "host": str, "path": str,
        "before_sha256": str, "after_sha256": str, "diff": str, "backup_path": str,
        "created_at": str,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
    db.table("warnings").create({
        "id": int, "run_id": int, "step_id": int, "host": str, "message": str,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
    db.table("regressions").create({
        "id": int, "run_id": int, "host": str, "metric": str, "value": float,
        "reference": float, "delta_pct": float, "reason": str, "kind": str,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
    db.table("approvals").create({
        "id": int, "run_id": int, "step_idx": int, "host": str, "step": str,
        "action": str, "details": str, "status": str, "decided_by": str,
        "requested_at": str, "decided_at": str,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
    db.table("locks").create({
        "host": str, "run_id": int, "pid": int, "hostname": str, "proc_start": str,
        "acquired_at": str,
    }, pk="host", if_not_exists=True)
    db.table("baselines").create({
        "playbook": str, "host": str, "run_id": int, "set_by": str, "set_at": str,
    }, pk=("playbook", "host"), if_not_exists=True)
    db.table("schedule_fires").create({
        "id": int, "schedule": str, "fire_time": str, "run_id": int, "status": str,
        "recorded_at": str,
    }, pk="id", if_not_exists=True)
    db.table("events").create({
        "id": int, "run_id": int, "at": str, "kind": str, "message": str,
    }, pk="id", if_not_exists=True)
    for table, cols in {
        "runs": [["started_at"], ["playbook", "started_at"], ["status"]],
        "steps": [["run_id", "idx"]],
        "metrics": [["run_id"], ["host", "name"]],
        "changes": [["run_id"], ["host", "path"]],
        "warnings": [["run_id"]],
        "regressions": [["run_id"]],
        "approvals": [["run_id"]],
    }.items():
        for c in cols:
            db.table(table).create_index(c, if_not_exists=True)


def _run_hosts(db: Database, from_version: int) -> None:
    """run_hosts: one row per (run, host), so `history --host` is an index lookup, not a
    json_each scan of every run; backfilled from runs.hosts. Plus the indexes the regression
    check and `schedule list` query by."""
    db.table("run_hosts").create({"run_id": int, "host": str}, pk=("host", "run_id"),
                                 foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
    db.table("run_hosts").create_index(["run_id"], if_not_exists=True)
    db.table("runs").create_index(["playbook", "id"], if_not_exists=True)
    db.table("runs").create_index(["schedule", "id"], if_not_exists=True)
    db.table("metrics").create_index(["host", "name", "run_id"], if_not_exists=True)
    db.table("steps").create_index(["host", "skill", "run_id"], if_not_exists=True)
    db.table("changes").create_index(["host", "run_id"], if_not_exists=True)
    db.table("schedule_fires").create_index(["schedule", "fire_time"], if_not_exists=True)
    db.execute(chain.dialect(db).backfill_run_hosts_sql())


def _events_approvals(db: Database, from_version: int) -> None:
    """events: who, the text and why of a rejected request (a rejection is an event, not a
    run row); approvals: the Slack message asking (resolved visibly after a restart) and the
    requester (no self-approval); schedule_state: schedules paused from Slack."""
    for table, cols in {"events": {"actor": str, "text": str, "reason": str},
                        "approvals": {"requester": str, "channel": str, "message_ts": str}}.items():
        have = set(db.table(table).columns_dict)
        for col, typ in cols.items():
            if col not in have:
                db.table(table).add_column(col, typ)
    db.table("events").create_index(["kind", "id"], if_not_exists=True)
    db.table("approvals").create_index(["status"], if_not_exists=True)
    db.table("schedule_state").create({"name": str, "paused": int, "changed_by": str, "changed_at": str},
                                      pk="name", if_not_exists=True)


def _incidents_sweeps(db: Database, from_version: int) -> None:
    """Regression incidents (open until recovery, a baseline or an ack; the runs they
    flagged stay out of the reference window) and parameter sweeps (resumable: one row
    per grid point)."""
    db.table("incidents").create({
        "id": int, "playbook": str, "host": str, "metric": str, "status": str, "opened_run": int,
        "ref_before_run": int, "reference": float, "unit": str, "better": str, "opened_at": str,
        "last_run": int, "closed_run": int, "closed_at": str, "closed_kind": str, "closed_by": str,
        "reason": str,
    }, pk="id", if_not_exists=True)
    db.table("incidents").create_index(["playbook", "host", "metric", "status"], if_not_exists=True)
    db.table("incident_runs").create({"incident_id": int, "run_id": int}, pk=("incident_id", "run_id"),
                                     foreign_keys=[("incident_id", "incidents", "id")], if_not_exists=True)
    db.table("incident_runs").create_index(["run_id"], if_not_exists=True)
    db.table("sweeps").create({
        "id": int, "kind": str, "playbook": str, "host": str, "spec": str, "status": str, "actor": str,
        "origin": str, "created_at": str, "finished_at": str, "result": str,
    }, pk="id", if_not_exists=True)
    db.table("sweep_points").create({
        "id": int, "sweep_id": int, "idx": int, "inputs": str, "status": str, "reason": str,
        "run_id": int, "result": str,
    }, pk="id", foreign_keys=[("sweep_id", "sweeps", "id")], if_not_exists=True)
    db.table("sweep_points").create_index(["sweep_id", "idx"], unique=True, if_not_exists=True)


def _audit_chain(db: Database, from_version: int) -> None:
    """audit_chain: the tamper-evident hash chain over the audit tables (store/chain.py); an
    existing DB's chain starts here with a genesis entry that says from which version. The
    seal columns (v7's) come with it, so a configured key seals the genesis entry too."""
    chain.create_chain_table(db, from_version)
    chain.add_seal_columns(db)


def _remote_procs(db: Database, from_version: int) -> None:
    """remote_procs: the process groups (and the session marker their descendants carry in
    their environment) each step started on its host, so a timeout, a cancel, a lost
    connection or a restart after a crash can stop them; locks.reason says why a lock is
    kept after its run (its processes could not be stopped yet); meta: this DB's random id."""
    db.table("remote_procs").create({
        "id": int, "run_id": int, "step_id": int, "host": str, "tag": str, "pgids": str,
        "state": str, "note": str, "created_at": str, "cleaned_at": str,
    }, pk="id", foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
    db.table("remote_procs").create_index(["host", "state"], if_not_exists=True)
    db.table("remote_procs").create_index(["step_id"], if_not_exists=True)
    if "reason" not in db.table("locks").columns_dict:
        db.execute("alter table locks add column reason text")
    db.table("meta").create({"key": str, "value": str}, pk="key", if_not_exists=True)
    db.execute("insert into meta (key, value) values ('db_id', $1) on conflict do nothing", [os.urandom(6).hex()])


def _chain_seals(db: Database, from_version: int) -> None:
    """The chain's columns come from the code (chain.CHAIN_SCHEMA), recorded in a chained
    migration entry; entries get an epoch and a keyed seal; remote_procs, schedule_fires,
    run_hosts and meta join the chain (their rows snapshotted once, here)."""
    chain.add_seal_columns(db)
    chain.record_migration(db, 7)


def _step_output_file(db: Database, from_version: int) -> None:
    """A step's whole output lives in a gzip file in the bot's output folder (the row keeps
    a head and a tail): its size, the SHA-256 of its uncompressed bytes, and its absolute
    path (NULL when the step printed nothing)."""
    have = set(db.table("steps").columns_dict)
    for col, typ in (("output_bytes", "integer"), ("output_sha256", "text"), ("output_file", "text")):
        if col not in have:
            db.execute(f"alter table steps add column {col} {typ}")
    chain.record_migration(db, 8)


def _incident_causes(db: Database, from_version: int) -> None:
    """incidents.cause_id: the incident a metric's row belongs to when several metrics moved
    at one change point on one playbook + host (one cause, one incident to ack); NULL for
    the incident's own first row."""
    if "cause_id" not in db.table("incidents").columns_dict:
        db.execute("alter table incidents add column cause_id integer")
    db.table("incidents").create_index(["cause_id"], if_not_exists=True)
    chain.record_migration(db, 9)


def _health_watch(db: Database, from_version: int) -> None:
    """The fleet health watch: `health_state` (one row per host and GPU, -1 for the host
    itself: its state, since when, why, the clean probes counted towards clearing, and the
    Slack message of its incident, and until when someone silenced its alerts), `health_events` (every transition with reason and actor,
    and every Xid seen, for the policy's fail_after window), both chained; `health_cursors`
    (per host, how far its kernel log was read) is transient like locks, not chained."""
    db.table("health_state").create({
        "host": str, "gpu": int, "state": str, "since": str, "reason": str, "clean": int, "actor": str,
        "channel": str, "message_ts": str, "silenced_until": str, "silenced_by": str,
    }, pk=("host", "gpu"), if_not_exists=True, defaults={"clean": 0})
    db.table("health_events").create({
        "id": int, "host": str, "gpu": int, "kind": str, "code": int, "from_state": str, "to_state": str,
        "reason": str, "actor": str, "at": str,
    }, pk="id", if_not_exists=True)
    db.table("health_events").create_index(["host", "gpu", "kind", "code", "at"], if_not_exists=True)
    db.table("health_cursors").create({"host": str, "cursor": float, "probed_at": str, "status": str},
                                      pk="host", if_not_exists=True)
    chain.record_migration(db, 10)


def _replicas(db: Database, from_version: int) -> None:
    """Several `eagle serve` replicas on one store: `leases` (a named lease with an expiry: the
    replica holding `leader` fires schedules and runs the health watch), `replicas` (each
    replica's heartbeat, so another machine's rows can be judged dead) and `schedule_claims`
    (one row per schedule and fire time: a fire is started once, whatever replica fires it).
    Transient coordination like `locks`, not chained; leadership changes are `leader` events."""
    db.table("leases").create({"name": str, "holder": str, "acquired_at": str, "renewed_at": str, "expires_at": str},
                              pk="name", not_null={"holder"}, if_not_exists=True)
    db.table("replicas").create({"id": str, "hostname": str, "pid": int, "proc_start": str, "started_at": str,
                                 "seen_at": str, "version": str}, pk="id", if_not_exists=True)
    db.table("schedule_claims").create({"schedule": str, "fire_time": str, "holder": str, "fire_id": int,
                                        "claimed_at": str}, pk=("schedule", "fire_time"),
                                       not_null={"schedule", "fire_time"}, if_not_exists=True)


def _seen_requests(db: Database, from_version: int) -> None:
    """`seen_requests`: the Slack requests every replica has answered within Slack's replay
    window (a key, the SHA-256 of the request's body, and when it may be forgotten), so a copy
    delivered to another replica is answered once. Transient like `leases`, not chained: a
    refused copy is recorded as a `rejected` event."""
    db.table("seen_requests").create({"key": str, "expires_at": str}, pk="key", not_null={"expires_at"},
                                     if_not_exists=True)
    db.execute("create index if not exists seen_requests_expiry on seen_requests (expires_at)")


def _metric_class_parent_run(db: Database, from_version: int) -> None:
    """metrics.config_class: the configuration class a value was measured under (speculative
    algorithm, target, TP size, benchmark shape; NULL when the skill did not say), so a value is
    judged only against values of its own class; runs.parent_run_id: the run (tune, sweep, bisect,
    draft-repair) that started this one, so history shows one row per operation."""
    if "config_class" not in db.table("metrics").columns_dict:
        db.execute("alter table metrics add column config_class text")
    if "parent_run_id" not in db.table("runs").columns_dict:
        db.execute("alter table runs add column parent_run_id integer")
    db.table("runs").create_index(["parent_run_id"], if_not_exists=True)
    chain.record_migration(db, 13)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "0001_initial", _initial),
    Migration(2, "0002_run_hosts", _run_hosts),
    Migration(3, "0003_events_approvals", _events_approvals),
    Migration(4, "0004_incidents_sweeps", _incidents_sweeps),
    Migration(5, "0005_audit_chain", _audit_chain),
    Migration(6, "0006_remote_procs", _remote_procs),
    Migration(7, "0007_chain_seals", _chain_seals),
    Migration(8, "0008_step_output_file", _step_output_file),
    Migration(9, "0009_incident_causes", _incident_causes),
    Migration(10, "0010_health_watch", _health_watch),
    Migration(11, "0011_replicas", _replicas),
    Migration(12, "0012_seen_requests", _seen_requests),
    Migration(13, "0013_metric_class_parent_run", _metric_class_parent_run),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def pending(version: int) -> list[Migration]:
    """The migrations a DB at `version` still needs, in order (none for a newer DB)."""
    return [m for m in MIGRATIONS if m.version > version]


def migrate(store: StoreBase) -> list[str]:
    """Apply the pending migrations, each in its own write transaction together with its
    record (user_version); another process that applied one meanwhile is seen inside the
    transaction and that migration skipped. Returns the names applied."""
    start = store._version()
    done: list[str] = []
    for m in pending(start):
        with store._tx():
            if store._version() >= m.version:
                continue
            m.fn(store.db, start)
            store._set_version(m.version)
            done.append(m.name)
        store._migrated()
    return done
