"""Steps and what each one leaves behind: its output (head and tail in the row, the whole
in a file the row names), metrics, file changes, warnings and regressions.

The step writes are the hot path of a run (a flush of streamed output per second per step):
they stay plain SQL, one statement each, with no table introspection.
"""
from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

from eaglebot.store.base import Args, StoreBase, first, insert, now_iso, rows, to_json
from eaglebot.store.rows import ChangeRow, MetricRow, RegressionRow, StepEnd, StepRow, WarningRow

if TYPE_CHECKING:
    from eaglebot.sdk import Regression

FREE_PAGES_KEPT = 64  # free pages (of 4 KiB) a DB keeps for reuse before giving them back
_REGRESSION_SQL = ("insert into regressions (run_id, host, metric, value, reference, delta_pct, reason, kind) "
                   "values ($1,$2,$3,$4,$5,$6,$7,$8)")


class StepsMixin(StoreBase):
    """The `steps` aggregate, with the per-run result tables a step's end writes."""

    def step_started(self, run_id: int, idx: int, host: str, name: str, skill: str,
                     params: dict[str, Any], section: str = "steps") -> int:
        """A step begins on a host (status running, attempt 1); its id."""
        with self._tx():
            return insert(self.db, "steps", {
                "run_id": run_id, "idx": idx, "section": section, "host": host, "name": name, "skill": skill,
                "status": "running", "summary": "", "output": "", "params": to_json(params), "attempts": 1,
                "started_at": now_iso()})

    def step_output(self, step_id: int, text: str) -> None:
        """The streamed output so far, as kept in the store (head, marker, tail): replaces the last."""
        with self._tx():
            self.db.execute("update steps set output = $1 where id = $2", [text, step_id])

    def step_attempt(self, step_id: int, attempts: int) -> None:
        """A retried step's attempt count."""
        with self._tx():
            self.db.execute("update steps set attempts = $1 where id = $2", [attempts, step_id])

    def step_finished(self, step_id: int, end: StepEnd) -> None:
        """The step's final row and what it left (metrics, changes, warnings, regressions), in one
        transaction: `end["output"]` (when given) replaces the stored output; the whole output's
        size, SHA-256 and file go in the same update, so the chain covers them."""
        run_id, host = end["run_id"], end["host"]
        with self._tx():
            self.db.execute(
                "update steps set status = $1, summary = $2, duration_ms = $3, attempts = $4, data = $5, "
                "finished_at = $6, output = coalesce($7, output), output_bytes = $8, output_sha256 = $9, "
                "output_file = $10 where id = $11",
                [end["status"], end["summary"], end["duration_ms"], end["attempts"], to_json(end.get("data") or {}),
                 now_iso(), end.get("output"), end.get("output_bytes"), end.get("output_sha256"),
                 end.get("output_file"), step_id])
            for m in end.get("metrics") or []:
                self.db.execute(
                    "insert into metrics (run_id, step_id, host, name, value, unit, better, config_class) "
                    "values ($1,$2,$3,$4,$5,$6,$7,$8)",
                    [run_id, step_id, host, m.name, float(m.value), m.unit, m.better, m.config or None])
            for c in end.get("changes") or []:
                self.db.execute(
                    "insert into changes (run_id, step_id, host, path, before_sha256, after_sha256, diff, "
                    "backup_path, created_at) values ($1,$2,$3,$4,$5,$6,$7,$8,$9)",
                    [run_id, step_id, host, c.path, c.before_sha256, c.after_sha256, c.diff,
                     c.backup_path, now_iso()])
            for w in end.get("warnings") or []:
                self.db.execute("insert into warnings (run_id, step_id, host, message) values ($1,$2,$3,$4)",
                                [run_id, step_id, host, w])
            for r in end.get("regressions") or []:
                self.db.execute(_REGRESSION_SQL, _regression_args(run_id, r, host))
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

    def close_open_steps(self, run_id: int, summary: str) -> int:
        """Steps of a finished run still marked `running` (their end was not recorded) become failed."""
        with self._tx():
            cur = self.db.execute(
                "update steps set status = 'failed', finished_at = $1, "
                "summary = case when coalesce(summary, '') = '' then $2 else summary || ' (' || $3 || ')' end "
                "where run_id = $4 and status = 'running'", [now_iso(), summary, summary, run_id])
            return cur.rowcount

    def add_regression(self, run_id: int, r: Regression, *, host: str = "", commit: bool = True) -> None:
        """A regression (or a note of kind other than `regression`) found by the history check;
        `commit=False` writes inside the caller's open transaction."""
        if commit:
            with self._tx():
                self.db.execute(_REGRESSION_SQL, _regression_args(run_id, r, host))
        else:
            self.db.execute(_REGRESSION_SQL, _regression_args(run_id, r, host))

    def add_warning(self, run_id: int, host: str, message: str) -> None:
        """A warning of the run on a host, not tied to one step."""
        with self._tx():
            insert(self.db, "warnings", {"run_id": run_id, "step_id": None, "host": host, "message": message})

    def steps(self, run_id: int) -> list[StepRow]:
        """A run's steps in the order they started."""
        return rows(self.db, StepRow, "select * from steps where run_id = $1 order by id", [run_id])

    def metrics(self, run_id: int) -> list[MetricRow]:
        """A run's metrics in the order recorded."""
        return rows(self.db, MetricRow, "select * from metrics where run_id = $1 order by id", [run_id])

    def changes(self, run_id: int) -> list[ChangeRow]:
        """A run's file changes in the order made."""
        return rows(self.db, ChangeRow, "select * from changes where run_id = $1 order by id", [run_id])

    def warnings(self, run_id: int) -> list[WarningRow]:
        """A run's warnings in the order raised."""
        return rows(self.db, WarningRow, "select * from warnings where run_id = $1 order by id", [run_id])

    def regressions(self, run_id: int) -> list[RegressionRow]:
        """A run's regressions (and notes of other kinds) in the order found."""
        return rows(self.db, RegressionRow, "select * from regressions where run_id = $1 order by id", [run_id])

    def last_backup(self, host: str, path: str, run_id: int | None = None) -> ChangeRow | None:
        """The newest change of a file on a host that kept a backup (of one run, if given)."""
        args = Args()
        sql = f"select * from changes where host = {args.mark(host)} and path = {args.mark(path)} and backup_path is not null"
        if run_id is not None:
            sql += f" and run_id = {args.mark(run_id)}"
        return first(self.db, ChangeRow, sql + " order by id desc limit 1", args)


def _regression_args(run_id: int, r: Regression, host: str) -> list[Any]:
    return [run_id, r.host or host, r.metric, r.value, r.reference, r.delta_pct, r.reason, r.kind]
