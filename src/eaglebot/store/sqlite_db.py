"""The SQLite store's connection with the face of sqlite-utils' `Database` that the store uses.

`execute`, `query`, `insert_row`, `journal_mode`, `enable_wal` and `conn` (every open, every
read and write of a run) are answered here on the connection; `table()` and `table_names()`
(the migrations, prune's foreign keys) hand over to a real `sqlite_utils.Database` on the
same connection, built the first time one is asked for. Importing sqlite-utils costs about
100 ms of CPU (click, pluggy and dateutil come with it, and its plugin hook scans every
installed distribution's entry points): most of a fresh `eagle history`, for calls that are
each one line over sqlite3 here (tests/bench/bench_startup.py).

Statements are written once for both backends (store/pg_conn.py runs the same text on
PostgreSQL): placeholders are numbered, `$1`, `$2`, ..., PostgreSQL's own spelling, which
SQLite reads as parameters named "1", "2", ...; the values come as a sequence and are bound
here by those names (a mapping is bound as it is). A statement in sqlite3's own `?` spelling
goes through `conn`, the sqlite3 connection.

The connection is in autocommit mode (`isolation_level=None`, as StoreBase opens it), where
sqlite3 opens no implicit transaction: sqlite-utils' `execute` and `query` then do exactly
what these do (its rollback and commit of an implicit transaction never apply).
"""
from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from eaglebot.store.chain import SQLITE, Dialect

if TYPE_CHECKING:
    import sqlite_utils
    from sqlite_utils.db import Table

Params = Sequence[Any] | Mapping[str, Any] | None


def bind(params: Params) -> Mapping[str, Any]:
    """The values of a statement in the store's spelling (`$1`, `$2`, ...) as SQLite binds
    them: by the names "1", "2", ... (a mapping is already by name)."""
    if params is None:
        return {}
    if isinstance(params, Mapping):
        return params
    return {str(i): v for i, v in enumerate(params, 1)}


def load_sqlite_utils() -> Any:
    """The sqlite_utils module (imported here only: what creates or migrates a schema needs it)."""
    import sqlite_utils
    return sqlite_utils


class SqliteDatabase:
    """An SQLite connection with the part of `sqlite_utils.Database` the store calls."""

    dialect: Dialect = SQLITE

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        # As sqlite_utils.Database(conn) does (its default recursive_triggers=True).
        conn.execute("PRAGMA recursive_triggers=on;")

    def execute(self, sql: str, parameters: Params = None, /) -> sqlite3.Cursor:
        if parameters is not None:
            return self.conn.execute(sql, bind(parameters))
        return self.conn.execute(sql)

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]], /) -> None:
        self.conn.executemany(sql, [bind(p) for p in seq])

    def query(self, sql: str, params: Params = None) -> Iterator[dict[str, Any]]:
        """The rows of a statement that returns rows, as dicts (run at once, fetched lazily)."""
        cursor = self.conn.execute(sql, bind(params))
        if cursor.description is None:
            raise ValueError("query() can only be used with SQL that returns rows - use execute() for "
                             "other statements")
        keys = [d[0] for d in cursor.description]
        if len(set(keys)) != len(keys):  # two columns of one name: named as sqlite-utils names them
            keys = load_sqlite_utils().utils.dedupe_keys(keys)
        return (dict(zip(keys, row)) for row in cursor)

    def insert_row(self, table: str, record: dict[str, Any]) -> int:
        """One row by a plain INSERT (the values are scalars: PostgreSQL's face takes no
        others); its rowid. sqlite-utils' `insert` would read the catalog twice first."""
        cols = ", ".join(f'"{c}"' for c in record)
        marks = ", ".join("?" for _ in record)
        rowid = self.conn.execute(f'insert into "{table}" ({cols}) values ({marks})', list(record.values())).lastrowid
        assert rowid is not None  # an INSERT into a rowid table always sets it
        return rowid

    # -- the write transaction (StoreBase._tx): SQLite's write lock is taken at BEGIN ---------
    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def begin(self) -> None:
        """The store's write transaction: BEGIN IMMEDIATE takes the write lock now (one writer
        at a time), so a transaction never fails later on a lock another writer took first."""
        self.conn.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def rollback(self) -> None:
        self.conn.execute("ROLLBACK")

    @property
    def journal_mode(self) -> str:
        return str(self.conn.execute("PRAGMA journal_mode;").fetchone()[0])

    def enable_wal(self) -> None:
        if self.journal_mode != "wal":
            self.conn.execute("PRAGMA journal_mode=wal;")

    @functools.cached_property
    def utils(self) -> sqlite_utils.Database:
        """sqlite-utils' Database on this connection, for the schema helpers."""
        db: sqlite_utils.Database = load_sqlite_utils().Database(self.conn, recursive_triggers=False)
        return db

    def table(self, name: str) -> Table:
        return self.utils.table(name)

    def table_names(self) -> list[str]:
        return self.utils.table_names()
