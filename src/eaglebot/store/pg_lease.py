"""The leader lease on PostgreSQL: a session-level advisory lock held on a connection of its own,
so a leader that dies (SIGKILL, a lost host) gives the lease up when its connection drops, with
no expiry to wait for; a `leases` row names the holder for `eagle status`.

A leader that stops renewing but keeps its process (stopped, hung) is cut off by the server:
the lease's session has `idle_session_timeout` = the lease's ttl, and TCP keepalives end a
session whose client host is gone.
"""
from __future__ import annotations

from typing import Any

import psycopg

from eaglebot.store.base import first, now_iso
from eaglebot.store.chain import table_exists
from eaglebot.store.replicas import ReplicasMixin
from eaglebot.store.rows import LeaseRow

LEASE_KEY = 0x6561676C  # advisory lock namespace of leases (key 1; key 2 is hashtext(name))


class LeaseMixin(ReplicasMixin):
    """`lease_acquire`, `lease_release`, `lease_holder` on PostgreSQL (store/pg_store.py): the
    advisory lock decides; the `leases` row and the `leader` events are SQLite's (ReplicasMixin)."""

    url: str
    _leases: dict[str, tuple[psycopg.Connection[Any], str]]

    def _lease_conn(self, name: str, ttl_s: float) -> psycopg.Connection[Any] | None:
        """A new session that holds the lease's advisory lock, or None when another holds it."""
        conn = psycopg.connect(self.url, autocommit=True, application_name=f"eaglebot lease {name}",
                               connect_timeout=10, keepalives=1, keepalives_idle=5, keepalives_interval=2,
                               keepalives_count=3)
        try:
            ms = max(1000, int(ttl_s * 1000))
            conn.execute(f"set idle_session_timeout = {ms}")
            conn.execute("set tcp_keepalives_idle = 5")
            conn.execute("set tcp_keepalives_interval = 2")
            conn.execute("set tcp_keepalives_count = 3")
            row = conn.execute("select pg_try_advisory_lock(%s, hashtext(%s))", [LEASE_KEY, name]).fetchone()
        except psycopg.Error:
            conn.close()
            raise
        if not (row and row[0]):
            conn.close()
            return None
        return conn

    def lease_acquire(self, name: str, holder: str, ttl_s: float) -> bool:
        """Take or renew the lease `name` for `holder`; True while `holder` holds it."""
        try:
            held = self._leases.get(name)
            if held is not None:
                conn, who = held
                if who != holder:
                    return False
                try:
                    conn.execute("select 1")   # the session is alive (and not idle): still ours
                except psycopg.Error:
                    conn.close()
                    del self._leases[name]
                    held = None
            taken = held is None
            if held is None:
                got = self._lease_conn(name, ttl_s)
                if got is None:
                    return False
                self._leases[name] = (got, holder)
            with self._tx():
                self._write_lease(name, holder, ttl_s, now_iso(), new_holder=taken)
            return True
        except psycopg.Error as e:
            raise self._fail(e) from None

    def lease_release(self, name: str, holder: str) -> None:
        """Give the lease up (a clean shutdown); nothing when `holder` does not hold it here."""
        held = self._leases.get(name)
        if held is None or held[1] != holder:
            return
        conn, _ = self._leases.pop(name)
        try:
            super().lease_release(name, holder)   # the row and the `leader` event
        finally:
            # Unlock first: a closed session's backend lets its locks go only once it has exited,
            # a moment later, and the next holder may already be trying (a clean hand-over).
            try:
                conn.execute("select pg_advisory_unlock(%s, hashtext(%s))", [LEASE_KEY, name])
            except psycopg.Error:
                pass   # the session is gone already: so is its lock
            conn.close()

    def lease_holder(self, name: str) -> LeaseRow | None:
        """Who holds the lease now; None when nobody does (a row left by a dead holder whose
        session is gone names nobody)."""
        try:
            if not table_exists(self.db, "leases"):
                return None
            row = first(self.db, LeaseRow, "select name, holder, acquired_at, renewed_at, expires_at from leases "
                                           "where name = $1", [name])
            if row is None:
                return None
            locked = self.db.execute(
                "select exists (select 1 from pg_locks where locktype = 'advisory' and granted "
                "and database = (select oid from pg_database where datname = current_database()) "
                "and classid = $1::bigint::oid and objid = (hashtext($2)::bigint & 4294967295)::oid "
                "and objsubid = 2)", [LEASE_KEY, name]).fetchone()
            return row if locked and locked[0] else None
        except psycopg.Error as e:
            raise self._fail(e) from None

