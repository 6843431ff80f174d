"""PostgreSQL under the store's mixins: a psycopg 3 connection dressed as the small part of
sqlite3 and sqlite-utils the mixins use (`execute`, `query`, `table(...).insert`, `rows_where`,
`create`, `in_transaction`), translating SQLite's dialect on the way.

Why an adapter and not a second set of ~80 methods: the mixins' SQL is plain and almost all
portable; what differs is a handful of spellings, each translated here once:
- placeholders `?` / `:name` -> `%s` / `%(name)s` (and a literal `%` doubled);
- `insert or ignore` -> `on conflict do nothing`; `insert or replace` -> `on conflict (pk) do
  update` setting every other column (what SQLite's replace leaves: the new row's values);
- `lastrowid` -> `returning id` on an insert into a table with an `id`;
- `rowid` -> a real column `rowid` every table has on PostgreSQL (its `id` where it has one, an
  identity otherwise): the chain names rows by it; it is hidden from `select *` and `columns`;
- `BEGIN IMMEDIATE` -> `BEGIN` plus a transaction-level advisory lock: one writer at a time
  across every process and replica, as SQLite's write lock is, so chain appends never interleave;
- the few statements with SQLite-only functions (JSON) -> their PostgreSQL form (`_REWRITES`).
The chain's own SQL (triggers, canonical row JSON, the catalog) is store/pg_dialect.py.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import dict_row

from eaglebot.store.chain import quote
from eaglebot.store.pg_dialect import PG, PgDialect

# pg_advisory_xact_lock key of the store's write transaction (advisory locks are per database).
WRITE_LOCK = 0x6561676C65  # "eagle"

_PG_TYPES = {int: "bigint", str: "text", float: "double precision", bytes: "bytea"}
_REWRITES: list[tuple[re.Pattern[str], str]] = [
    # migration 0002: run_hosts backfilled from runs.hosts (a JSON list of names)
    (re.compile(r"^insert or ignore into run_hosts \(run_id, host\) select r\.id, j\.value from runs r, "
                r"json_each\(r\.hosts\) j where json_valid\(r\.hosts\) and j\.type = 'text'$"),
     "insert into run_hosts (run_id, host) select r.id, j.value from runs r, "
     "jsonb_array_elements_text(case when jsonb_typeof(r.hosts::jsonb) = 'array' then r.hosts::jsonb "
     "else '[]'::jsonb end) j on conflict do nothing"),
    # trends.last_fingerprinted_run: one host's part of the fingerprint (the key is the host name)
    (re.compile(r"json_extract\(r\.fingerprint, :path\) as state (.*) and json_valid\(r\.fingerprint\) "
                r"and json_type\(r\.fingerprint, :path\) = 'object'", re.S),
     r"(r.fingerprint::jsonb -> :host)::text as state \1 and r.fingerprint like '{%' "
     r"and jsonb_typeof(r.fingerprint::jsonb -> :host) = 'object'"),
    # a subquery in FROM needs an alias on PostgreSQL before 16
    (re.compile(r"^(select count\(\*\) from \(.*\))$", re.S), r"\1 as _q"),
    (re.compile(r"\[(\w+)\]"), r'"\1"'),
]
_INSERT = re.compile(r"^\s*insert\s+(?:or\s+(ignore|replace)\s+)?into\s+(\"?[\w]+\"?)\s*(\(([^)]*)\))?", re.I)


_LITERAL = re.compile(r"('(?:[^']|'')*')")


def _placeholders(sql: str, named: bool, escape: bool) -> str:
    """SQLite's `?` / `:name` as psycopg's, outside string literals; with parameters to bind
    (`escape`), a literal `%` doubled."""
    out = []
    for i, part in enumerate(_LITERAL.split(sql)):
        if escape:
            part = part.replace("%", "%%")
        if i % 2 == 0:   # outside a literal
            part = re.sub(r"(?<![:\w]):([A-Za-z_]\w*)", r"%(\1)s", part) if named else part.replace("?", "%s")
        out.append(part)
    return "".join(out)


class PgCursor:
    """A statement's result as sqlite3's cursor offers it (tuples; `lastrowid`, `rowcount`)."""

    def __init__(self, cur: psycopg.Cursor[Any], lastrowid: int | None = None):
        self._cur = cur
        self.lastrowid = lastrowid
        self.rowcount = cur.rowcount

    def fetchone(self) -> Any:
        return self._cur.fetchone() if self._cur.description is not None else None

    def fetchall(self) -> list[Any]:
        return self._cur.fetchall() if self._cur.description is not None else []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class PgConn:
    """The psycopg connection (autocommit: the store's `BEGIN`/`COMMIT` are explicit, as on
    SQLite) with sqlite3's `execute`/`executemany`/`in_transaction`, translating as it goes."""

    dialect: PgDialect = PG

    def __init__(self, raw: psycopg.Connection[Any]):
        self.raw = raw
        self._pks: dict[str, list[str]] = {}
        self._cols: dict[str, list[str]] = {}

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    def close(self) -> None:
        self.raw.close()

    # -- the catalog, cached until the next DDL ---------------------------------------------
    def _catalog(self, table: str) -> tuple[list[str], list[str]]:
        t = table.strip('"')
        if t not in self._cols:
            self._cols[t] = PG.columns(self, t)
            self._pks[t] = [r[0] for r in self.raw.execute(
                "select a.attname from pg_index i join pg_attribute a on a.attrelid = i.indrelid "
                "and a.attnum = any(i.indkey) join pg_class c on c.oid = i.indrelid "
                "join pg_namespace n on n.oid = c.relnamespace "
                "where i.indisprimary and c.relname = %s and n.nspname = current_schema() order by a.attnum", [t])]
        return self._cols[t], self._pks[t]

    def translate(self, sql: str, named: bool, escape: bool = True) -> tuple[str, bool]:
        """SQLite's statement in PostgreSQL's words; True when it returns the new row's id."""
        s = sql.strip()
        for pat, rep in _REWRITES:
            s = pat.sub(rep, s)
        returning = False
        m = _INSERT.match(s)
        if m:
            kind, table = (m.group(1) or "").lower(), m.group(2)
            cols, pk = self._catalog(table)
            if kind:
                s = re.sub(r"^\s*insert\s+or\s+\w+\s+into", "insert into", s, count=1, flags=re.I)
            if kind == "ignore":
                s += " on conflict do nothing"
            elif kind == "replace":
                given = [c.strip().strip('"') for c in (m.group(4) or "").split(",") if c.strip()]
                sets = [f"{quote(c)} = excluded.{quote(c)}" if c in given else f"{quote(c)} = default"
                        for c in cols if c not in pk]
                s += f" on conflict ({', '.join(quote(c) for c in pk)}) do update set {', '.join(sets)}"
            if "id" in cols and "returning" not in s.lower():
                s += " returning id"
                returning = True
        elif re.match(r"^\s*(create|alter|drop)\b", s, re.I):
            self._cols.clear()
            self._pks.clear()
        return _placeholders(s, named, escape), returning

    def execute(self, sql: str, parameters: Any = None, /) -> PgCursor:
        if sql.strip().upper() == "BEGIN IMMEDIATE":
            self.raw.execute("BEGIN")
            self.raw.execute("select pg_advisory_xact_lock(%s)", [WRITE_LOCK])
            return PgCursor(self.raw.cursor())
        if sql.strip().lower().startswith("pragma"):
            raise psycopg.NotSupportedError(f"an SQLite PRAGMA on PostgreSQL: {sql.strip()[:60]}")
        pg, returning = self.translate(sql, isinstance(parameters, Mapping), bool(parameters))
        cur = self.raw.execute(pg, parameters or None)
        if returning:
            row = cur.fetchone()
            return PgCursor(cur, int(row[0]) if row else None)
        return PgCursor(cur)

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]], /) -> None:
        pg, _ = self.translate(sql, False)
        pg = pg.replace(" returning id", "")
        with self.raw.cursor() as cur:
            cur.executemany(pg, seq)

    def query(self, sql: str, parameters: Any = None) -> Iterator[dict[str, Any]]:
        """Rows as dicts; the hidden `rowid` only when the statement names it."""
        pg, _ = self.translate(sql, isinstance(parameters, Mapping), bool(parameters))
        with self.raw.cursor(row_factory=dict_row) as cur:
            cur.execute(pg, parameters or None)
            found = cur.fetchall() if cur.description is not None else []
        keep_rowid = re.search(r"\browid\b", sql) is not None
        for r in found:
            if not keep_rowid:
                r.pop("rowid", None)
            yield r


