"""The SQLite audit store's foundation: the connection (WAL, read-only opening), the write
transaction that seals the audit chain, SQLite failures as sentences, and small helpers.

Each aggregate of the store (runs, steps, trends, incidents, ...) is a mixin over `StoreBase`
(store/db.py composes them into `Store`): one connection and one `_tx` are shared by all,
so a write spanning two aggregates (a run row and its host locks) is still one transaction,
and the public API stays one object with the names callers have always used.
"""
from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar, cast
from urllib.parse import quote as url_quote

from eaglebot.errors import StoreError
from eaglebot.facts.host.procs import parse_stat
from eaglebot.store import chain
from eaglebot.store.chain import quote
from eaglebot.store.sealing import Sealer
from eaglebot.store.sqlite_db import SqliteDatabase

R = TypeVar("R")
# What the mixins write through: SqliteDatabase, or store/pg_conn.py's PgDatabase (the same face,
# the same statements: `$n` placeholders, `on conflict` upserts, ids from `insert_row`).
Database = SqliteDatabase

_REASONS = [
    ("disk is full", "the disk is full; free space and run `eagle doctor`"),
    ("disk i/o error", "a disk I/O error (full disk, file size limit or failing disk)"),
    ("readonly database", "it is read-only (check the permissions of the file and its folder)"),
    ("not a database", "it is not an SQLite database (corrupt?); move it aside and run again"),
    ("malformed", "the database file is corrupt; move it aside (keep it for forensics) and run again"),
    ("unable to open", "cannot open it (is the path a folder, or its folder missing or read-only?)"),
    ("locked", "it stayed locked by another process past the busy timeout"),
]


def store_error(path: Path, e: BaseException) -> StoreError:
    """SQLite's failure as one sentence a person can act on, never a traceback."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    low = msg.lower()
    if path.is_dir():
        reason = "the path is a folder, not a database file"
    else:
        reason = next((r for k, r in _REASONS if k in low), msg)
    return StoreError(f"audit store {path}: {reason}")


_URL_PASSWORD = re.compile(r"(://[^:/@?#\s]*:)[^@/?#\s]*@|((?:\?|&)password=)[^&\s]*")


def redact_url(text: str) -> str:
    """A database URL (or a message quoting one) with any password masked: what every message shows."""
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}***@" if m.group(1) else f"{m.group(2)}***", text)


def now_iso() -> str:
    """UTC now as the store writes times (ISO 8601, milliseconds, `Z`): text sorts by time."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(s: str | None) -> datetime | None:
    """A time the store wrote, back as an aware datetime (None for none)."""
    if not s:
        return None
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def proc_start_time(pid: int) -> str | None:
    """Start time of a live local process (/proc/PID/stat field 22): tells a reused PID apart.

    None when there is no such process or it is a zombie (it holds no run and no lock).
    """
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            st = parse_stat(f.read())
    except (OSError, ValueError):
        return None
    return None if st.zombie else st.starttime


def owner_alive(pid: int | None, host: str | None, start: str | None) -> bool:
    """Is the process that wrote a row still running? Unknown on another machine: assume yes."""
    if pid is None:
        return False
    if host and host != socket.gethostname():
        return True
    st = proc_start_time(pid)
    return st is not None and (start is None or st == start)


MY_START = proc_start_time(os.getpid())


