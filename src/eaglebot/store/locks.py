"""Host locks (one run per host at a time) and the remote process groups each step started,
plus recovery after a crash: a dead owner's runs, steps and locks are released, and what it
started on its hosts is left for the next run there to stop."""
from __future__ import annotations

import os
import socket
from typing import Any

from eaglebot.errors import HostBusy
from eaglebot.store.base import MY_START, insert, now_iso, owner_alive, rows, to_json, upsert
from eaglebot.store.replicas import ReplicasMixin
from eaglebot.store.rows import LockRow, NewRun, RemoteProcRow, StepRow
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
                    "update runs set status = 'interrupted', finished_at = $1, "
                    "error = coalesce(error, 'the process running it is gone') where id = $2", [ts, rid])
                # What those steps started may still run on their hosts: the next run there stops it.
                for st in list(self.db.query("select id, host from steps where run_id = $1 and status = 'running'",
                                             [rid])):
                    self.db.execute(
                        "insert into remote_procs (run_id, step_id, host, tag, pgids, state, note, created_at) "
                        "values ($1,$2,$3,$4,$5,$6,$7,$8)", [rid, st["id"], st["host"], self.proc_tag(rid, st["id"]), "[]",
                                                     "pending", "its process is gone", ts])
                self.db.execute(
                    "update steps set status = 'failed', finished_at = $1, "
                    "summary = coalesce(nullif(summary, ''), 'interrupted: the process running it is gone') "
                    "where run_id = $2 and status = 'running'", [ts, rid])
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
            self.db.execute("delete from locks where host = $1 and run_id = $2", [host, run_id])
            return
        why = (f"processes of run #{pending[0]['run_id']} may still run on {host} "
               f"(not stopped yet: {pending[0]['note'] or 'its process is gone'})")
        self.db.execute("update locks set pid = null, proc_start = null, reason = $1 where host = $2 and run_id = $3",
                        [why, host, run_id])

    def _check_free(self, hosts: list[str]) -> None:
        """Inside a write transaction: HostBusy for the first host a live owner holds."""
        for h in hosts:
            row = self.db.execute("select run_id, pid, hostname, proc_start, acquired_at from locks "
                                       "where host = $1", [h]).fetchone()
            if row and self._owner_alive(row[1], row[2], row[3]):
                raise HostBusy(f"host {h} is busy with run #{row[0]} since {row[4]} "
                               f"(wait for it or `eagle cancel`/`/eagle cancel {row[0]}`)", row[0], row[4])

    def _lock(self, run_id: int, hosts: list[str]) -> None:
        """Inside a write transaction: this process holds `hosts` for the run."""
        for h in hosts:
            # `reason` too: a lock taken over (kept ownerless, see `_release_lock`) is this run's now.
            upsert(self.db, "locks", {"host": h, "run_id": run_id, "pid": os.getpid(), "hostname": socket.gethostname(),
                                      "proc_start": MY_START, "acquired_at": now_iso(), "reason": None}, key=("host",))

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
        db = self.db
        try:
            db.begin()
        except self._db_errors as e:
            raise self._fail(e) from None
        try:
            self._check_free(hosts)
            self._lock(run_id, hosts)
            db.commit()
        except BaseException as e:
            if db.in_transaction:
                db.rollback()
            if isinstance(e, self._db_errors):
                raise self._fail(e) from None
            raise

    def release_hosts(self, run_id: int) -> None:
        """Free the run's host locks (kept, ownerless, where its processes were not stopped)."""
        with self._tx():
            for lock in list(self.db.query("select host from locks where run_id = $1", [run_id])):
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
            return insert(self.db, "remote_procs", {
                "run_id": run_id, "step_id": step_id, "host": host, "tag": tag, "pgids": to_json(pgids or []),
                "state": state, "note": note, "created_at": now_iso(),
                "cleaned_at": now_iso() if state == "stopped" else None})

    def steps_beside(self, host: str, run_id: int, after_id: int | None) -> tuple[int, list[StepRow]]:
        """(the newest step's id, the steps of runs other than `run_id` on `host` that may be
        running code there: those running under a lock on it and, with `after_id`, every one
        started since that step). What a lock-free run checks before and after each command
        (engine/steps.py): both are index reads."""
        last = self.db.execute("select coalesce(max(id), 0) from steps").fetchone()[0]
        running = rows(self.db, StepRow, "select s.* from steps s join locks l on l.run_id = s.run_id and l.host = s.host "
                                         "where s.host = $1 and s.status = 'running' and s.run_id <> $2", [host, run_id])
        if after_id is not None:
            seen = {r["id"] for r in running}
            running += [r for r in rows(self.db, StepRow, "select * from steps where id > $1 and host = $2 and run_id <> $3 "
                                                          "order by id", [after_id, host, run_id]) if r["id"] not in seen]
        return int(last), running

    def pending_procs(self, host: str) -> list[RemoteProcRow]:
        """Process groups on host that a finished (or crashed) run did not stop."""
        return rows(self.db, RemoteProcRow, "select p.*, s.started_at as step_started_at from remote_procs p "
                                            "left join steps s on s.id = p.step_id "
                                            "where p.host = $1 and p.state = 'pending' order by p.id", [host])

    def procs_cleaned(self, proc_id: int, *, by_run: int, note: str) -> None:
        """The pending processes were stopped (or found gone) by run `by_run`; the step that
        started them says so."""
        with self._tx():
            row = self.db.execute("select step_id from remote_procs where id = $1", [proc_id]).fetchone()
            self.db.execute("update remote_procs set state = 'stopped', note = $1, cleaned_at = $2 where id = $3",
                            [note, now_iso(), proc_id])
            if row and row[0] is not None:
                self.db.execute("update steps set summary = coalesce(nullif(summary, ''), 'interrupted') || $1 "
                                "where id = $2", [f"; {note}", row[0]])

    def step_procs(self, step_id: int) -> list[RemoteProcRow]:
        """The process records of one step."""
        return rows(self.db, RemoteProcRow, "select * from remote_procs where step_id = $1 order by id", [step_id])