@dataclass(frozen=True)
class ForeignKey:
    other_table: str


class PgTable:
    """sqlite-utils' `Table`, the part the migrations and mixins call."""

    def __init__(self, db: PgDatabase, name: str):
        self.db, self.name = db, name
        self.last_rowid: int | None = None

    def create(self, columns: dict[str, type], pk: str | tuple[str, ...] = "id",
               foreign_keys: Sequence[tuple[str, str, str]] = (), if_not_exists: bool = False,
               not_null: set[str] | None = None, defaults: dict[str, Any] | None = None) -> PgTable:
        pks = [pk] if isinstance(pk, str) else list(pk)
        fks = {c: (t, o) for c, t, o in foreign_keys}
        parts = []
        for c, typ in columns.items():
            d = f"{quote(c)} {_PG_TYPES[typ]}"
            if pks == [c] and typ is int:
                d += " generated by default as identity"
            if c in (not_null or set()):
                d += " not null"
            if defaults and c in defaults:
                d += f" default {defaults[c]!r}"
            if c in fks:
                d += f" references {quote(fks[c][0])} ({quote(fks[c][1])})"
            parts.append(d)
        parts.append(f"rowid bigint generated always as ({quote(pks[0])}) stored" if pks == ["id"]
                     else "rowid bigint generated by default as identity")
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
        return {c: "" for c in PG.columns(self.db.conn, self.name)}

    def add_column(self, col: str, typ: type) -> None:
        self.db.execute(f"alter table {quote(self.name)} add column {quote(col)} {_PG_TYPES[typ]}")

    def insert(self, record: dict[str, Any]) -> PgTable:
        cols = ", ".join(quote(c) for c in record)
        marks = ", ".join("?" for _ in record)
        self.last_rowid = self.db.execute(f"insert into {quote(self.name)} ({cols}) values ({marks})",
                                          list(record.values())).lastrowid
        return self

    def rows_where(self, where: str | None = None, where_args: Sequence[Any] | None = None,
                   order_by: str | None = None) -> Iterator[dict[str, Any]]:
        sql = f"select * from {quote(self.name)}"
        sql += f" where {where}" if where else ""
        sql += f" order by {order_by}" if order_by else ""
        return self.db.query(sql, list(where_args or []))

    @property
    def foreign_keys(self) -> list[ForeignKey]:
        return [ForeignKey(r[0]) for r in self.db.conn.raw.execute(
            "select cf.relname from pg_constraint k join pg_class c on c.oid = k.conrelid "
            "join pg_class cf on cf.oid = k.confrelid join pg_namespace n on n.oid = c.relnamespace "
            "where k.contype = 'f' and c.relname = %s and n.nspname = current_schema()", [self.name])]


class PgDatabase:
    """sqlite-utils' `Database`, the part the mixins call, over one PostgreSQL connection."""

    def __init__(self, raw: psycopg.Connection[Any]):
        self.conn = PgConn(raw)

    def execute(self, sql: str, parameters: Any = None) -> PgCursor:
        return self.conn.execute(sql, parameters)

    def query(self, sql: str, parameters: Any = None) -> Iterator[dict[str, Any]]:
        return self.conn.query(sql, parameters)

    def table(self, name: str) -> PgTable:
        return PgTable(self, name)

    def table_names(self) -> list[str]:
        return [r[0] for r in self.conn.raw.execute(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "where c.relkind = 'r' and n.nspname = current_schema() order by c.relname")]
