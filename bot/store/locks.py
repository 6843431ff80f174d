"""Host locks (one run per host at a time) and the remote process groups each step started,
plus recovery after a crash: a dead owner's runs, steps and locks are released, and what it
started on its hosts is left for the next run there to stop."""
from __future__ import annotations

import os
import socket
from typing import Any

from eaglebot.errors import HostBusy
from eaglebot.store.base import MY_START, now_iso, owner_alive, rowid, rows, to_json
from eaglebot.store.replicas import ReplicasMixin
from eaglebot.store.rows import LockRow, NewRun, RemoteProcRow
from eaglebot.store.runs import insert_run


class LocksMixin(ReplicasMixin):
    """The `locks` and `remote_procs` tables, and `recover`."""

    def _owner_alive(self, pid: int | None, host: str | None, start: str | None) -> bool:
        """`owner_alive`, and on another machine: not a replica that stopped beating."""
        if not owner_alive(pid, host, start):
            return False
        return not (pid is not None and host and host != socket.gethostname() and self._replica_dead(host, pid, start))

    def recover(self) -> list[int]:
        """Turn `running` runs whose process is gone into `interrupted`; free their locks."""
        gone = [r["id"] for r in self.db.query("select id, pid, hostname, proc_start from runs where status = 'running'")
                if not self._owner_alive(r["pid"], r["hostname"], r["proc_start"])]
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
            for lock in self.locks():
                if not self._owner_alive(lock["pid"], lock["hostname"], lock["proc_start"]):
                    self._release_lock(lock["host"], lock["run_id"])
        return gone

    def _release_lock(self, host: str, run_id: int) -> None:
        """Delete a host's lock, unless processes its runs started there were not stopped yet:
        then the lock stays, ownerless (the next run takes it over and stops them first), and
        says why."""
        pending = self.pending_procs(host)
        if not pending:
            self.db.execute("delete from locks where host = ? and run_id = ?", [host, run_id])
            return
        why = (f"processes of run #{pending[0]['run_id']} may still run on {host} "
               f"(not stopped yet: {pending[0]['note'] or 'its process is gone'})")
        self.db.execute("update locks set pid = null, proc_start = null, reason = ? where host = ? and run_id = ?",
                        [why, host, run_id])

    def _check_free(self, hosts: list[str]) -> None:
        """Inside a write transaction: HostBusy for the first host a live owner holds."""
        for h in hosts:
            row = self.db.conn.execute("select run_id, pid, hostname, proc_start, acquired_at from locks "
                                       "where host = ?", [h]).fetchone()
            if row and self._owner_alive(row[1], row[2], row[3]):
                raise HostBusy(f"host {h} is busy with run #{row[0]} since {row[4]} "
                               f"(wait for it or `eagle cancel`/`/eagle cancel {row[0]}`)")

    def _lock(self, run_id: int, hosts: list[str]) -> None:
        """Inside a write transaction: this process holds `hosts` for the run."""
        for h in hosts:
            self.db.conn.execute("insert or replace into locks (host, run_id, pid, hostname, proc_start, acquired_at) "
                         "values (?,?,?,?,?,?)", [h, run_id, os.getpid(), socket.gethostname(), MY_START, now_iso()])

    def start_run(self, lock: list[str], run: NewRun) -> int:
        """Create the run row and lock `lock` in one transaction: a busy host raises HostBusy
        and leaves no run row behind (a refused request is an event, not a run)."""
        with self._tx():
            self._check_free(lock)
            run_id = insert_run(self.db, run)
            self._lock(run_id, lock)
            return run_id

    def acquire_hosts(self, run_id: int, hosts: list[str]) -> None:
        """Lock every host for this run, all or none; a busy host raises HostBusy."""
        # Not `_tx`: locks are not chained, so there is nothing to seal.
        conn = self.db.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except self._db_errors as e:
            raise self._fail(e) from None
        try:
            self._check_free(hosts)
            self._lock(run_id, hosts)
            conn.execute("COMMIT")
        except BaseException as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(e, self._db_errors):
                raise self._fail(e) from None
            raise

    def release_hosts(self, run_id: int) -> None:
        """Free the run's host locks (kept, ownerless, where its processes were not stopped)."""
        with self._tx():
            for lock in list(self.db.query("select host from locks where run_id = ?", [run_id])):
                self._release_lock(lock["host"], run_id)

    def locks(self) -> list[LockRow]:
        """Every host lock, by host."""
        return rows(self.db, LockRow, "select * from locks order by host")

    def procs_record(self, run_id: int, step_id: int, host: str, *, tag: str, state: str, note: str,
                     pgids: list[int] | None = None) -> int:
        """A step's processes had to be killed: `stopped` (verified gone) or `pending` (the
        host was unreachable; the next run on the host stops them before its first step).
        A crashed run's running steps get a `pending` row from `recover`."""
        with self._tx():
            cur = self.db.execute(
                "insert into remote_procs (run_id, step_id, host, tag, pgids, state, note, created_at, cleaned_at) "
                "values (?,?,?,?,?,?,?,?,?)", [run_id, step_id, host, tag, to_json(pgids or []), state, note,
                                               now_iso(), now_iso() if state == "stopped" else None])
            return rowid(cur)

    def pending_procs(self, host: str) -> list[RemoteProcRow]:
        """Process groups on host that a finished (or crashed) run did not stop."""
        return rows(self.db, RemoteProcRow, "select p.*, s.started_at as step_started_at from remote_procs p "
                                            "left join steps s on s.id = p.step_id "
                                            "where p.host = ? and p.state = 'pending' order by p.id", [host])

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

    def step_procs(self, step_id: int) -> list[RemoteProcRow]:
        """The process records of one step."""
        return rows(self.db, RemoteProcRow, "select * from remote_procs where step_id = ? order by id", [step_id])
