"""Metrics and history across runs: the queries the regression check, fingerprints and
`eagle history`/`trend` read (metric windows, a host's runs, steps and changes)."""
from __future__ import annotations

import json
from typing import Any

from eaglebot.store.base import Args, StoreBase, rows
from eaglebot.store.chain import dialect
from eaglebot.store.rows import (
    ChangeRow, FingerprintState, HostStepRow, LatestMetric, MetricPoint, MetricRow, RunRow, StepDataRow, StepRow,
)
from eaglebot.store.runs import decode_run


class TrendsMixin(StoreBase):
    """Read-mostly queries over runs, steps, metrics, changes and regressions."""

    def metric_history(self, playbook: str, host: str, metric: str, *, before_run: int | None = None,
                       since_run: int | None = None, limit: int = 10,
                       exclude_incident_runs: bool = False, config: str | None = None) -> list[MetricPoint]:
        """Values of one metric from successful runs of playbook+host, newest first.

        config: only values of this configuration class and those whose class was not said (a
        skill that says none, runs from before classes were recorded); "": only the latter.

        exclude_incident_runs: leave out runs an incident flagged, unless that incident was
        accepted (closed by an ack or a baseline): a reference window never learns a drop."""
        sql = ("select m.run_id, m.value, m.unit, m.better, r.started_at, m.config_class from metrics m "
               "join runs r on r.id = m.run_id where r.playbook = $1 and m.host = $2 and m.name = $3 "
               "and r.status = 'succeeded' and r.dry_run = 0")
        args = Args([playbook, host, metric])
        if exclude_incident_runs:
            sql += (" and m.run_id not in (select ir.run_id from incident_runs ir join incidents i "
                    "on i.id = ir.incident_id where i.playbook = $1 and i.host = $2 and i.metric = $3 "
                    "and (i.status = 'open' or i.closed_kind = 'recovered'))")
        if config:
            sql += f" and (m.config_class is null or m.config_class = {args.mark(config)})"
        elif config is not None:
            sql += " and m.config_class is null"
        if before_run is not None:
            sql += f" and m.run_id < {args.mark(before_run)}"
        if since_run is not None:
            sql += f" and m.run_id >= {args.mark(since_run)}"
        sql += f" order by m.run_id desc limit {args.mark(limit)}"
        return rows(self.db, MetricPoint, sql, args)

    def latest_metrics(self, names: list[str]) -> list[LatestMetric]:
        """The newest value of each of `names` per host and playbook, from successful real runs
        that no other run started (a tune's cells are not the host's result)."""
        if not names:
            return []
        args = Args()
        ok = "r.status = 'succeeded' and r.dry_run = 0 and r.parent_run_id is null"
        return rows(self.db, LatestMetric,
                    "select m.host, r.playbook, m.name, m.value, m.run_id from metrics m join runs r on r.id = m.run_id "
                    "join (select max(m2.id) as id from metrics m2 join runs r on r.id = m2.run_id "
                    f"where {ok} and m2.name in ({args.marks(names)}) group by m2.host, r.playbook, m2.name) n "
                    "on n.id = m.id order by m.host, r.playbook, m.name", args)

    def previous_good_run(self, playbook: str, host: str, before_run: int) -> RunRow | None:
        """The newest earlier run of playbook on host that succeeded without a flagged regression."""
        found = rows(self.db, dict,
                     "select r.* from run_hosts rh join runs r on r.id = rh.run_id "
                     "where rh.host = $1 and rh.run_id < $2 and r.playbook = $3 and r.status = 'succeeded' "
                     "and r.dry_run = 0 and not exists (select 1 from regressions g where g.run_id = r.id "
                     "and g.kind = 'regression' and (g.host = $4 or g.host = '')) "
                     "order by rh.run_id desc limit 1", [host, before_run, playbook, host])
        return decode_run(found[0]) if found else None

    def host_run_ids(self, host: str, *, after: int = 0, upto: int | None = None) -> list[int]:
        """Ids of the runs on a host in (after, upto], oldest first."""
        sql = "select run_id from run_hosts where host = $1 and run_id > $2"
        args = Args([host, after])
        if upto is not None:
            sql += f" and run_id <= {args.mark(upto)}"
        return [r[0] for r in self.db.execute(sql + " order by run_id", args)]

    def last_fingerprinted_run(self, host: str, upto: int) -> FingerprintState | None:
        """The newest run <= upto on host whose fingerprint describes that host (one row read,
        only that host's part of the fingerprint parsed)."""
        d = dialect(self.db)
        found = list(self.db.query(
            f"select r.id, {d.member_sql('r.fingerprint', '$1')} as state from run_hosts rh "
            "join runs r on r.id = rh.run_id where rh.host = $2 and rh.run_id <= $3 "
            f"and {d.member_is_object_sql('r.fingerprint', '$1')} "
            "order by rh.run_id desc limit 1", [d.member_key(host), host, upto]))
        if not found:
            return None
        return {"run_id": found[0]["id"], "state": json.loads(found[0]["state"])}

    def host_steps(self, host: str, after: int, upto: int) -> list[HostStepRow]:
        """Finished steps of runs (after, upto] on host, oldest first (for fingerprints)."""
        return rows(self.db, HostStepRow,
                    "select s.run_id, s.skill, s.status, s.params, s.data from steps s "
                    "join run_hosts rh on rh.run_id = s.run_id and rh.host = s.host "
                    "where rh.host = $1 and rh.run_id > $2 and rh.run_id <= $3 "
                    "and (s.status in ('ok', 'changed') or (s.skill = 'gpu.health' and s.status = 'failed')) "
                    "and (s.skill in ('server.launch', 'config.patch', 'gpu.health') "
                    "or s.data like '%package_versions%') order by s.run_id, s.id", [host, after, upto])

    def last_step_data(self, host: str, skill: str, key: str) -> dict[str, Any] | None:
        """Registered data of the newest step of `skill` on host that recorded `key`."""
        for row in self.db.execute(
                "select data from steps where host = $1 and skill = $2 and data like $3 order by id desc limit 5",
                [host, skill, f'%"{key}"%']):
            try:
                data = json.loads(row[0])
            except (TypeError, json.JSONDecodeError):
                continue
            if isinstance(data, dict) and data.get(key):
                return data
        return None

    def newest_steps(self, skill: str, limit: int = 1000) -> list[StepRow]:
        """The newest finished step of `skill` on each host, newest first (`eagle fleet`'s last checks)."""
        return rows(self.db, StepRow,
                    "select s.* from steps s join (select host, max(id) as id from steps where skill = $1 "
                    "and status in ('ok', 'changed', 'failed') group by host) n on s.id = n.id "
                    "order by s.id desc limit $2", [skill, limit])

    def step_data_history(self, host: str, skills: list[str], contains: str, limit: int = 200,
                          newest_first: bool = False) -> list[StepDataRow]:
        """Finished steps of `skills` on host whose registered data mentions `contains`, oldest first.
        Dry runs are left out: a dry run changes nothing, the evidence this history gives included."""
        if not skills:
            return []
        args = Args([host])
        return rows(self.db, StepDataRow,
                    f"select run_id, skill, status, data from steps where host = $1 and skill in ({args.marks(skills)}) "
                    f"and status in ('ok', 'changed', 'failed') and data like {args.mark(f'%{contains}%')} "
                    f"and run_id not in (select id from runs where dry_run <> 0) "
                    f"order by id {'desc' if newest_first else 'asc'} limit {args.mark(limit)}", args)

    def host_changes(self, host: str, after: int, upto: int) -> list[ChangeRow]:
        """File changes on a host by runs (after, upto], oldest first."""
        return rows(self.db, ChangeRow, "select * from changes where host = $1 and run_id > $2 and run_id <= $3 "
                                        "order by run_id, id", [host, after, upto])

    def metrics_for_runs(self, run_ids: list[int]) -> dict[int, list[MetricRow]]:
        """Every metric of each run, in the order recorded (one query; runs without metrics absent)."""
        if not run_ids:
            return {}
        args = Args()
        out: dict[int, list[MetricRow]] = {}
        for m in rows(self.db, MetricRow, f"select * from metrics where run_id in ({args.marks(run_ids)}) "
                                          "order by run_id, id", args):
            out.setdefault(m["run_id"], []).append(m)
        return out

    def metric_value(self, run_id: int, name: str) -> float | None:
        """A run's first value of a metric, or None."""
        row = self.db.execute("select value from metrics where run_id = $1 and name = $2 order by id limit 1",
                              [run_id, name]).fetchone()
        return float(row[0]) if row else None

    def regression_counts(self, run_ids: list[int]) -> dict[int, int]:
        """Run id -> regressions flagged (kind `regression`), for the runs that have any."""
        if not run_ids:
            return {}
        args = Args()
        return {r["run_id"]: r["n"] for r in self.db.query(
            f"select run_id, count(*) as n from regressions where run_id in ({args.marks(run_ids)}) "
            "and coalesce(kind, 'regression') = 'regression' group by run_id", args)}

    def flagged_runs(self, host: str, metric: str, run_ids: list[int]) -> set[int]:
        """Which of run_ids flagged a regression of metric on host."""
        if not run_ids:
            return set()
        args = Args([metric, host])
        return {r[0] for r in self.db.execute(
            "select run_id from regressions where kind = 'regression' and metric = $1 and host = $2 "
            f"and run_id in ({args.marks(run_ids)})", args)}

    def update_regression_reason(self, run_id: int, host: str, metric: str, old: str, new: str) -> None:
        """Reword a regression's reason (e.g. once a later check attributes it)."""
        with self._tx():
            self.db.execute("update regressions set reason = $1 where run_id = $2 and host = $3 and metric = $4 "
                            "and reason = $5", [new, run_id, host, metric, old])
