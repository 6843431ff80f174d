"""PostgreSQL under the store's mixins: a psycopg 3 connection with the small face of sqlite3
and sqlite-utils the mixins use (`execute`, `executemany`, `query`, `insert_row`, `table(...)`
`.create`, the write transaction), over the same statement text SQLite runs.

Why an adapter and not a second set of ~100 methods: the mixins' SQL is written once in the
spelling both databases take natively, and nothing here reads or rewrites it:
- placeholders are numbered, `$1`, `$2`, ...: PostgreSQL's own, sent as they are through
  psycopg's raw cursor (which also leaves a literal `%` alone); SQLite binds them by name
  (store/sqlite_db.py). An IN list or a filter built piece by piece numbers its marks with
  `store.base.Args`;
- upserts are `insert ... on conflict ... do update` / `do nothing` (`store.base.upsert`), and a
  new row's id comes from `insert_row` (here `returning rowid`), never from a cursor's lastrowid;
- `rowid`: every table made by `PgTable.create` (every migration's table) has a real column
  `rowid` (its integer `id` where it has one, an identity otherwise), which the chain names rows
  by (store/pg_dialect.py); it is hidden: `columns` leaves it out, and a row read as a dict
  (`query`) never carries it. The chain and `verify` read it by name with `execute`;
- the write transaction is `begin()` (BEGIN plus a transaction-level advisory lock: one writer
  at a time across every process and replica, as SQLite's write lock is, so chain appends
  never interleave), `commit()`, `rollback()`.
What a mixin spells differently (JSON members, the run_hosts backfill, the catalog, the chain's
triggers and canonical row JSON) it asks the dialect for by name (store/chain.py `Dialect`,
store/pg_dialect.py `PgDialect`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import dict_row

from eaglebot.store.chain import quote
from eaglebot.store.pg_dialect import PG, PgDialect

T = TypeVar("T")

# pg_advisory_xact_lock key of the store's write transaction (advisory locks are per database).
WRITE_LOCK = 0x6561676C65  # "eagle"
HIDDEN = "rowid"   # the column every table has here for the chain (PgTable.create), never in a dict row

_PG_TYPES = {int: "bigint", str: "text", float: "double precision", bytes: "bytea"}


class PgCursor:
    """A statement's result as sqlite3's cursor offers it (tuples; `rowcount`)."""

    def __init__(self, cur: psycopg.RawCursor[Any]):
        self._cur = cur
        self.rowcount = cur.rowcount

    def fetchone(self) -> Any:
        return self._cur.fetchone() if self._cur.description is not None else None

    def fetchall(self) -> list[Any]:
        return self._cur.fetchall() if self._cur.description is not None else []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class PgConn:
    """The psycopg connection (autocommit: the store's transaction is explicit, as on SQLite)
    running the store's statements as they are written."""

    dialect: PgDialect = PG

    def __init__(self, raw: psycopg.Connection[Any], connect: Callable[[], psycopg.Connection[Any]] | None = None):
        self.raw = raw
        self._connect = connect

    def _reconnect(self) -> bool:
        """A new session when this one is gone (PostgreSQL restarted, a failover, a dropped
        link) and no transaction was open on it: the statement about to run starts afresh.
        Inside a transaction nothing is retried: the store's `_tx` fails and rolls back."""
        if self._connect is None or not (self.raw.closed or self.raw.broken):
            return False
        try:
            self.raw.close()
        except psycopg.Error:
            pass
        self.raw = self._connect()
        return True

    def _run(self, fn: Callable[[], T]) -> T:
        """`fn` on the session; once more on a new session when the old one turned out dead
        while no transaction was open (idle sessions die unnoticed until their next use)."""
        was_idle = not self.in_transaction
        if was_idle:
            self._reconnect()
        try:
            return fn()
        except psycopg.OperationalError:
            if not (was_idle and self._reconnect()):
                raise
            return fn()

    @property
    def in_transaction(self) -> bool:
        if self.raw.closed or self.raw.broken:   # a dead session holds no transaction (it rolled back)
            return False
        return self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    def close(self) -> None:
        self.raw.close()

    def begin(self) -> None:
        """The store's write transaction, holding the write lock from its start."""
        def begin() -> None:
            self.raw.execute("BEGIN")
            psycopg.RawCursor(self.raw).execute("select pg_advisory_xact_lock($1)", [WRITE_LOCK])
        self._run(begin)

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        self.raw.execute("ROLLBACK")

    def execute(self, sql: str, parameters: Sequence[Any] | None = None, /) -> PgCursor:
        args = list(parameters) if parameters else None
        # The cursor is made inside: a retry runs on the new session.
        return PgCursor(self._run(lambda: psycopg.RawCursor(self.raw).execute(sql, args)))

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]], /) -> None:
        def run() -> None:
            with psycopg.RawCursor(self.raw) as cur:
                cur.executemany(sql, seq)
        self._run(run)

    def query(self, sql: str, parameters: Sequence[Any] | None = None) -> Iterator[dict[str, Any]]:
        """Rows as dicts, without the hidden `rowid` column."""
        args = list(parameters) if parameters else None

        def fetch() -> list[dict[str, Any]]:
            with psycopg.RawCursor(self.raw, row_factory=dict_row) as cur:
                cur.execute(sql, args)
                return cur.fetchall() if cur.description is not None else []
        found = self._run(fetch)
        for r in found:
            r.pop(HIDDEN, None)
        return iter(found)


