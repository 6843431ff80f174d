"""The audit store on PostgreSQL (`audit_db: postgresql://user@host[:port]/db`): the shared store
of several `eagle serve` replicas.

The same mixins as SQLite's `Store` (every query, write and chain rule is theirs, and every
statement's text) over a psycopg 3 connection that runs it as written (store/pg_conn.py); the same numbered migrations and
the same chain entries, link hashes and seals (store/pg_dialect.py writes its triggers). What is
PostgreSQL's own: the schema version is a row of `eagle_schema` (SQLite: `PRAGMA user_version`),
a write transaction holds an advisory lock (one writer across replicas, as SQLite's file lock),
a backup is `pg_dump`'s job, and the leader lease is a session advisory lock (store/pg_lease.py).

The password comes from libpq (PGPASSWORD, ~/.pgpass, PGPASSFILE), never from our logs: any
password in the URL is masked in every message.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import psycopg

from eaglebot.errors import StoreError, UsageError
from eaglebot.store import chain
from eaglebot.store.base import redact_url
from eaglebot.store.db import Store
from eaglebot.store.pg_conn import PgDatabase
from eaglebot.store.pg_dialect import create_seq_table
from eaglebot.store.pg_lease import LeaseMixin
from eaglebot.store.rows import AuditHead

if TYPE_CHECKING:
    from eaglebot.store.base import Database

_REASONS = [
    ("password authentication failed", "the password was refused (PGPASSWORD or ~/.pgpass)"),
    ("no password supplied", "it asks for a password: set PGPASSWORD or add it to ~/.pgpass"),
    ("does not exist", None),
    ("connection refused", "nothing listens there (is PostgreSQL running, and the host and port right?)"),
    ("read-only transaction", "it is open read-only"),
]


def _reason(e: BaseException, url: str, password: str | None) -> str:
    msg = " ".join(str(e).split()) or type(e).__name__
    if password:
        msg = msg.replace(password, "***")
    msg = redact_url(msg)
    low = msg.lower()
    for key, reason in _REASONS:
        if key in low:
            return reason or msg
    return msg


class PgStore(LeaseMixin, Store):
    """The audit store on one PostgreSQL database: every aggregate's methods on one connection."""

    def __init__(self, url: str, *, key_file: str | Path | None = None, readonly: bool = False):
        self.url = url
        self.path = Path(redact_url(url))  # only for messages of code written for files; _fail names the URL
        self._leases = {}
        self._setup(key_file, readonly)

        def connect() -> psycopg.Connection[Any]:
            raw = psycopg.connect(url, autocommit=True, application_name="eaglebot", connect_timeout=10)
            if readonly:
                raw.execute("set default_transaction_read_only = on")
            return raw
        try:
            raw = connect()
        except psycopg.Error as e:
            raise self._fail(e) from None
        # The mixins are typed against sqlite-utils' Database; PgDatabase offers the part they call.
        # A session found dead between transactions is replaced (PostgreSQL restarted, a failover).
        self.db = cast("Database", PgDatabase(raw, connect))
        try:
            if not readonly:
                self._open()
        except psycopg.Error as e:
            raw.close()
            raise self._fail(e) from None

    _db_errors = (psycopg.Error,)

    def _fail(self, e: BaseException) -> StoreError:
        password = psycopg.conninfo.conninfo_to_dict(self.url).get("password") if "://" in self.url else None
        return StoreError(f"audit store {redact_url(self.url)}: {_reason(e, self.url, str(password or '') or None)}")

    def _open(self) -> None:
        with self._tx():  # one process creates the version table; the others wait on the write lock
            self.db.execute("create table if not exists eagle_schema (version integer not null)")
            create_seq_table(self.db)
            if self.db.execute("select count(*) from eagle_schema").fetchone()[0] == 0:
                self.db.execute("insert into eagle_schema (version) values (0)")
        self._ready()

    def _version(self) -> int:
        if not chain.table_exists(self.db, "eagle_schema"):
            return 0
        row = self.db.execute("select max(version) from eagle_schema").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def _set_version(self, version: int) -> None:
        self.db.execute("update eagle_schema set version = $1", [version])

    def _migrated(self) -> None:
        """Nothing to give back: PostgreSQL has no WAL file of ours to checkpoint."""

    def _release_free_pages(self) -> None:
        """Autovacuum keeps PostgreSQL's tables; nothing to do after a step."""

    def backup(self, dest: Path) -> AuditHead:
        raise UsageError(f"the audit store is PostgreSQL ({redact_url(self.url)}): back it up with pg_dump, "
                         f"e.g. `pg_dump --format=custom --file={dest} '{redact_url(self.url)}'`, then check the "
                         f"restored copy with `eagle audit verify`")

    def close(self) -> None:
        """Close the connection and give up every lease this store holds."""
        for conn, _ in list(self._leases.values()):
            conn.close()
        self._leases.clear()
        self.db.conn.close()


__all__ = ["LeaseMixin", "PgStore", "redact_url"]
