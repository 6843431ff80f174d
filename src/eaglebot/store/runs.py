"""Runs: one row per playbook run (who, where, with what, how it ended) and its hosts
(`run_hosts`, so a host's runs are an index lookup)."""
from __future__ import annotations

import json
import os
import socket
from typing import Any, cast

from eaglebot.store.base import MY_START, Args, Database, StoreBase, insert, now_iso, rows, to_json
from eaglebot.store.rows import NewRun, RunRow

_JSON_COLUMNS = ("hosts", "inputs", "vars", "fingerprint")


def decode_run(row: dict[str, Any]) -> RunRow:
    """A `runs` row with its JSON columns decoded (`hosts` is a list, never None)."""
    out = dict(row)
    for k in _JSON_COLUMNS:
        if isinstance(out.get(k), str):
            try:
                out[k] = json.loads(out[k])
            except json.JSONDecodeError:
                pass
    if out.get("hosts") is None:
        out["hosts"] = []
    return cast(RunRow, out)


def insert_run(db: Database, run: NewRun) -> int:
    """The run row and its run_hosts rows, inside the caller's transaction (owned by this process)."""
    hosts = run["hosts"]
    run_id = insert(db, "runs", {
        "playbook": run["playbook"], "status": run.get("status", "running"), "actor": run["actor"],
        "origin": run["origin"], "pid": os.getpid(), "hostname": socket.gethostname(), "proc_start": MY_START,
        "hosts": to_json(hosts), "inputs": to_json(run["inputs"]), "vars": to_json(run["variables"]),
        "started_at": now_iso(), "dry_run": int(run.get("dry_run", False)), "rerun_of": run.get("rerun_of"),
        "parent_run_id": run.get("parent_run_id"),
        "schedule": run.get("schedule"), "channel": run.get("channel"), "thread_ts": run.get("thread_ts"),
        "source": run.get("source"), "cancel_requested": 0})
    for h in dict.fromkeys(hosts):
        db.execute("insert into run_hosts (run_id, host) values ($1, $2) on conflict do nothing", [run_id, h])
    return run_id


def get_run(db: Database, run_id: int) -> RunRow | None:
    """One run by id, decoded, or None."""
    found = list(db.query("select * from runs where id = $1", [run_id]))
    return decode_run(found[0]) if found else None


class RunsMixin(StoreBase):
    """The `runs` aggregate."""

    def create_run(self, run: NewRun) -> int:
        """A new run owned by this process (its pid and start time tell a crash apart); its id."""
        with self._tx():
            return insert_run(self.db, run)

    def finish_run(self, run_id: int, status: str, *, exit_code: int, error: str | None = None,
                   fingerprint: dict[str, Any] | None = None) -> None:
        """How a run ended; a fingerprint given replaces the one recorded."""
        with self._tx():
            self.db.execute(
                "update runs set status = $1, finished_at = $2, exit_code = $3, error = $4, "
                "fingerprint = coalesce($5, fingerprint) where id = $6",
                [status, now_iso(), exit_code, error, to_json(fingerprint) if fingerprint else None, run_id])

    def set_run_thread(self, run_id: int, channel: str | None, thread_ts: str | None) -> None:
        """The Slack thread that reports the run (set once its first message is posted)."""
        with self._tx():
            self.db.execute("update runs set channel = $1, thread_ts = $2 where id = $3", [channel, thread_ts, run_id])

    def request_cancel(self, run_id: int) -> bool:
        """Ask a running run to stop (its runner polls); False when it is not running."""
        with self._tx():
            cur = self.db.execute(
                "update runs set cancel_requested = 1 where id = $1 and status = 'running'", [run_id])
            return cur.rowcount > 0

    def cancel_requested(self, run_id: int) -> bool:
        """Has someone asked this run to stop?"""
        row = self.db.execute("select cancel_requested from runs where id = $1", [run_id]).fetchone()
        return bool(row and row[0])

    def get_run(self, run_id: int) -> RunRow | None:
        """One run by id, its JSON columns decoded, or None."""
        return get_run(self.db, run_id)

    def history(self, *, playbook: str | None = None, host: str | None = None, limit: int = 20,
                status: str | None = None, origin: str | None = None, since: str | None = None,
                top_level: bool = False) -> list[RunRow]:
        """Runs newest first, filtered by each criterion given (`since`: started at or after;
        `top_level`: no run another run started, see `children`)."""
        where: list[str] = ["parent_run_id is null"] if top_level else []
        args = Args()
        sql = "select * from runs"
        if host:
            # Walk run_hosts' primary key (host, run_id) newest first: no scan of other hosts' runs.
            sql = "select runs.* from run_hosts rh join runs on runs.id = rh.run_id"
            where.append(f"rh.host = {args.mark(host)}")
        for cond, value in (("playbook =", playbook), ("status =", status), ("origin =", origin),
                            ("started_at >=", since)):
            if value:
                where.append(f"{cond} {args.mark(value)}")
        sql += (" where " + " and ".join(where) if where else "")
        sql += f" order by {'rh.run_id' if host else 'id'} desc limit {args.mark(limit)}"
        return [decode_run(r) for r in self.db.query(sql, args)]

    def child_counts(self, run_ids: list[int]) -> dict[int, int]:
        """Run id -> how many runs it started (tune, sweep, bisect), for the runs that started any."""
        if not run_ids:
            return {}
        args = Args()
        return {int(r["parent_run_id"]): int(r["n"]) for r in self.db.query(
            f"select parent_run_id, count(*) as n from runs where parent_run_id in ({args.marks(run_ids)}) "
            "group by parent_run_id", args)}

    def children(self, run_id: int) -> list[RunRow]:
        """The runs run_id started, oldest first."""
        return [decode_run(r) for r in self.db.query("select * from runs where parent_run_id = $1 order by id",
                                                     [run_id])]

    def running_runs(self) -> list[RunRow]:
        """Runs still marked running, oldest first."""
        return [decode_run(r) for r in self.db.query("select * from runs where status = 'running' order by id")]

    def save_vars(self, run_id: int, variables: dict[str, Any]) -> None:
        """The resolved variables of each host of a run (redacted by the caller)."""
        with self._tx():
            self.db.execute("update runs set vars = $1 where id = $2", [to_json(variables), run_id])

    def set_fingerprint(self, run_id: int, fingerprint: dict[str, Any]) -> None:
        """The run's fingerprint (each host's software and hardware state) before it ends."""
        with self._tx():
            self.db.execute("update runs set fingerprint = $1 where id = $2", [to_json(fingerprint), run_id])

    def run_count(self) -> int:
        """How many runs the store holds (what an empty, filtered history says it left out)."""
        row = self.db.execute("select count(*) from runs").fetchone()
        return int(row[0]) if row else 0

    def last_run_id(self) -> int | None:
        """The newest run's id (None in an empty store)."""
        row = self.db.execute("select max(id) from runs").fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def last_schedule_run(self, schedule: str) -> RunRow | None:
        """The newest run a schedule started, or None."""
        found = rows(self.db, dict, "select * from runs where schedule = $1 and origin = 'schedule' "
                                    "order by id desc limit 1", [schedule])
        return decode_run(found[0]) if found else None