def _file_state(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def to_json(v: Any) -> str:
    """A value as the store keeps JSON: sorted keys, anything unknown as its str()."""
    return json.dumps(v, default=str, sort_keys=True)


class Args(list[Any]):
    """The values of a statement built piece by piece, in the store's one placeholder spelling
    (`$1`, `$2`, ...: PostgreSQL's own, and SQLite's numbered names, see store/sqlite_db.py):
    `args.mark(v)` appends v and gives its placeholder; `args.marks(vs)` an IN list's."""

    def mark(self, value: Any) -> str:
        self.append(value)
        return f"${len(self)}"

    def marks(self, values: Iterable[Any]) -> str:
        return ", ".join(self.mark(v) for v in values)


def insert(db: Database, table: str, record: dict[str, Any]) -> int:
    """One row of scalar values written inside the caller's transaction; its id."""
    return db.insert_row(table, record)


def upsert(db: Database, table: str, record: dict[str, Any], key: tuple[str, ...]) -> None:
    """The row of `key` (a primary key or unique index) as `record` says, inserted or updated in
    place (`insert ... on conflict ... do update`, which SQLite and PostgreSQL spell alike). The
    record names every column of the row that is not the key's: what it leaves out keeps its
    old value on an update. Inside the caller's transaction."""
    cols = list(record)
    sets = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in cols if c not in key)
    args = Args()
    db.execute(f"insert into {quote(table)} ({', '.join(quote(c) for c in cols)}) values ({args.marks(record.values())}) "
               f"on conflict ({', '.join(quote(c) for c in key)}) do update set {sets}", args)


def rows(db: Database, row_type: type[R], sql: str, args: Any = ()) -> list[R]:
    """A query's rows as the TypedDict `row_type` (the columns are the schema's, see rows.py)."""
    return cast("list[R]", list(db.query(sql, args)))


def first(db: Database, row_type: type[R], sql: str, args: Any = ()) -> R | None:
    """A query's first row as `row_type`, or None."""
    found = rows(db, row_type, sql, args)
    return found[0] if found else None


