"""The SQLite audit store (sqlite-utils, WAL): the source of truth for every run.

`Store` is synchronous (the CLI uses it directly); `eaglebot.store.aio.AsyncStore` is the
same methods on one writer thread, so the event loop never blocks on SQLite.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

import sys

if "numpy" in sys.modules:
    import sqlite_utils
else:
    # sqlite-utils imports numpy whenever it is installed (44 ms) only to convert numpy
    # values, which the store never writes: hide it while sqlite-utils loads.
    sys.modules["numpy"] = None  # type: ignore[assignment]
    try:
        import sqlite_utils
    finally:
        del sys.modules["numpy"]

from eaglebot.errors import HostBusy, StoreError, UsageError
from eaglebot.facts.procs import parse_stat
from eaglebot.store import chain, verify
from eaglebot.store.failures import store_error
from eaglebot.store.sealing import AuditKey, Sealer, Verifier

SCHEMA_VERSION = 8  # 2: run_hosts, history/metric indexes; 3: rejections, approval messages, paused schedules; 4: incidents, sweeps; 5: audit_chain; 6: remote_procs, locks.reason; 7: versioned chain columns, seals; 8: steps.output_bytes/_sha256/_file
FREE_PAGES_KEPT = 64  # free pages (of 4 KiB) a DB keeps for reuse before giving them back


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(s: str | None) -> datetime | None:
    if not s:
        return None
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def proc_start_time(pid: int) -> str | None:
    """Start time of a live local process (/proc/PID/stat field 22): tells a reused PID apart.

    None when there is no such process or it is a zombie (it holds no run and no lock).
    """
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            st = parse_stat(f.read())
    except (OSError, ValueError):
        return None
    return None if st.zombie else st.starttime


def owner_alive(pid: int | None, host: str | None, start: str | None) -> bool:
    """Is the process that wrote a row still running? Unknown on another machine: assume yes."""
    if pid is None:
        return False
    if host and host != socket.gethostname():
        return True
    st = proc_start_time(pid)
    return st is not None and (start is None or st == start)


_MY_START = proc_start_time(os.getpid())


def _rowid(cur: sqlite3.Cursor) -> int:
    assert cur.lastrowid is not None  # an INSERT into a rowid table always sets it
    return cur.lastrowid


Row = dict[str, Any]  # one row as sqlite-utils gives it: column name -> value


def _j(v: Any) -> str:
    return json.dumps(v, default=str, sort_keys=True)


class Store:
    def __init__(self, path: str | Path, *, key_file: str | Path | None = None, readonly: bool = False):
        """`key_file`: the audit sealing key (store/sealing.py); every chain entry this store
        writes is sealed with it. `readonly`: open for reading only (`eagle audit verify`):
        no migration, no trigger repair, no recovery, not a byte written."""
        self.path = Path(path)
        self.readonly = readonly
        # Read before the DB is opened: a key file that cannot be used stops the command at once.
        self._sealer = Sealer(Path(key_file)) if key_file is not None and not readonly else None
        if self._sealer is not None:
            # Each open moves the key file on to today's key (the days before are then gone),
            # even on a day nothing is written.
            self._sealer.key_for()
        try:
            if readonly:
                self._open_readonly()
            else:
                self._open()
        except (sqlite3.Error, OSError) as e:
            if hasattr(self, "db"):
                self.db.conn.close()
            raise store_error(self.path, e) from None

    def _open(self) -> None:
        self._chained = self._seal_cols = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
        self.db = sqlite_utils.Database(conn)
        self.db.execute("PRAGMA busy_timeout = 30000")
        if self.db.execute("select count(*) from sqlite_master").fetchone()[0] == 0:
            # A new DB gives free pages back (see `_release_free_pages`); an existing one keeps
            # its mode (changing it needs a VACUUM of the whole file).
            self.db.execute("PRAGMA auto_vacuum = INCREMENTAL")
        self._enable_wal()
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("PRAGMA foreign_keys = ON")
        self._migrate()
        self._db_id: str | None = None
        self._db_id = self.db_id  # read once here, on the opening thread
        # Only the schema this code knows: a newer eagle's triggers are not this one's to "repair".
        if self._version() == SCHEMA_VERSION and not chain.triggers_current(self.db.conn, SCHEMA_VERSION):
            with self._tx():
                chain.reinstall_triggers(self.db.conn, SCHEMA_VERSION)
        self.recover()

    def _open_readonly(self) -> None:
        self._chained = self._seal_cols = False
        self._db_id = None
        uri = "file:" + quote(str(self.path.absolute())) + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None, check_same_thread=False)
        self.db = sqlite_utils.Database(conn)
        self.db.execute("PRAGMA busy_timeout = 30000")
        self.db.execute("select count(*) from sqlite_master").fetchone()  # a file that is no database fails here

    @contextmanager
    def _tx(self) -> Iterator[None]:
        conn = self.db.conn
        if conn.in_transaction:
            yield
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise store_error(self.path, e) from None
        try:
            # The audit chain's links are sealed in the same transaction as the rows. Once the
            # chain's table exists (migration v5) it is not looked up again.
            chained = self._chained or chain.table_exists(conn, chain.CHAIN_TABLE)
            since = chain.last_seq(conn) if chained else 0
            yield
            if chained or chain.table_exists(conn, chain.CHAIN_TABLE):
                # Before migration v7 the chain has no seal columns yet: hash only.
                self._seal_cols = self._seal_cols or chain.has_seal_columns(conn)
                chain.seal(conn, since, self._sealer if self._seal_cols else None)
                self._chained = True
            conn.execute("COMMIT")
        except BaseException as e:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # SQLite already rolled back (e.g. after SQLITE_FULL)
            if isinstance(e, sqlite3.Error):
                raise store_error(self.path, e) from None
            raise

    # -- schema ------------------------------------------------------------------
    def _enable_wal(self) -> None:
        # Switching a new file to WAL needs it to itself: another process creating the same
        # DB at that moment answers "locked" at once, without waiting for busy_timeout.
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.db.journal_mode != "wal":
                    self.db.enable_wal()
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        if self._version() >= SCHEMA_VERSION:
            return
        # BEGIN IMMEDIATE: one process migrates; the others wait (busy_timeout), then find it done.
        with self._tx():
            version = self._version()
            if version >= SCHEMA_VERSION:
                return
            db = self.db
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
            self._migrate_v2(version)
            self._migrate_v3(version)
            self._migrate_v4(version)
            self._migrate_v5(version)
            self._migrate_v6(version)
            self._migrate_v7(version)
            self._migrate_v8(version)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _migrate_v2(self, version: int) -> None:
        """run_hosts: one row per (run, host), so `history --host` is an index lookup, not a
        json_each scan of every run; backfilled from runs.hosts. Plus the indexes the regression
        check and `schedule list` query by."""
        db = self.db
        db.table("run_hosts").create({"run_id": int, "host": str}, pk=("host", "run_id"),
                               foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
        db.table("run_hosts").create_index(["run_id"], if_not_exists=True)
        db.table("runs").create_index(["playbook", "id"], if_not_exists=True)
        db.table("runs").create_index(["schedule", "id"], if_not_exists=True)
        db.table("metrics").create_index(["host", "name", "run_id"], if_not_exists=True)
        db.table("steps").create_index(["host", "skill", "run_id"], if_not_exists=True)
        db.table("changes").create_index(["host", "run_id"], if_not_exists=True)
        db.table("schedule_fires").create_index(["schedule", "fire_time"], if_not_exists=True)
        if version < 2:
            with self._tx():
                db.execute("insert or ignore into run_hosts (run_id, host) "
                           "select r.id, j.value from runs r, json_each(r.hosts) j "
                           "where json_valid(r.hosts) and j.type = 'text'")

    def _migrate_v4(self, version: int) -> None:
        """Regression incidents (open until recovery, a baseline or an ack; the runs they
        flagged stay out of the reference window) and parameter sweeps (resumable: one row
        per grid point). Idempotent: every table and index is created if missing."""
        db = self.db
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

    def _migrate_v3(self, version: int) -> None:
        """events: who, the text and why of a rejected request (a rejection is an event, not a
        run row); approvals: the Slack message asking (resolved visibly after a restart) and the
        requester (no self-approval); schedule_state: schedules paused from Slack."""
        db = self.db
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

    def _migrate_v5(self, version: int) -> None:
        """audit_chain: the tamper-evident hash chain over the audit tables (store/chain.py);
        an existing DB's chain starts here with a genesis entry that says so. Idempotent."""
        chain.create_chain_table(self.db.conn, version)
    def _migrate_v6(self, version: int) -> None:
        """remote_procs: the process groups (and the session marker their descendants carry in
        their environment) each step started on its host, so a timeout, a cancel, a lost
        connection or a restart after a crash can stop them; locks.reason says why a lock is
        kept after its run (its processes could not be stopped yet). Idempotent."""
        db = self.db
        db.table("remote_procs").create({
            "id": int, "run_id": int, "step_id": int, "host": str, "tag": str, "pgids": str,
            "state": str, "note": str, "created_at": str, "cleaned_at": str,
        }, pk="id", foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
        db.table("remote_procs").create_index(["host", "state"], if_not_exists=True)
        db.table("remote_procs").create_index(["step_id"], if_not_exists=True)
        if "reason" not in db.table("locks").columns_dict:
            db.execute("alter table locks add column reason text")
        db.table("meta").create({"key": str, "value": str}, pk="key", if_not_exists=True)
        db.execute("insert or ignore into meta (key, value) values ('db_id', ?)", [os.urandom(6).hex()])

    def _migrate_v7(self, version: int) -> None:
        """The chain's columns come from the code (chain.CHAIN_SCHEMA), recorded in a chained
        migration entry; entries get an epoch and a keyed seal; remote_procs, schedule_fires,
        run_hosts and meta join the chain (their rows snapshotted once, here)."""
        chain.add_seal_columns(self.db.conn)
        if version < 7:
            chain.record_migration(self.db.conn, 7)

    def _migrate_v8(self, version: int) -> None:
        """A step's whole output lives in a gzip file in the bot's output folder (the row
        keeps a head and a tail): its size, the SHA-256 of its uncompressed bytes, and its
        absolute path (NULL when the step printed nothing). Idempotent."""
        have = set(self.db.table("steps").columns_dict)
        for col, typ in (("output_bytes", "integer"), ("output_sha256", "text"), ("output_file", "text")):
            if col not in have:
                self.db.execute(f"alter table steps add column {col} {typ}")
        if version < 8:
            chain.record_migration(self.db.conn, 8)

    @property
    def db_id(self) -> str:
        """A random id of this audit DB: in the tag of every process a step starts
        (`<db_id>-<run>-<step>`), so two bots' runs on one host never share a tag."""
        if self._db_id is None:
            self._db_id = str(self.db.execute("select value from meta where key = 'db_id'").fetchone()[0])
        return self._db_id

    def proc_tag(self, run_id: int, step_id: int) -> str:
        return f"{self.db_id}-{run_id}-{step_id}"

    # -- liveness ------------------------------------------------------------------
    def recover(self) -> list[int]:
        """Turn `running` runs whose process is gone into `interrupted`; free their locks."""
        gone: list[int] = []
        for row in self.db.query("select id, pid, hostname, proc_start from runs where status = 'running'"):
            if not owner_alive(row["pid"], row["hostname"], row["proc_start"]):
                gone.append(row["id"])
        ts = now_iso()
        with self._tx():
            for rid in gone:
                self.db.execute(
                    "update runs set status = 'interrupted', finished_at = ?, "
                    "error = coalesce(error, 'the process running it is gone') where id = ?", [ts, rid])
                # What those steps started may still run on their hosts: the next run there stops it.
                for st in list(self.db.query("select id, host from steps where run_id = ? and status = 'running'",
                                             [rid])):
                    self.db.execute(
                        "insert into remote_procs (run_id, step_id, host, tag, pgids, state, note, created_at) "
                        "values (?,?,?,?,?,?,?,?)", [rid, st["id"], st["host"], self.proc_tag(rid, st["id"]), "[]",
                                                     "pending", "its process is gone", ts])
                self.db.execute(
                    "update steps set status = 'failed', finished_at = ?, "
                    "summary = coalesce(nullif(summary, ''), 'interrupted: the process running it is gone') "
                    "where run_id = ? and status = 'running'", [ts, rid])
            for lock in list(self.db.query("select * from locks")):
                if not owner_alive(lock["pid"], lock["hostname"], lock["proc_start"]):
                    self._release_lock(lock["host"], lock["run_id"])
        return gone

    def _release_lock(self, host: str, run_id: int) -> None:
        """Delete a host's lock, unless processes its runs started there were not stopped yet:
        then the lock stays, ownerless (the next run takes it over and stops them first), and
        says why."""
        pending = self._pending_procs(host)
        if not pending:
            self.db.execute("delete from locks where host = ? and run_id = ?", [host, run_id])
            return
        why = (f"processes of run #{pending[0]['run_id']} may still run on {host} "
               f"(not stopped yet: {pending[0]['note'] or 'its process is gone'})")
        self.db.execute("update locks set pid = null, proc_start = null, reason = ? where host = ? and run_id = ?",
                        [why, host, run_id])

    def _pending_procs(self, host: str) -> list[Row]:
        return list(self.db.query("select * from remote_procs where host = ? and state = 'pending' order by id",
                                  [host]))

    # -- runs ------------------------------------------------------------------------
    def create_run(self, *, playbook: str, hosts: list[str], inputs: dict[str, Any], variables: dict[str, Any],
                   actor: str, origin: str, dry_run: bool = False, rerun_of: int | None = None,
                   schedule: str | None = None, channel: str | None = None,
                   thread_ts: str | None = None, source: str | None = None,
                   status: str = "running") -> int:
        with self._tx():
            cur = self.db.execute(
                "insert into runs (playbook, status, actor, origin, pid, hostname, proc_start, hosts, "
                "inputs, vars, started_at, dry_run, rerun_of, schedule, channel, thread_ts, source, "
                "cancel_requested) values (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,0)",
                [playbook, status, actor, origin, os.getpid(), socket.gethostname(), _MY_START,
                 _j(hosts), _j(inputs), _j(variables), now_iso(), int(dry_run), rerun_of,
                 schedule, channel, thread_ts, source])
            run_id = _rowid(cur)
            for h in dict.fromkeys(hosts):
                self.db.execute("insert or ignore into run_hosts (run_id, host) values (?, ?)", [run_id, h])
            return run_id

    def finish_run(self, run_id: int, status: str, *, exit_code: int, error: str | None = None,
                   fingerprint: dict[str, Any] | None = None) -> None:
        with self._tx():
            self.db.execute(
                "update runs set status = ?, finished_at = ?, exit_code = ?, error = ?, "
                "fingerprint = coalesce(?, fingerprint) where id = ?",
                [status, now_iso(), exit_code, error, _j(fingerprint) if fingerprint else None, run_id])

    def close_open_steps(self, run_id: int, summary: str) -> int:
        """Steps of a finished run still marked `running` (their end was not recorded) become failed."""
        with self._tx():
            cur = self.db.execute(
                "update steps set status = 'failed', finished_at = ?, "
                "summary = case when coalesce(summary, '') = '' then ? else summary || ' (' || ? || ')' end "
                "where run_id = ? and status = 'running'", [now_iso(), summary, summary, run_id])
            return cur.rowcount

    def set_run_thread(self, run_id: int, channel: str | None, thread_ts: str | None) -> None:
        with self._tx():
            self.db.execute("update runs set channel = ?, thread_ts = ? where id = ?", [channel, thread_ts, run_id])

    def request_cancel(self, run_id: int) -> bool:
        with self._tx():
            cur = self.db.execute(
                "update runs set cancel_requested = 1 where id = ? and status = 'running'", [run_id])
            return cur.rowcount > 0

    def cancel_requested(self, run_id: int) -> bool:
        row = self.db.execute("select cancel_requested from runs where id = ?", [run_id]).fetchone()
        return bool(row and row[0])

    def get_run(self, run_id: int) -> Row | None:
        rows = list(self.db.query("select * from runs where id = ?", [run_id]))
        return _decode_run(rows[0]) if rows else None

    def history(self, *, playbook: str | None = None, host: str | None = None, limit: int = 20,
                status: str | None = None, origin: str | None = None, since: str | None = None) -> list[Row]:
        where: list[str] = []
        args: list[Any] = []
        sql = "select * from runs"
        if host:
            # Walk run_hosts' primary key (host, run_id) newest first: no scan of other hosts' runs.
            sql = "select runs.* from run_hosts rh join runs on runs.id = rh.run_id"
            where.append("rh.host = ?")
            args.append(host)
        for cond, value in (("playbook = ?", playbook), ("status = ?", status), ("origin = ?", origin),
                            ("started_at >= ?", since)):
            if value:
                where.append(cond)
                args.append(value)
        sql += (" where " + " and ".join(where) if where else "")
        sql += " order by rh.run_id desc limit ?" if host else " order by id desc limit ?"
        args.append(limit)
        return [_decode_run(r) for r in self.db.query(sql, args)]

    def regression_counts(self, run_ids: list[int]) -> dict[int, int]:
        """Run id -> regressions flagged (kind `regression`), for the runs that have any."""
        if not run_ids:
            return {}
        marks = ",".join("?" * len(run_ids))
        return {r["run_id"]: r["n"] for r in self.db.query(
            f"select run_id, count(*) as n from regressions where run_id in ({marks}) "
            "and coalesce(kind, 'regression') = 'regression' group by run_id", run_ids)}

    def running_runs(self) -> list[Row]:
        return [_decode_run(r) for r in self.db.query("select * from runs where status = 'running' order by id")]

    # -- steps -------------------------------------------------------------------------
    def step_started(self, run_id: int, idx: int, host: str, name: str, skill: str,
                     params: dict[str, Any], section: str = "steps") -> int:
        with self._tx():
            cur = self.db.execute(
                "insert into steps (run_id, idx, section, host, name, skill, status, summary, output, "
                "params, attempts, started_at) values (?,?,?,?,?,?,'running','','',?,1,?)",
                [run_id, idx, section, host, name, skill, _j(params), now_iso()])
            return _rowid(cur)

    def step_output(self, step_id: int, text: str) -> None:
        """The streamed output so far, as kept in the store (head, marker, tail): replaces the last."""
        with self._tx():
            self.db.execute("update steps set output = ? where id = ?", [text, step_id])

    def step_attempt(self, step_id: int, attempts: int) -> None:
        with self._tx():
            self.db.execute("update steps set attempts = ? where id = ?", [attempts, step_id])

    def step_finished(self, step_id: int, *, run_id: int, host: str, status: str, summary: str,
                      duration_ms: int, attempts: int, data: dict[str, Any] | None = None,
                      metrics: list[Any] | None = None, changes: list[Any] | None = None,
                      warnings: list[str] | None = None, regressions: list[Any] | None = None,
                      output: str | None = None, output_bytes: int | None = None,
                      output_sha256: str | None = None, output_file: str | None = None) -> None:
        """The step's final row: `output` (when given) replaces the stored output; the whole
        output's size, SHA-256 and file go in the same update, so the chain covers them."""
        with self._tx():
            self.db.execute(
                "update steps set status = ?, summary = ?, duration_ms = ?, attempts = ?, data = ?, "
                "finished_at = ?, output = coalesce(?, output), output_bytes = ?, output_sha256 = ?, "
                "output_file = ? where id = ?",
                [status, summary, duration_ms, attempts, _j(data or {}), now_iso(),
                 output, output_bytes, output_sha256, output_file, step_id])
            for m in metrics or []:
                self.db.execute(
                    "insert into metrics (run_id, step_id, host, name, value, unit, better) values (?,?,?,?,?,?,?)",
                    [run_id, step_id, host, m.name, float(m.value), m.unit, m.better])
            for c in changes or []:
                self.db.execute(
                    "insert into changes (run_id, step_id, host, path, before_sha256, after_sha256, diff, "
                    "backup_path, created_at) values (?,?,?,?,?,?,?,?,?)",
                    [run_id, step_id, host, c.path, c.before_sha256, c.after_sha256, c.diff,
                     c.backup_path, now_iso()])
            for w in warnings or []:
                self.db.execute("insert into warnings (run_id, step_id, host, message) values (?,?,?,?)",
                                [run_id, step_id, host, w])
            for r in regressions or []:
                self.add_regression(run_id, r, host=host, commit=False)
        self._release_free_pages()

    def _release_free_pages(self) -> None:
        """Shrink the file by its free pages once there are many: a step's kept output (up to
        `output_keep_bytes`) is rewritten at each flush and sealed into the chain as a whole row,
        which leaves about as many free pages behind; without this the file keeps that peak."""
        if self.db.conn.in_transaction or \
                int(self.db.execute("PRAGMA freelist_count").fetchone()[0]) < FREE_PAGES_KEPT:
            return
        try:
            # executescript steps the pragma to its end (execute() frees one page a step); it
            # is a transaction of its own that changes no row, so nothing is sealed.
            self.db.conn.executescript("PRAGMA incremental_vacuum;")
        except sqlite3.Error:
            pass  # housekeeping: the step's row is committed; the next step's end tries again

    def add_regression(self, run_id: int, r: Any, *, host: str = "", commit: bool = True) -> None:
        sql = ("insert into regressions (run_id, host, metric, value, reference, delta_pct, reason, kind) "
               "values (?,?,?,?,?,?,?,?)")
        args = [run_id, r.host or host, r.metric, r.value, r.reference, r.delta_pct, r.reason, r.kind]
        if commit:
            with self._tx():
                self.db.execute(sql, args)
        else:
            self.db.execute(sql, args)

    def add_warning(self, run_id: int, host: str, message: str) -> None:
        with self._tx():
            self.db.execute("insert into warnings (run_id, step_id, host, message) values (?,?,?,?)",
                            [run_id, None, host, message])

    def add_event(self, run_id: int | None, kind: str, message: str) -> None:
        with self._tx():
            self.db.execute("insert into events (run_id, at, kind, message) values (?,?,?,?)",
                            [run_id, now_iso(), kind, message])

    def add_rejection(self, kind: str, actor: str, text: str, reason: str, run_id: int | None = None) -> None:
        """A refused request (kind `rejected` or `access_denied`): an event, never a run row."""
        with self._tx():
            self.db.execute("insert into events (run_id, at, kind, message, actor, text, reason) "
                            "values (?,?,?,?,?,?,?)",
                            [run_id, now_iso(), kind, f"{actor}: {text}: {reason}", actor, text, reason])

    def events(self, kind: str | None = None, limit: int = 100) -> list[Row]:
        sql, args = "select * from events", []
        if kind:
            sql += " where kind = ?"
            args.append(kind)
        return list(self.db.query(sql + " order by id desc limit ?", [*args, limit]))

    def steps(self, run_id: int) -> list[Row]:
        return list(self.db.query("select * from steps where run_id = ? order by id", [run_id]))

    def metrics(self, run_id: int) -> list[Row]:
        return list(self.db.query("select * from metrics where run_id = ? order by id", [run_id]))

    def changes(self, run_id: int) -> list[Row]:
        return list(self.db.query("select * from changes where run_id = ? order by id", [run_id]))

    def warnings(self, run_id: int) -> list[Row]:
        return list(self.db.query("select * from warnings where run_id = ? order by id", [run_id]))

    def regressions(self, run_id: int) -> list[Row]:
        return list(self.db.query("select * from regressions where run_id = ? order by id", [run_id]))

    def last_backup(self, host: str, path: str, run_id: int | None = None) -> Row | None:
        sql = "select * from changes where host = ? and path = ? and backup_path is not null"
        args: list[Any] = [host, path]
        if run_id is not None:
            sql += " and run_id = ?"
            args.append(run_id)
        sql += " order by id desc limit 1"
        rows = list(self.db.query(sql, args))
        return rows[0] if rows else None

    # -- approvals -----------------------------------------------------------------------
    def approval_requested(self, run_id: int, step_idx: int, host: str, step: str, action: str,
                           details: list[str]) -> int:
        with self._tx():
            cur = self.db.execute(
                "insert into approvals (run_id, step_idx, host, step, action, details, status, requested_at) "
                "values (?,?,?,?,?,?,'pending',?)", [run_id, step_idx, host, step, action, _j(details), now_iso()])
            return _rowid(cur)

    def approval_decided(self, approval_id: int, status: str, decided_by: str) -> bool:
        """Record a decision once; a second decision on the same request is refused."""
        with self._tx():
            cur = self.db.execute(
                "update approvals set status = ?, decided_by = ?, decided_at = ? "
                "where id = ? and status = 'pending'", [status, decided_by, now_iso(), approval_id])
            return cur.rowcount > 0

    def get_approval(self, approval_id: int) -> Row | None:
        rows = list(self.db.query("select * from approvals where id = ?", [approval_id]))
        return rows[0] if rows else None

    def set_approval_message(self, approval_id: int, channel: str | None, ts: str | None,
                             requester: str | None = None) -> None:
        with self._tx():
            self.db.execute("update approvals set channel = coalesce(?, channel), message_ts = coalesce(?, message_ts), "
                            "requester = coalesce(?, requester) where id = ?", [channel, ts, requester, approval_id])

    def pending_approval(self, run_id: int, step_idx: int, host: str) -> Row | None:
        rows = list(self.db.query("select * from approvals where run_id = ? and step_idx = ? and host = ? "
                                  "and status = 'pending' order by id desc limit 1", [run_id, step_idx, host]))
        return rows[0] if rows else None

    def stale_approvals(self) -> list[Row]:
        """Pending approvals whose run is no longer running (its process died): nobody waits on them."""
        return list(self.db.query(
            "select a.*, r.status as run_status, r.channel as run_channel, r.thread_ts as run_thread_ts, "
            "r.playbook as playbook from approvals a join runs r on r.id = a.run_id "
            "where a.status = 'pending' and r.status != 'running' order by a.id"))

    # -- locks ---------------------------------------------------------------------------
    def start_run(self, lock: list[str], run: dict[str, Any]) -> int:
        """Create the run row and lock `lock` in one transaction: a busy host raises HostBusy
        and leaves no run row behind (a refused request is an event, not a run)."""
        with self._tx():
            conn = self.db.conn
            for h in lock:
                row = conn.execute("select run_id, pid, hostname, proc_start, acquired_at from locks "
                                   "where host = ?", [h]).fetchone()
                if row and owner_alive(row[1], row[2], row[3]):
                    raise HostBusy(f"host {h} is busy with run #{row[0]} since {row[4]} "
                                   f"(wait for it or `eagle cancel`/`/eagle cancel {row[0]}`)")
            run_id = self.create_run(**run)
            for h in lock:
                conn.execute("insert or replace into locks (host, run_id, pid, hostname, proc_start, acquired_at) "
                             "values (?,?,?,?,?,?)",
                             [h, run_id, os.getpid(), socket.gethostname(), _MY_START, now_iso()])
            return run_id

    def acquire_hosts(self, run_id: int, hosts: list[str]) -> None:
        """Lock every host for this run, all or none; a busy host raises HostBusy."""
        conn = self.db.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise store_error(self.path, e) from None
        try:
            for h in hosts:
                row = conn.execute("select run_id, pid, hostname, proc_start, acquired_at from locks "
                                   "where host = ?", [h]).fetchone()
                if row and owner_alive(row[1], row[2], row[3]):
                    conn.execute("ROLLBACK")
                    raise HostBusy(f"host {h} is busy with run #{row[0]} since {row[4]} "
                                   f"(wait for it or `eagle cancel`/`/eagle cancel {row[0]}`)")
            for h in hosts:
                conn.execute("insert or replace into locks (host, run_id, pid, hostname, proc_start, acquired_at) "
                             "values (?,?,?,?,?,?)",
                             [h, run_id, os.getpid(), socket.gethostname(), _MY_START, now_iso()])
            conn.execute("COMMIT")
        except HostBusy:
            raise
        except BaseException as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.Error):
                raise store_error(self.path, e) from None
            raise

    def release_hosts(self, run_id: int) -> None:
        with self._tx():
            for lock in list(self.db.query("select host from locks where run_id = ?", [run_id])):
                self._release_lock(lock["host"], run_id)

    # -- remote process groups (what a step started on its host) -------------------------
    def procs_record(self, run_id: int, step_id: int, host: str, *, tag: str, state: str, note: str,
                     pgids: list[int] | None = None) -> int:
        """A step's processes had to be killed: `stopped` (verified gone) or `pending` (the
        host was unreachable; the next run on the host stops them before its first step).
        A crashed run's running steps get a `pending` row from `recover`."""
        with self._tx():
            cur = self.db.execute(
                "insert into remote_procs (run_id, step_id, host, tag, pgids, state, note, created_at, cleaned_at) "
                "values (?,?,?,?,?,?,?,?,?)", [run_id, step_id, host, tag, _j(pgids or []), state, note, now_iso(),
                                               now_iso() if state == "stopped" else None])
            return _rowid(cur)

    def pending_procs(self, host: str) -> list[Row]:
        """Process groups on host that a finished (or crashed) run did not stop."""
        return self._pending_procs(host)

    def procs_cleaned(self, proc_id: int, *, by_run: int, note: str) -> None:
        """The pending processes were stopped (or found gone) by run `by_run`; the step that
        started them says so."""
        with self._tx():
            row = self.db.execute("select step_id from remote_procs where id = ?", [proc_id]).fetchone()
            self.db.execute("update remote_procs set state = 'stopped', note = ?, cleaned_at = ? where id = ?",
                            [note, now_iso(), proc_id])
            if row and row[0] is not None:
                self.db.execute("update steps set summary = coalesce(nullif(summary, ''), 'interrupted') || ? "
                                "where id = ?", [f"; {note}", row[0]])

    def step_procs(self, step_id: int) -> list[Row]:
        return list(self.db.query("select * from remote_procs where step_id = ? order by id", [step_id]))

    def locks(self) -> list[Row]:
        return list(self.db.query("select * from locks order by host"))

    # -- baselines and history for regressions -----------------------------------------
    def set_baseline(self, run_id: int, set_by: str) -> Row:
        run = self.get_run(run_id)
        if run is None:
            raise KeyError(run_id)
        out = []
        with self._tx():
            for h in run["hosts"]:
                self.db.execute("insert or replace into baselines (playbook, host, run_id, set_by, set_at) "
                                "values (?,?,?,?,?)", [run["playbook"], h, run_id, set_by, now_iso()])
                out.append(h)
        return {"playbook": run["playbook"], "hosts": out, "run_id": run_id}

    def baseline(self, playbook: str, host: str) -> Row | None:
        rows = list(self.db.query("select * from baselines where playbook = ? and host = ?", [playbook, host]))
        return rows[0] if rows else None

    def metric_history(self, playbook: str, host: str, metric: str, *, before_run: int | None = None,
                       since_run: int | None = None, limit: int = 10,
                       exclude_incident_runs: bool = False) -> list[Row]:
        """Values of one metric from successful runs of playbook+host, newest first.

        exclude_incident_runs: leave out runs an incident flagged, unless that incident was
        accepted (closed by an ack or a baseline): a reference window never learns a drop."""
        sql = ("select m.run_id, m.value, m.unit, m.better, r.started_at from metrics m "
               "join runs r on r.id = m.run_id where r.playbook = ? and m.host = ? and m.name = ? "
               "and r.status = 'succeeded' and r.dry_run = 0")
        args: list[Any] = [playbook, host, metric]
        if exclude_incident_runs:
            sql += (" and m.run_id not in (select ir.run_id from incident_runs ir join incidents i "
                    "on i.id = ir.incident_id where i.playbook = ? and i.host = ? and i.metric = ? "
                    "and (i.status = 'open' or i.closed_kind = 'recovered'))")
            args += [playbook, host, metric]
        if before_run is not None:
            sql += " and m.run_id < ?"
            args.append(before_run)
        if since_run is not None:
            sql += " and m.run_id >= ?"
            args.append(since_run)
        sql += " order by m.run_id desc limit ?"
        args.append(limit)
        return list(self.db.query(sql, args))

    def set_fingerprint(self, run_id: int, fingerprint: dict[str, Any]) -> None:
        with self._tx():
            self.db.execute("update runs set fingerprint = ? where id = ?", [_j(fingerprint), run_id])

    def previous_good_run(self, playbook: str, host: str, before_run: int) -> Row | None:
        """The newest earlier run of playbook on host that succeeded without a flagged regression."""
        rows = list(self.db.query(
            "select r.* from run_hosts rh join runs r on r.id = rh.run_id "
            "where rh.host = ? and rh.run_id < ? and r.playbook = ? and r.status = 'succeeded' "
            "and r.dry_run = 0 and not exists (select 1 from regressions g where g.run_id = r.id "
            "and g.kind = 'regression' and (g.host = ? or g.host = '')) "
            "order by rh.run_id desc limit 1", [host, before_run, playbook, host]))
        return _decode_run(rows[0]) if rows else None

    def host_run_ids(self, host: str, *, after: int = 0, upto: int | None = None) -> list[int]:
        sql = "select run_id from run_hosts where host = ? and run_id > ?"
        args: list[Any] = [host, after]
        if upto is not None:
            sql += " and run_id <= ?"
            args.append(upto)
        return [r[0] for r in self.db.execute(sql + " order by run_id", args)]

    def last_fingerprinted_run(self, host: str, upto: int) -> Row | None:
        """The newest run <= upto on host whose fingerprint describes that host (one row read,
        only that host's part of the fingerprint parsed)."""
        path = '$."' + host.replace('"', '') + '"'
        rows = list(self.db.query(
            "select r.id, json_extract(r.fingerprint, :path) as state from run_hosts rh "
            "join runs r on r.id = rh.run_id where rh.host = :host and rh.run_id <= :upto "
            "and json_valid(r.fingerprint) and json_type(r.fingerprint, :path) = 'object' "
            "order by rh.run_id desc limit 1", {"path": path, "host": host, "upto": upto}))
        if not rows:
            return None
        return {"run_id": rows[0]["id"], "state": json.loads(rows[0]["state"])}

    def host_steps(self, host: str, after: int, upto: int) -> list[Row]:
        """Finished steps of runs (after, upto] on host, oldest first (for fingerprints)."""
        return list(self.db.query(
            "select s.run_id, s.skill, s.status, s.params, s.data from steps s "
            "join run_hosts rh on rh.run_id = s.run_id and rh.host = s.host "
            "where rh.host = ? and rh.run_id > ? and rh.run_id <= ? "
            "and (s.status in ('ok', 'changed') or (s.skill = 'gpu.health' and s.status = 'failed')) "
            "and (s.skill in ('server.launch', 'config.patch', 'gpu.health') or s.data like '%package_versions%') "
            "order by s.run_id, s.id", [host, after, upto]))

    def last_step_data(self, host: str, skill: str, key: str) -> Row | None:
        """Registered data of the newest step of `skill` on host that recorded `key`."""
        for row in self.db.execute(
                "select data from steps where host = ? and skill = ? and data like ? order by id desc limit 5",
                [host, skill, f'%"{key}"%']):
            try:
                data = json.loads(row[0])
            except (TypeError, json.JSONDecodeError):
                continue
            if isinstance(data, dict) and data.get(key):
                return data
        return None

    def host_changes(self, host: str, after: int, upto: int) -> list[Row]:
        return list(self.db.query(
            "select * from changes where host = ? and run_id > ? and run_id <= ? order by run_id, id",
            [host, after, upto]))

    def metrics_for_runs(self, run_ids: list[int]) -> dict[int, list[Row]]:
        """Every metric of each run, in the order recorded (one query; runs without metrics absent)."""
        if not run_ids:
            return {}
        marks = ",".join("?" * len(run_ids))
        out: dict[int, list[Row]] = {}
        for m in self.db.query(f"select * from metrics where run_id in ({marks}) order by run_id, id",
                               list(run_ids)):
            out.setdefault(m["run_id"], []).append(m)
        return out

    def metric_value(self, run_id: int, name: str) -> float | None:
        row = self.db.execute("select value from metrics where run_id = ? and name = ? order by id limit 1",
                              [run_id, name]).fetchone()
        return float(row[0]) if row else None

    def last_run_id(self) -> int | None:
        row = self.db.execute("select max(id) from runs").fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def flagged_runs(self, host: str, metric: str, run_ids: list[int]) -> set[int]:
        """Which of run_ids flagged a regression of metric on host."""
        if not run_ids:
            return set()
        marks = ",".join("?" * len(run_ids))
        return {r[0] for r in self.db.execute(
            f"select run_id from regressions where kind = 'regression' and metric = ? and host = ? "
            f"and run_id in ({marks})", [metric, host, *run_ids])}

    def update_regression_reason(self, run_id: int, host: str, metric: str, old: str, new: str) -> None:
        with self._tx():
            self.db.execute("update regressions set reason = ? where run_id = ? and host = ? and metric = ? "
                            "and reason = ?", [new, run_id, host, metric, old])

    # -- incidents (open regressions) -------------------------------------------------
    def open_incident(self, *, playbook: str, host: str, metric: str, run_id: int, ref_before_run: int,
                      reference: float | None, unit: str, better: str) -> int:
        with self._tx():
            cur = self.db.execute(
                "insert into incidents (playbook, host, metric, status, opened_run, ref_before_run, reference, "
                "unit, better, opened_at, last_run) values (?,?,?,'open',?,?,?,?,?,?,?)",
                [playbook, host, metric, run_id, ref_before_run, reference, unit, better, now_iso(), run_id])
            iid = _rowid(cur)
            self.db.execute("insert or ignore into incident_runs (incident_id, run_id) values (?, ?)", [iid, run_id])
            return iid

    def incident_flagged(self, incident_id: int, run_id: int) -> None:
        with self._tx():
            self.db.execute("insert or ignore into incident_runs (incident_id, run_id) values (?, ?)",
                            [incident_id, run_id])
            self.db.execute("update incidents set last_run = ? where id = ?", [run_id, incident_id])

    def open_incident_for(self, playbook: str, host: str, metric: str) -> Row | None:
        rows = list(self.db.query("select * from incidents where playbook = ? and host = ? and metric = ? "
                                  "and status = 'open' order by id desc limit 1", [playbook, host, metric]))
        return rows[0] if rows else None

    def incidents(self, *, playbook: str | None = None, host: str | None = None, status: str | None = "open",
                  run_id: int | None = None, limit: int = 100) -> list[Row]:
        sql = "select * from incidents where 1 = 1"
        args: list[Any] = []
        for col, val in (("playbook", playbook), ("host", host), ("status", status)):
            if val is not None:
                sql += f" and {col} = ?"
                args.append(val)
        if run_id is not None:
            sql += " and id in (select incident_id from incident_runs where run_id = ?)"
            args.append(run_id)
        return list(self.db.query(sql + " order by id desc limit ?", [*args, limit]))

    def close_incident(self, incident_id: int, kind: str, by: str, reason: str, run_id: int | None = None) -> bool:
        with self._tx():
            cur = self.db.execute(
                "update incidents set status = 'closed', closed_kind = ?, closed_by = ?, reason = ?, "
                "closed_run = ?, closed_at = ? where id = ? and status = 'open'",
                [kind, by, reason, run_id, now_iso(), incident_id])
            return cur.rowcount > 0

    def reference_start(self, playbook: str, host: str, metric: str) -> int | None:
        """The first run a metric's reference may use: the baseline, or the start of the
        newest incident an operator accepted (ack), whichever is later."""
        base = self.baseline(playbook, host)
        row = self.db.execute("select max(opened_run) from incidents where playbook = ? and host = ? "
                              "and metric = ? and closed_kind = 'ack'", [playbook, host, metric]).fetchone()
        cands = [v for v in ((base or {}).get("run_id"), row[0] if row else None) if v is not None]
        return max(cands) if cands else None

    # -- sweeps and bisections (resumable grids of runs) -------------------------------
    def create_sweep(self, *, kind: str, playbook: str, host: str, spec: dict[str, Any], actor: str,
                     origin: str, points: list[tuple[dict[str, Any], str, str]]) -> int:
        """A sweep and its points: (inputs, status 'pending' or 'skipped', reason)."""
        with self._tx():
            cur = self.db.execute(
                "insert into sweeps (kind, playbook, host, spec, status, actor, origin, created_at) "
                "values (?,?,?,?,'running',?,?,?)", [kind, playbook, host, _j(spec), actor, origin, now_iso()])
            sid = _rowid(cur)
            for i, (inputs, status, reason) in enumerate(points):
                self.db.execute("insert into sweep_points (sweep_id, idx, inputs, status, reason) values (?,?,?,?,?)",
                                [sid, i, _j(inputs), status, reason])
            return sid

    def get_sweep(self, sweep_id: int) -> Row | None:
        rows = list(self.db.query("select * from sweeps where id = ?", [sweep_id]))
        if not rows:
            return None
        out = dict(rows[0])
        for k in ("spec", "result"):
            out[k] = json.loads(out[k]) if out.get(k) else None
        return out

    def sweep_points(self, sweep_id: int) -> list[Row]:
        out = []
        for r in self.db.query("select * from sweep_points where sweep_id = ? order by idx", [sweep_id]):
            r = dict(r)
            r["inputs"] = json.loads(r["inputs"]) if r.get("inputs") else {}
            r["result"] = json.loads(r["result"]) if r.get("result") else None
            out.append(r)
        return out

    def sweep_point_done(self, sweep_id: int, idx: int, status: str, run_id: int | None,
                         result: dict[str, Any] | None, reason: str = "") -> None:
        with self._tx():
            self.db.execute("update sweep_points set status = ?, run_id = ?, result = ?, reason = ? "
                            "where sweep_id = ? and idx = ?",
                            [status, run_id, _j(result) if result is not None else None, reason, sweep_id, idx])

    def add_sweep_point(self, sweep_id: int, inputs: dict[str, Any]) -> int:
        with self._tx():
            row = self.db.execute("select coalesce(max(idx), -1) + 1 from sweep_points where sweep_id = ?",
                                  [sweep_id]).fetchone()
            idx = int(row[0])
            self.db.execute("insert into sweep_points (sweep_id, idx, inputs, status, reason) "
                            "values (?,?,?,'pending','')", [sweep_id, idx, _j(inputs)])
            return idx

    def finish_sweep(self, sweep_id: int, status: str, result: dict[str, Any] | None) -> None:
        with self._tx():
            self.db.execute("update sweeps set status = ?, finished_at = ?, result = ? where id = ?",
                            [status, now_iso(), _j(result) if result is not None else None, sweep_id])

    def save_vars(self, run_id: int, variables: dict[str, Any]) -> None:
        """The resolved variables of each host of a run (redacted by the caller)."""
        with self._tx():
            self.db.execute("update runs set vars = ? where id = ?", [_j(variables), run_id])

    def audit_verify(self, head: str | None = None, key: AuditKey | None = None) -> dict[str, Any]:
        """Walk the audit hash chain (`eagle audit verify`): ok, head, first_broken, problems,
        seals. With `key` (a verification or sealing key) every seal it can derive is checked."""
        verifier = Verifier(key) if key is not None else None
        return verify.verify(self.db.conn, head, verifier, key.kind if key else None).to_json()

    def run_audit_problems(self, run_id: int) -> list[str]:
        """One run's rows (the run, its steps, metrics, changes, approvals, events, warnings,
        regressions) checked against the audit chain: a sentence per edited row."""
        conn = self.db.conn
        rows: list[tuple[str, int]] = [("runs", run_id)]
        for t in chain.CHAINED_TABLES:
            if t != "runs" and chain.table_exists(conn, t) and "run_id" in chain.columns(conn, t):
                rows += [(t, r[0]) for r in conn.execute(f'select rowid from "{t}" where run_id = ? order by rowid',
                                                         [run_id])]
        return [p.line() for p in verify.verify_rows(conn, rows)]

    def audit_head(self) -> dict[str, Any]:
        """The newest sealed link of the audit chain: the anchor posted outside the DB."""
        row = self.db.execute(f"select seq, hash from {chain.CHAIN_TABLE} where hash is not null "
                              f"order by seq desc limit 1").fetchone()
        return {"seq": row[0], "hash": row[1]} if row else {"seq": None, "hash": None}

    def backup(self, dest: Path) -> dict[str, Any]:
        """A consistent copy of the whole DB (SQLite's online backup: the bot may keep
        writing) at `dest`, a new file with this DB's mode; the chain head it holds."""
        try:
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise UsageError(f"{dest} exists; name a new file for the backup") from None
        except OSError as e:
            raise StoreError(f"cannot create {dest}: {e.strerror}") from None
        os.close(fd)
        try:
            target = sqlite3.connect(dest)
            try:
                self.db.conn.backup(target)
            finally:
                target.close()
            os.chmod(dest, os.stat(self.path).st_mode & 0o777)
        except (sqlite3.Error, OSError) as e:
            dest.unlink(missing_ok=True)
            raise StoreError(f"backup to {dest} failed: {e}") from None
        return self.audit_head()

    def check_writable(self) -> None:
        """Raise if the audit DB cannot take a write lock now (doctor)."""
        self.db.conn.execute("BEGIN IMMEDIATE")
        self.db.conn.execute("ROLLBACK")

    # -- schedules ---------------------------------------------------------------------
    def last_schedule_run(self, schedule: str) -> Row | None:
        rows = list(self.db.query("select * from runs where schedule = ? and origin = 'schedule' "
                                  "order by id desc limit 1", [schedule]))
        return _decode_run(rows[0]) if rows else None

    def record_fire(self, schedule: str, fire_time: str, status: str, run_id: int | None = None) -> int:
        with self._tx():
            cur = self.db.execute(
                "insert into schedule_fires (schedule, fire_time, run_id, status, recorded_at) values (?,?,?,?,?)",
                [schedule, fire_time, run_id, status, now_iso()])
            return _rowid(cur)

    def update_fire(self, fire_id: int, status: str, run_id: int | None = None) -> None:
        with self._tx():
            self.db.execute("update schedule_fires set status = ?, run_id = coalesce(?, run_id) where id = ?",
                            [status, run_id, fire_id])

    def set_schedule_paused(self, name: str, paused: bool, changed_by: str) -> bool:
        """Pause or resume a schedule; False when it already was in that state."""
        with self._tx():
            row = self.db.execute("select paused from schedule_state where name = ?", [name]).fetchone()
            if bool(row and row[0]) == paused:
                return False
            self.db.execute("insert or replace into schedule_state (name, paused, changed_by, changed_at) "
                            "values (?,?,?,?)", [name, int(paused), changed_by, now_iso()])
            return True

    def schedule_states(self) -> dict[str, Row]:
        return {r["name"]: r for r in self.db.query("select * from schedule_state")}

    def last_fire(self, schedule: str) -> Row | None:
        rows = list(self.db.query("select * from schedule_fires where schedule = ? "
                                  "order by fire_time desc, id desc limit 1", [schedule]))
        return rows[0] if rows else None

    # -- retention -----------------------------------------------------------------------
    def _run_children(self) -> list[str]:
        """Every table with a foreign key to runs (other modules may add their own)."""
        out = []
        for t in self.db.table_names():
            if t == "runs":
                continue
            if any(fk.other_table == "runs" for fk in self.db.table(t).foreign_keys):
                out.append(t)
        for t in ("events",):  # run_id without a declared foreign key
            if t in self.db.table_names() and t not in out:
                out.append(t)
        return out

    def prune_count(self, older_than: timedelta) -> int:
        """How many runs `prune(older_than)` would delete."""
        cutoff = (datetime.now(timezone.utc) - older_than).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return int(self.db.execute(
            "select count(*) from runs where started_at < ? and status != 'running' "
            "and id not in (select run_id from baselines where run_id is not null)", [cutoff]).fetchone()[0])

    def prune(self, older_than: timedelta) -> int:
        """Delete finished runs started before now - older_than, with their child rows.

        Baseline runs are kept; so is the newest fire record of each schedule (misfire
        detection reads it).
        """
        cutoff = (datetime.now(timezone.utc) - older_than).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        doomed = ("select id from runs where started_at < ? and status != 'running' "
                  "and id not in (select run_id from baselines where run_id is not null)")
        children = self._run_children()
        files: list[str] = []
        with self._tx():
            self.db.execute("create temp table if not exists _prune_ids (id integer primary key)")
            self.db.execute("delete from _prune_ids")
            self.db.execute(f"insert into _prune_ids (id) {doomed}", [cutoff])
            n = int(self.db.execute("select count(*) from _prune_ids").fetchone()[0])
            files = [r[0] for r in self.db.execute(
                "select output_file from steps where output_file is not null "
                "and run_id in (select id from _prune_ids)")]
            for t in children:
                self.db.execute(f"delete from [{t}] where run_id in (select id from _prune_ids)")
            self.db.execute("delete from runs where id in (select id from _prune_ids)")
            self.db.execute(
                "delete from schedule_fires where fire_time < ? and id not in "
                "(select max(id) from schedule_fires group by schedule)", [cutoff])
            self.db.execute("delete from _prune_ids")
        remove_output_files(files)  # after the commit: a failed prune keeps every file its rows name
        return n

    def close(self) -> None:
        self.db.conn.close()


def remove_output_files(paths: list[str]) -> None:
    """Delete pruned steps' output files, then their run folders once empty."""
    folders = set()
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        folders.add(os.path.dirname(p))
    for d in folders:
        try:
            os.rmdir(d)
        except OSError:  # not empty (another step's file) or gone: left as it is
            pass


def _decode_run(row: dict[str, Any]) -> Row:
    out = dict(row)
    for k in ("hosts", "inputs", "vars", "fingerprint"):
        if isinstance(out.get(k), str):
            try:
                out[k] = json.loads(out[k])
            except json.JSONDecodeError:
                pass
    out.setdefault("hosts", [])
    if out.get("hosts") is None:
        out["hosts"] = []
    return out
