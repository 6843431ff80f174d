"""Schedules: each fire (when it was due, what it started or why not), so misfires after a
restart are found, and the paused state set from Slack."""
from __future__ import annotations

from eaglebot.store.base import StoreBase, first, insert, now_iso, rows, upsert
from eaglebot.store.rows import ScheduleFireRow, ScheduleStateRow


class SchedulesMixin(StoreBase):
    """The `schedule_fires` and `schedule_state` tables."""

    def record_fire(self, schedule: str, fire_time: str, status: str, run_id: int | None = None) -> int:
        """A schedule fired (or was skipped) for `fire_time`; the fire's id."""
        with self._tx():
            return insert(self.db, "schedule_fires", {"schedule": schedule, "fire_time": fire_time, "run_id": run_id,
                                                      "status": status, "recorded_at": now_iso()})

    def update_fire(self, fire_id: int, status: str, run_id: int | None = None) -> None:
        """A fire's outcome (and the run it started, when known)."""
        with self._tx():
            self.db.execute("update schedule_fires set status = $1, run_id = coalesce($2, run_id) where id = $3",
                            [status, run_id, fire_id])

    def last_fire(self, schedule: str) -> ScheduleFireRow | None:
        """A schedule's latest fire (by fire time), or None."""
        return first(self.db, ScheduleFireRow, "select * from schedule_fires where schedule = $1 "
                                               "order by fire_time desc, id desc limit 1", [schedule])

    def schedule_fires(self, schedule: str, since: str = "", limit: int = 100) -> list[ScheduleFireRow]:
        """A schedule's fires at or after `since` (ISO time; "" from the first), oldest first."""
        return rows(self.db, ScheduleFireRow, "select * from schedule_fires where schedule = $1 and fire_time >= $2 "
                                              "order by fire_time, id limit $3", [schedule, since, limit])

    def set_schedule_paused(self, name: str, paused: bool, changed_by: str) -> bool:
        """Pause or resume a schedule; False when it already was in that state."""
        with self._tx():
            row = self.db.execute("select paused from schedule_state where name = $1", [name]).fetchone()
            if bool(row and row[0]) == paused:
                return False
            upsert(self.db, "schedule_state", {"name": name, "paused": int(paused), "changed_by": changed_by,
                                               "changed_at": now_iso()}, key=("name",))
            return True

    def schedule_states(self) -> dict[str, ScheduleStateRow]:
        """Schedule name -> its paused state, for the schedules ever paused or resumed."""
        return {r["name"]: r for r in rows(self.db, ScheduleStateRow, "select * from schedule_state")}
