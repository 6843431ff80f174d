"""Parameter sweeps and bisections: a grid of runs kept as one row per point, so a sweep
interrupted by a restart resumes where it stopped."""
from __future__ import annotations

import json
from typing import Any, cast

from eaglebot.store.base import StoreBase, insert, now_iso, to_json
from eaglebot.store.rows import SweepPointRow, SweepRow


def _loads(text: str | None) -> Any:
    return json.loads(text) if text else None


class SweepsMixin(StoreBase):
    """The `sweeps` and `sweep_points` tables (their JSON columns come back decoded)."""

    def create_sweep(self, *, kind: str, playbook: str, host: str, spec: dict[str, Any], actor: str,
                     origin: str, points: list[tuple[dict[str, Any], str, str]]) -> int:
        """A sweep and its points: (inputs, status 'pending' or 'skipped', reason)."""
        with self._tx():
            sid = insert(self.db, "sweeps", {"kind": kind, "playbook": playbook, "host": host, "spec": to_json(spec),
                                             "status": "running", "actor": actor, "origin": origin,
                                             "created_at": now_iso()})
            self.db.executemany(
                "insert into sweep_points (sweep_id, idx, inputs, status, reason) values ($1,$2,$3,$4,$5)",
                [(sid, i, to_json(inputs), status, reason) for i, (inputs, status, reason) in enumerate(points)])
            return sid

    def get_sweep(self, sweep_id: int) -> SweepRow | None:
        """A sweep by id, spec and result decoded, or None."""
        for r in self.db.query("select * from sweeps where id = $1", [sweep_id]):
            return cast(SweepRow, {**r, "spec": _loads(r["spec"]), "result": _loads(r["result"])})
        return None

    def sweep_points(self, sweep_id: int) -> list[SweepPointRow]:
        """A sweep's points in grid order, inputs ({} if none) and result decoded."""
        return [cast(SweepPointRow, {**r, "inputs": _loads(r["inputs"]) or {}, "result": _loads(r["result"])})
                for r in self.db.query("select * from sweep_points where sweep_id = $1 order by idx", [sweep_id])]

    def sweep_point_done(self, sweep_id: int, idx: int, status: str, run_id: int | None,
                         result: dict[str, Any] | None, reason: str = "") -> None:
        """How one point ended: its run and what it measured."""
        with self._tx():
            self.db.execute("update sweep_points set status = $1, run_id = $2, result = $3, reason = $4 "
                            "where sweep_id = $5 and idx = $6",
                            [status, run_id, to_json(result) if result is not None else None, reason, sweep_id, idx])

    def add_sweep_point(self, sweep_id: int, inputs: dict[str, Any]) -> int:
        """Append a pending point (a bisection's next probe); its index."""
        with self._tx():
            row = self.db.execute("select coalesce(max(idx), -1) + 1 from sweep_points where sweep_id = $1",
                                  [sweep_id]).fetchone()
            idx = int(row[0])
            self.db.execute("insert into sweep_points (sweep_id, idx, inputs, status, reason) "
                            "values ($1,$2,$3,'pending','')", [sweep_id, idx, to_json(inputs)])
            return idx

    def finish_sweep(self, sweep_id: int, status: str, result: dict[str, Any] | None) -> None:
        """How the sweep ended, and its result."""
        with self._tx():
            self.db.execute("update sweeps set status = $1, finished_at = $2, result = $3 where id = $4",
                            [status, now_iso(), to_json(result) if result is not None else None, sweep_id])
