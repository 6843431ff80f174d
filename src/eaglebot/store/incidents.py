"""Regression incidents (open from the first flagged run until recovery, a baseline or an
ack) and baselines (the run a playbook's metrics on a host are compared with): together they
decide which runs a metric's reference window may use."""
from __future__ import annotations

from typing import Any

from eaglebot.store.base import Args, StoreBase, first, insert, now_iso, rows, upsert
from eaglebot.store.rows import BaselineRow, BaselineSet, IncidentRow
from eaglebot.store.runs import get_run


class IncidentsMixin(StoreBase):
    """The `incidents`, `incident_runs` and `baselines` tables."""

    def open_incident(self, *, playbook: str, host: str, metric: str, run_id: int, ref_before_run: int,
                      reference: float | None, unit: str, better: str, cause_id: int | None = None) -> int:
        """A new open incident, flagged by `run_id`; its id. `cause_id`: the open incident of
        the same cause it joins (another metric that moved at the same change point)."""
        with self._tx():
            iid = insert(self.db, "incidents", {
                "playbook": playbook, "host": host, "metric": metric, "status": "open", "opened_run": run_id,
                "ref_before_run": ref_before_run, "reference": reference, "unit": unit, "better": better,
                "opened_at": now_iso(), "last_run": run_id, "cause_id": cause_id})
            self.db.execute("insert into incident_runs (incident_id, run_id) values ($1, $2) on conflict do nothing",
                            [iid, run_id])
            return iid

    def incident_flagged(self, incident_id: int, run_id: int) -> None:
        """Another run flagged the same open incident."""
        with self._tx():
            self.db.execute("insert into incident_runs (incident_id, run_id) values ($1, $2) on conflict do nothing",
                            [incident_id, run_id])
            self.db.execute("update incidents set last_run = $1 where id = $2", [run_id, incident_id])

    def open_incident_for(self, playbook: str, host: str, metric: str) -> IncidentRow | None:
        """The open incident of a metric of playbook on host, or None."""
        return first(self.db, IncidentRow, "select * from incidents where playbook = $1 and host = $2 and metric = $3 "
                                           "and status = 'open' order by id desc limit 1", [playbook, host, metric])

    def incidents(self, *, playbook: str | None = None, host: str | None = None, status: str | None = "open",
                  run_id: int | None = None, limit: int = 100) -> list[IncidentRow]:
        """Incidents newest first, by each criterion given (`run_id`: the ones it flagged)."""
        sql = "select * from incidents where 1 = 1"
        args = Args()
        for col, val in (("playbook", playbook), ("host", host), ("status", status)):
            if val is not None:
                sql += f" and {col} = {args.mark(val)}"
        if run_id is not None:
            sql += f" and id in (select incident_id from incident_runs where run_id = {args.mark(run_id)})"
        return rows(self.db, IncidentRow, sql + f" order by id desc limit {args.mark(limit)}", args)

    def incident(self, incident_id: int) -> IncidentRow | None:
        """One incident row by id, whatever its state, or None."""
        return first(self.db, IncidentRow, "select * from incidents where id = $1", [incident_id])

    def incident_cause(self, incident_id: int) -> list[IncidentRow]:
        """Every metric's row of one incident (cause): the row of that id and the rows that joined it."""
        return rows(self.db, IncidentRow, "select * from incidents where id = $1 or cause_id = $2 order by id",
                    [incident_id, incident_id])

    def close_incident(self, incident_id: int, kind: str, by: str, reason: str, run_id: int | None = None) -> bool:
        """Close an open incident (kind: recovered, baseline or ack); False when it was not open."""
        with self._tx():
            cur = self.db.execute(
                "update incidents set status = 'closed', closed_kind = $1, closed_by = $2, reason = $3, "
                "closed_run = $4, closed_at = $5 where id = $6 and status = 'open'",
                [kind, by, reason, run_id, now_iso(), incident_id])
            return cur.rowcount > 0

    def reference_start(self, playbook: str, host: str, metric: str) -> int | None:
        """The first run a metric's reference may use: the baseline, or the start of the
        newest incident an operator accepted (ack), whichever is later."""
        base = self.baseline(playbook, host)
        row = self.db.execute("select max(opened_run) from incidents where playbook = $1 and host = $2 "
                              "and metric = $3 and closed_kind = 'ack'", [playbook, host, metric]).fetchone()
        cands = [v for v in (base["run_id"] if base else None, row[0] if row else None) if v is not None]
        return max(cands) if cands else None

    def set_baseline(self, run_id: int, set_by: str) -> BaselineSet:
        """Make a run the baseline of its playbook on each of its hosts; KeyError for no such run."""
        run = get_run(self.db, run_id)
        if run is None:
            raise KeyError(run_id)
        out = []
        with self._tx():
            for h in run["hosts"]:
                upsert(self.db, "baselines", {"playbook": run["playbook"], "host": h, "run_id": run_id,
                                              "set_by": set_by, "set_at": now_iso()}, key=("playbook", "host"))
                out.append(h)
        return {"playbook": run["playbook"], "hosts": out, "run_id": run_id}

    def baseline(self, playbook: str, host: str) -> BaselineRow | None:
        """The baseline of a playbook on a host, or None."""
        return first(self.db, BaselineRow, "select * from baselines where playbook = $1 and host = $2", [playbook, host])