class StoreBase:
    """The connection and the sealed write transaction every aggregate mixin writes through."""

    path: Path
    readonly: bool
    db: Database
    _chained: bool
    _seal_cols: bool
    _sealer: Sealer | None
    _sealing_known = False   # this store's key is known to seal its chain (checked once)
    _db_id: str | None
    # The driver's failures, which `_fail` turns into a sentence (PostgreSQL: store/pg_store.py).
    _db_errors: tuple[type[Exception], ...] = (sqlite3.Error,)

    def _fail(self, e: BaseException) -> StoreError:
        return store_error(self.path, e)

    def _connect_rw(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
        self.db = SqliteDatabase(conn)
        self.db.execute("PRAGMA busy_timeout = 30000")
        if self.db.execute("select count(*) from sqlite_master").fetchone()[0] == 0:
            # A new DB gives free pages back (see `_release_free_pages`); an existing one keeps
            # its mode (changing it needs a VACUUM of the whole file).
            self.db.execute("PRAGMA auto_vacuum = INCREMENTAL")
        self._enable_wal()
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("PRAGMA foreign_keys = ON")

    def _connect_readonly(self, live: bool = False) -> None:
        """Read-only. A WAL database with neither `-wal` nor `-shm` beside it is closed (every
        writer has them open): it is read as an immutable file, which creates neither; SQLite's
        ordinary reader would leave both behind. `_stable_read` reads again, as a reader beside
        the writer, if one came meanwhile."""
        wal, shm = Path(f"{self.path}-wal"), Path(f"{self.path}-shm")
        closed = not live and not wal.exists() and not shm.exists()
        self._closed_state = _file_state(self.path) if closed else None
        uri = "file:" + url_quote(str(self.path.absolute())) + "?mode=ro" + ("&immutable=1" if closed else "")
        conn = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None, check_same_thread=False)
        self.db = SqliteDatabase(conn)
        self.db.execute("PRAGMA busy_timeout = 30000")
        self.db.execute("select count(*) from sqlite_master").fetchone()  # a file that is no database fails here

    def _stable_read(self, fn: Callable[[], R]) -> R:
        """`fn()` on this read-only store; read again beside the writer when the file was read
        as closed and a writer opened or changed it meanwhile (an immutable read may then have
        seen pages of two versions)."""
        out = fn()
        state = getattr(self, "_closed_state", None)
        if state is not None and (_file_state(self.path) != state or Path(f"{self.path}-wal").exists()):
            self.db.conn.close()
            self._connect_readonly(live=True)
            out = fn()
        return out

    def _enable_wal(self) -> None:
        # Switching a new file to WAL needs it to itself: another process creating the same
        # DB at that moment answers "locked" at once, without waiting for busy_timeout.
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.db.journal_mode != "wal":
                    self.db.enable_wal()
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _set_version(self, version: int) -> None:
        """Inside the migration's transaction: the schema version it brought the DB to."""
        self.db.execute(f"PRAGMA user_version = {int(version)}")

    def _migrated(self) -> None:
        """After each migration's commit: each migration commits its pages (the catalog's,
        several times over) to the WAL; give that space back after each one, so a new DB on a
        small disk needs room for one migration's pages, not all ten (best effort: a reader may
        hold the WAL)."""
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    @contextmanager
    def _tx(self) -> Iterator[None]:
        """One write transaction (BEGIN IMMEDIATE); the chain entries its writes appended are
        sealed before COMMIT, so a row never exists without its link. Nested: joins the outer."""
        conn = self.db
        if conn.in_transaction:
            yield
            return
        try:
            conn.begin()
        except self._db_errors as e:
            raise self._fail(e) from None
        started = False
        try:
            # Once the chain's table exists (migration v5) it is not looked up again.
            chained = self._chained or chain.table_exists(conn, chain.CHAIN_TABLE)
            since = chain.last_seq(conn) if chained else 0
            yield
            if chained or chain.table_exists(conn, chain.CHAIN_TABLE):
                if self._sealer is not None and not self._sealing_known:
                    started = self._start_sealing(conn, since)
                # Before migration v7 the chain has no seal columns yet: hash only.
                self._seal_cols = self._seal_cols or chain.has_seal_columns(conn)
                chain.seal(conn, since, self._sealer if self._seal_cols else None)
                self._chained = True
            conn.commit()
        except BaseException as e:
            if conn.in_transaction:
                try:
                    conn.rollback()
                except self._db_errors:
                    pass  # SQLite already rolled back (e.g. after SQLITE_FULL)
            if isinstance(e, self._db_errors):
                raise self._fail(e) from None
            raise
        if started and self._sealer is not None:
            # After the commit: a rolled-back 'K' entry must not leave the key saying it started.
            self._sealer.mark_started()
            self._sealing_known = True

    def _start_sealing(self, conn: Database, since: int) -> bool:
        """Once per store with a key, at its first transaction on a chain (before its entries,
        those after `since`, are sealed): does the key seal this chain already, or does sealing
        start here ('K' entry, store/chain.py)? True when the key file must then say it has
        started (after the commit)."""
        if not chain.has_seal_columns(conn):
            if self._version() < 7:
                return False   # migration v7 adds them (and seals from then on)
            # Dropped by another program: put back so new entries are sealed; the seals lost
            # stay lost (`verify` names every unsealed entry).
            chain.add_seal_columns(conn)
            self._seal_cols = True
        state = chain.sealing_state(conn, since)
        assert self._sealer is not None
        if state == "unsealed" and not self._sealer.started:
            chain.start_sealing(conn, self._sealer.key_for().epoch, since)
            return True
        # Sealed already (from its genesis, or since a 'K' entry), or empty: sealed from its
        # first entry. A key that has started elsewhere never starts a chain that is unsealed
        # (its seals stripped, or a database written without the key): `verify` names it.
        self._sealing_known = True
        return state != "unsealed" and not self._sealer.started

    @property
    def db_id(self) -> str:
        """A random id of this audit DB: in the tag of every process a step starts
        (`<db_id>-<run>-<step>`), so two bots' runs on one host never share a tag."""
        if self._db_id is None:
            self._db_id = str(self.db.execute("select value from meta where key = 'db_id'").fetchone()[0])
        return self._db_id

    def proc_tag(self, run_id: int, step_id: int) -> str:
        """The tag the processes of one step carry on their host (`<db_id>-<run>-<step>`)."""
        return f"{self.db_id}-{run_id}-{step_id}"

    def close(self) -> None:
        """Close the connection (the store is not usable afterwards)."""
        self.db.conn.close()