@dataclass(frozen=True)
class ForeignKey:
    other_table: str


class PgTable:
    """sqlite-utils' `Table`, the part the migrations call."""

    def __init__(self, db: PgDatabase, name: str):
        self.db, self.name = db, name

    def create(self, columns: dict[str, type], pk: str | tuple[str, ...] = "id",
               foreign_keys: Sequence[tuple[str, str, str]] = (), if_not_exists: bool = False,
               not_null: set[str] | None = None, defaults: dict[str, Any] | None = None) -> PgTable:
        """The table, and its hidden `rowid` (what the chain names its rows by): the integer
        key `id` where it has one, an identity otherwise."""
        pks = [pk] if isinstance(pk, str) else list(pk)
        fks = {c: (t, o) for c, t, o in foreign_keys}
        int_id = pks == ["id"] and columns.get("id") is int
        parts = []
        for c, typ in columns.items():
            d = f"{quote(c)} {_PG_TYPES[typ]}"
            if int_id and c == "id":
                d += " generated by default as identity"
            if c in (not_null or set()):
                d += " not null"
            if defaults and c in defaults:
                d += f" default {defaults[c]!r}"
            if c in fks:
                d += f" references {quote(fks[c][0])} ({quote(fks[c][1])})"
            parts.append(d)
        parts.append(f"{HIDDEN} bigint generated always as ({quote('id')}) stored" if int_id
                     else f"{HIDDEN} bigint generated by default as identity")
        parts.append(f"primary key ({', '.join(quote(c) for c in pks)})")
        self.db.execute(f"create table {'if not exists ' if if_not_exists else ''}{quote(self.name)} "
                        f"({', '.join(parts)})")
        return self

    def create_index(self, cols: list[str], unique: bool = False, if_not_exists: bool = False) -> PgTable:
        name = f"idx_{self.name}_{'_'.join(cols)}"
        self.db.execute(f"create {'unique ' if unique else ''}index {'if not exists ' if if_not_exists else ''}"
                        f"{quote(name)} on {quote(self.name)} ({', '.join(quote(c) for c in cols)})")
        return self

    @property
    def columns_dict(self) -> dict[str, str]:
        return {c: "" for c in PG.columns(self.db, self.name)}

    def add_column(self, col: str, typ: type) -> None:
        self.db.execute(f"alter table {quote(self.name)} add column {quote(col)} {_PG_TYPES[typ]}")

    @property
    def foreign_keys(self) -> list[ForeignKey]:
        return [ForeignKey(r[0]) for r in self.db.execute(
            "select cf.relname from pg_constraint k join pg_class c on c.oid = k.conrelid "
            "join pg_class cf on cf.oid = k.confrelid join pg_namespace n on n.oid = c.relnamespace "
            "where k.contype = 'f' and c.relname = $1 and n.nspname = current_schema()", [self.name])]


class PgDatabase:
    """sqlite-utils' `Database`, the part the mixins call, over one PostgreSQL connection."""

    dialect: PgDialect = PG

    def __init__(self, raw: psycopg.Connection[Any], connect: Callable[[], psycopg.Connection[Any]] | None = None):
        self.conn = PgConn(raw, connect)

    def execute(self, sql: str, parameters: Sequence[Any] | None = None, /) -> PgCursor:
        return self.conn.execute(sql, parameters)

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]], /) -> None:
        self.conn.executemany(sql, seq)

    def query(self, sql: str, parameters: Sequence[Any] | None = None) -> Iterator[dict[str, Any]]:
        return self.conn.query(sql, parameters)

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def begin(self) -> None:
        self.conn.begin()

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()

    def table(self, name: str) -> PgTable:
        return PgTable(self, name)

    def insert_row(self, table: str, record: dict[str, Any]) -> int:
        """One row; its rowid (its `id` where it has an integer one), as SQLite's lastrowid."""
        cols = ", ".join(quote(c) for c in record)
        marks = ", ".join(f"${i}" for i in range(1, len(record) + 1))
        row = self.execute(f"insert into {quote(table)} ({cols}) values ({marks}) returning {HIDDEN}",
                           list(record.values())).fetchone()
        return int(row[0])

    def table_names(self) -> list[str]:
        return [r[0] for r in self.execute(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "where c.relkind = 'r' and n.nspname = current_schema() order by c.relname")]
