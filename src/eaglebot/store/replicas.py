"""Several `eagle serve` replicas on one store: named leases with an expiry (the `leader`
lease), each replica's heartbeat, and the claim that makes a schedule's fire start once.

The SQL is the store's one text for both backends (`insert ... on conflict`, times as ISO
text written by Python, no rowid); PostgreSQL takes the lease with an advisory lock instead
(store/pg_lease.py). Times compare as text: `now_iso()` sorts by time.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from eaglebot.store.base import Args, StoreBase, first, insert, now_iso, rows
from eaglebot.store.rows import LeaseRow, ReplicaRow

# A replica that has not beaten for this long is dead (it beats every ~2 s): its runs and
# locks on another machine are released like a crashed process's on this one.
REPLICA_DEAD_AFTER_S = 10.0
# Heartbeat rows older than this are dropped (a replica that stopped a day ago is history).
REPLICA_FORGET_AFTER_S = 86400.0


def iso_after(seconds: float) -> str:
    """UTC now + seconds in the store's time format (see `now_iso`)."""
    t = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ReplicasMixin(StoreBase):
    """The `leases`, `replicas`, `schedule_claims` and `seen_requests` tables."""

    def claim_requests(self, keys: list[str], window_s: float, max_keys: int) -> bool:
        """Record a Slack request's `keys` for `window_s`, for every replica: True when none was
        seen within its window (answer it), False when one was (a copy). One transaction, so
        two replicas racing with one request cannot both win; expired keys are dropped, and
        past `max_keys` the soonest to expire."""
        if not keys:
            return True
        now = now_iso()
        args = Args()
        marks = args.marks(keys)
        with self._tx():
            self.db.execute("delete from seen_requests where expires_at <= $1", [now])
            if self.db.execute(f"select 1 from seen_requests where key in ({marks}) limit 1", args).fetchone():
                return False
            until = iso_after(window_s)
            for k in keys:
                self.db.execute("insert into seen_requests (key, expires_at) values ($1, $2)", [k, until])
            over = int(self.db.execute("select count(*) from seen_requests").fetchone()[0]) - max_keys
            if over > 0:
                self.db.execute("delete from seen_requests where key in (select key from seen_requests "
                                "order by expires_at limit $1)", [over])
            return True

    def lease_acquire(self, name: str, holder: str, ttl_s: float) -> bool:
        """Take the lease `name` if it is free or expired, renew it if `holder` has it; True
        while `holder` holds it (until now + ttl_s unless renewed). One transaction; a new
        holder is recorded as a chained `leader` event."""
        now = now_iso()
        with self._tx():
            row = self.db.execute("select holder, expires_at from leases where name = $1", [name]).fetchone()
            if row is not None and row[0] != holder and (row[1] or "") > now:
                return False
            before = f"; {row[0]} held it until {row[1]}" if row is not None else ""
            self._write_lease(name, holder, ttl_s, now, new_holder=row is None or row[0] != holder, before=before)
            return True

    def _write_lease(self, name: str, holder: str, ttl_s: float, now: str, *, new_holder: bool,
                     before: str = "") -> None:
        """Inside the caller's transaction: the lease row (renewed, or `holder`'s from now) and,
        for a new holder, the chained `leader` event. Both backends write the row this way."""
        self.db.execute(
            "insert into leases (name, holder, acquired_at, renewed_at, expires_at) values ($1,$2,$3,$4,$5) "
            "on conflict (name) do update set holder = excluded.holder, renewed_at = excluded.renewed_at, "
            "expires_at = excluded.expires_at, acquired_at = case when leases.holder = excluded.holder "
            "then leases.acquired_at else excluded.acquired_at end", [name, holder, now, now, iso_after(ttl_s)])
        if new_holder:
            insert(self.db, "events", {"run_id": None, "at": now, "kind": "leader", "actor": holder,
                                       "message": f"{holder} took the {name} lease{before}"})

    def lease_release(self, name: str, holder: str) -> None:
        """Give the lease up at once (a replica stopping cleanly), if `holder` has it."""
        with self._tx():
            cur = self.db.execute("delete from leases where name = $1 and holder = $2", [name, holder])
            if cur.rowcount:
                insert(self.db, "events", {"run_id": None, "at": now_iso(), "kind": "leader", "actor": holder,
                                           "message": f"{holder} released the {name} lease"})

    def lease_holder(self, name: str) -> LeaseRow | None:
        """The lease's row (holder, acquired, renewed, expires), expired or not; None if free."""
        return first(self.db, LeaseRow, "select * from leases where name = $1", [name])

    def replica_beat(self, replica_id: str, *, hostname: str, pid: int, proc_start: str | None,
                     version: str) -> None:
        """A replica is alive now (its first beat records when it started); replicas gone
        for a day are forgotten."""
        now = now_iso()
        with self._tx():
            self.db.execute(
                "insert into replicas (id, hostname, pid, proc_start, started_at, seen_at, version) "
                "values ($1,$2,$3,$4,$5,$6,$7) on conflict (id) do update set seen_at = excluded.seen_at",
                [replica_id, hostname, pid, proc_start, now, now, version])
            self.db.execute("delete from replicas where seen_at < $1", [iso_after(-REPLICA_FORGET_AFTER_S)])

    def replicas(self) -> list[ReplicaRow]:
        """Every replica that beat within the last day, most recently seen first."""
        return rows(self.db, ReplicaRow, "select * from replicas order by seen_at desc, id")

    def claim_fire(self, schedule: str, fire_time: str, holder: str) -> int | None:
        """Claim one fire of a schedule (its slot's time, the same on every replica) and record
        it `started`: the fire's id, or None when another replica (or an earlier leader)
        claimed that slot already. One transaction."""
        with self._tx():
            cur = self.db.execute(
                "insert into schedule_claims (schedule, fire_time, holder, claimed_at) values ($1,$2,$3,$4) "
                "on conflict (schedule, fire_time) do nothing", [schedule, fire_time, holder, now_iso()])
            if not cur.rowcount:
                return None
            fire_id = insert(self.db, "schedule_fires", {"schedule": schedule, "fire_time": fire_time, "run_id": None,
                                                         "status": "started", "recorded_at": now_iso()})
            self.db.execute("update schedule_claims set fire_id = $1 where schedule = $2 and fire_time = $3",
                            [fire_id, schedule, fire_time])
            return fire_id

    def _replica_dead(self, hostname: str, pid: int, proc_start: str | None) -> bool:
        """Has the replica that is this (hostname, pid, start) process stopped beating? False
        when no replica is that process (a CLI on another machine: assumed alive)."""
        seen = [r[0] or "" for r in self.db.execute("select seen_at, proc_start from replicas where hostname = $1 "
                                                     "and pid = $2", [hostname, pid]).fetchall()
                if proc_start is None or r[1] == proc_start]
        return bool(seen) and max(seen) < iso_after(-REPLICA_DEAD_AFTER_S)
