"""The tamper-evident audit trail: every change to an audit row is a link in one hash chain.

Design (why triggers and a seal):
- AFTER INSERT/UPDATE/DELETE triggers on each table in `CHAINED_TABLES` append one entry to
  `audit_chain` (table, rowid, op, the row's columns as JSON), so no code path of the store
  (nor of another branch's new methods) has to remember to write the link. The trigger body
  lists the table's columns as they are when it is installed; `ensure_triggers` (run at every
  open, after the migrations) rebuilds a table's triggers when its columns changed and
  snapshots its rows again, so a column added by a later migration is covered too.
- The store's write transaction `seals` the entries it made before COMMIT: the row's JSON
  is replaced by its SHA-256, and the entry's hash covers that, the entry's fields and the
  previous entry's hash. Same transaction as the row, so a row never exists without its link.
- The triggers call no custom SQL function, so a write by another program (the sqlite3
  shell, Datasette) still succeeds, but its entry stays unsealed: `verify` names it. An edit
  made with the triggers dropped shows as a live row whose content differs from its last
  entry, a deleted row as a row with no 'D' entry, an edited or removed entry as a broken link.
  Cutting entries off the end is only visible against an anchor kept outside the DB: the
  head hash posted to Slack once a day (`eagle audit verify --head HASH`).
- A database made before the chain existed starts it with a genesis entry that says so,
  followed by a snapshot ('S') of every existing row as it was at the migration.

To chain a new table, add its name to `CHAINED_TABLES`: the next open installs its triggers
and snapshots its rows. Rule for store code: write chained tables only inside `Store._tx()`
(the seal runs at its COMMIT); an autocommit write (e.g. sqlite-utils' `table.insert()`
outside `_tx`) leaves an unsealed entry that `verify` reports as a change by another program.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import asdict, dataclass, field
from typing import Any

# Every audit table whose rows are chained. Extend at merge time (e.g. "incidents"); a name
# whose table does not exist (yet) is skipped until a migration creates it.
CHAINED_TABLES: tuple[str, ...] = (
    "runs", "steps", "metrics", "changes", "approvals", "events", "warnings", "regressions",
    "baselines", "incidents", "incident_runs", "sweeps", "sweep_points", "schedule_state",
)

CHAIN_TABLE = "audit_chain"
_CREATE = f"""create table if not exists {CHAIN_TABLE} (
    seq integer primary key autoincrement,
    tbl text not null,
    row_id integer,
    op text not null,
    at text not null default (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    content text,
    content_sha256 text,
    prev_hash text,
    hash text
)"""
GENESIS = "G"
COLUMNS = "C"  # a table's column list as the chain covers it (kept readable, like genesis)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"pragma table_info({_q(table)})")]


def table_exists(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute("select 1 from sqlite_master where type = 'table' and name = ?", [table]).fetchone() is not None


def row_json_sql(cols: list[str], ref: str) -> str:
    """The row as canonical JSON text, in SQL, so the trigger and `verify` build the same text."""
    parts = []
    for c in cols:
        v = f"{ref}{_q(c)}"
        parts.append(f"'{c}', case when typeof({v}) = 'blob' then hex({v}) else {v} end")
    return "json_object(" + ", ".join(parts) + ")"


def _trigger_sql(table: str, cols: list[str]) -> dict[str, str]:
    t, lit = _q(table), "'" + table.replace("'", "''") + "'"
    ins = f"insert into {CHAIN_TABLE} (tbl, row_id, op, content)"
    new, old = row_json_sql(cols, "NEW."), row_json_sql(cols, "OLD.")
    return {
        f"audit_chain_{table}_i": (
            f"CREATE TRIGGER {_q('audit_chain_' + table + '_i')} AFTER INSERT ON {t} BEGIN "
            f"{ins} values ({lit}, NEW.rowid, 'I', {new}); END"),
        f"audit_chain_{table}_u": (
            f"CREATE TRIGGER {_q('audit_chain_' + table + '_u')} AFTER UPDATE ON {t} BEGIN "
            f"{ins} select {lit}, OLD.rowid, 'D', {old} where OLD.rowid <> NEW.rowid; "
            f"{ins} values ({lit}, NEW.rowid, 'U', {new}); END"),
        f"audit_chain_{table}_d": (
            f"CREATE TRIGGER {_q('audit_chain_' + table + '_d')} AFTER DELETE ON {t} BEGIN "
            f"{ins} values ({lit}, OLD.rowid, 'D', {old}); END"),
    }


def create_chain_table(conn: sqlite3.Connection, from_version: int) -> None:
    """Migration: the chain table and its genesis entry (inside the caller's transaction)."""
    conn.execute(_CREATE)
    conn.execute(f"create index if not exists {CHAIN_TABLE}_row on {CHAIN_TABLE} (tbl, row_id, seq)")
    if conn.execute(f"select 1 from {CHAIN_TABLE} where op = ?", [GENESIS]).fetchone() is None:
        had_rows = any(table_exists(conn, t) and conn.execute(f"select 1 from {_q(t)} limit 1").fetchone()
                       for t in CHAINED_TABLES)
        note = ("audit chain starts here, at the migration to schema v5: rows written before it are "
                "snapshotted as they were then; their earlier history is not covered"
                if had_rows else "audit chain starts with this database")
        conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) values ('', null, ?, ?)",
                     [GENESIS, json.dumps({"note": note, "from_schema": from_version}, sort_keys=True)])


def triggers_current(conn: sqlite3.Connection) -> bool:
    """Cheap check at every open: does each chained table have triggers for its current columns?"""
    if not table_exists(conn, CHAIN_TABLE):
        return True  # before the migration created it
    have = dict(conn.execute("select name, sql from sqlite_master where type = 'trigger'").fetchall())
    for t in CHAINED_TABLES:
        if table_exists(conn, t):
            for name, sql in _trigger_sql(t, columns(conn, t)).items():
                if have.get(name) != sql:
                    return False
    return True


def _recorded_columns(conn: sqlite3.Connection, table: str) -> list[str] | None:
    row = conn.execute(f"select content from {CHAIN_TABLE} where op = ? and tbl = ? order by seq desc limit 1",
                       [COLUMNS, table]).fetchone()
    return list(json.loads(row[0])) if row and row[0] else None


def ensure_triggers(conn: sqlite3.Connection) -> None:
    """(Re)install the triggers of each chained table (inside the caller's write transaction;
    the caller seals). A table whose columns differ from those the chain last recorded for it
    (new to the chain, or a migration added a column) gets a 'C' entry with its columns and a
    snapshot ('S') of its rows; triggers that were merely dropped are put back WITHOUT a
    snapshot, so rows edited meanwhile still show as edited."""
    if not table_exists(conn, CHAIN_TABLE):
        return
    have = dict(conn.execute("select name, sql from sqlite_master where type = 'trigger'").fetchall())
    for t in CHAINED_TABLES:
        if not table_exists(conn, t):
            continue
        cols = columns(conn, t)
        want = _trigger_sql(t, cols)
        if any(have.get(n) != s for n, s in want.items()):
            for n, s in want.items():
                conn.execute(f"drop trigger if exists {_q(n)}")
                conn.execute(s)
        if _recorded_columns(conn, t) != cols:
            conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) values (?, null, ?, ?)",
                         [t, COLUMNS, json.dumps(cols)])
            conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) "
                         f"select ?, rowid, 'S', {row_json_sql(cols, '')} from {_q(t)} order by rowid", [t])


def last_seq(conn: sqlite3.Connection) -> int:
    row = conn.execute(f"select max(seq) from {CHAIN_TABLE}").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def link_hash(prev: str, seq: int, tbl: str, row_id: int | None, op: str, at: str, content_sha: str) -> str:
    return _sha("\x1f".join([prev, str(seq), tbl, "" if row_id is None else str(row_id), op, at, content_sha]))


def seal(conn: sqlite3.Connection, after_seq: int) -> None:
    """Hash the entries this transaction appended (seq > after_seq), inside it."""
    rows = conn.execute(f"select seq, tbl, row_id, op, at, content from {CHAIN_TABLE} "
                        f"where seq > ? and hash is null order by seq", [after_seq]).fetchall()
    if not rows:
        return
    prev_row = conn.execute(f"select hash from {CHAIN_TABLE} where seq <= ? and hash is not null "
                            f"order by seq desc limit 1", [after_seq]).fetchone()
    prev = prev_row[0] if prev_row else ""
    for seq, tbl, row_id, op, at, content in rows:
        csha = _sha(content or "")
        h = link_hash(prev, seq, tbl, row_id, op, at, csha)
        # The genesis note stays readable; a row's JSON is only kept as its hash (the row is live).
        keep = content if op in (GENESIS, COLUMNS) else None
        conn.execute(f"update {CHAIN_TABLE} set content = ?, content_sha256 = ?, prev_hash = ?, hash = ? "
                     f"where seq = ?", [keep, csha, prev, h, seq])
        prev = h


@dataclass
class Problem:
    seq: int | None
    table: str
    row_id: int | None
    reason: str

    def line(self) -> str:
        where = f"{self.table} row {self.row_id}" if self.table else "the chain"
        entry = f" (chain entry #{self.seq})" if self.seq is not None else ""
        return f"{where}{entry}: {self.reason}"


@dataclass
class Report:
    ok: bool
    entries: int
    rows_checked: int
    head: str | None
    head_seq: int | None
    genesis: str | None
    anchor: str | None = None
    anchor_seq: int | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def first_broken(self) -> Problem | None:
        return self.problems[0] if self.problems else None

    def to_json(self) -> dict[str, Any]:
        def one(p: Problem) -> dict[str, Any]:
            return {**asdict(p), "id": p.row_id, "message": p.line()}  # id: the row's rowid (= its id)

        d = asdict(self)
        d["intact"] = self.ok
        d["first_broken"] = one(self.problems[0]) if self.problems else None
        d["problems"] = [one(p) for p in self.problems[:50]]
        return d


def verify(conn: sqlite3.Connection, head: str | None = None) -> Report:
    """Walk the chain: every link, then every live row against its latest entry."""
    problems: list[Problem] = []
    if not table_exists(conn, CHAIN_TABLE):
        return Report(False, 0, 0, None, None, None, problems=[
            Problem(None, "", None, "there is no audit chain in this database (run any eagle command to migrate)")])
    latest: dict[tuple[str, int], tuple[int, str, str | None]] = {}
    prev, n, head_seq, genesis, anchor_seq = "", 0, None, None, None
    for seq, tbl, row_id, op, at, content, csha, prev_hash, h in conn.execute(
            f"select seq, tbl, row_id, op, at, content, content_sha256, prev_hash, hash "
            f"from {CHAIN_TABLE} order by seq"):
        n += 1
        if h is None:
            problems.append(Problem(seq, tbl, row_id, f"changed outside eaglebot ({_OPS.get(op, op)} without a "
                                                       f"hash): another program wrote this row (or a store "
                                                       f"write outside Store._tx)"))
            if tbl and op != COLUMNS:
                latest[(tbl, row_id)] = (seq, op, None)
            continue
        if op == GENESIS and content is not None and genesis is None:
            try:
                genesis = str(json.loads(content).get("note"))
            except (ValueError, AttributeError):
                genesis = None
        if prev_hash != prev:
            problems.append(Problem(seq, tbl, row_id, "broken link: the previous chain entry was removed or altered"))
        elif op in (GENESIS, COLUMNS) and _sha(content or "") != csha:
            problems.append(Problem(seq, tbl, row_id, "the chain entry was altered"))
        elif link_hash(prev_hash or "", seq, tbl, row_id, op, at, csha or "") != h:
            problems.append(Problem(seq, tbl, row_id, "the chain entry was altered"))
        prev, head_seq = h, seq
        if head is not None and h == head:
            anchor_seq = seq
        if tbl and op != COLUMNS:
            latest[(tbl, row_id)] = (seq, op, csha)
    rows = 0
    for t in CHAINED_TABLES:
        if not table_exists(conn, t):
            continue
        live: set[int] = set()
        for rid, content in conn.execute(f"select rowid, {row_json_sql(columns(conn, t), '')} from {_q(t)} "
                                         f"order by rowid"):
            rows += 1
            live.add(rid)
            entry = latest.get((t, rid))
            if entry is None:
                problems.append(Problem(None, t, rid, "the row is not in the audit chain (written without trace)"))
            elif entry[1] == "D":
                problems.append(Problem(entry[0], t, rid, "the row was deleted in the chain but is present"))
            elif entry[2] is not None and _sha(content) != entry[2]:
                problems.append(Problem(entry[0], t, rid, "the row's content differs from its last audit entry "
                                                          "(edited without trace)"))
        for (tbl, rid), (seq, op, _) in latest.items():
            if tbl == t and op != "D" and rid not in live:
                problems.append(Problem(seq, t, rid, "the row was deleted without trace"))
    if head is not None and anchor_seq is None:
        problems.append(Problem(None, "", None, f"the anchored head {head[:16]}… is not in the chain: "
                                                f"entries were rewritten or cut off"))
    problems.sort(key=lambda p: (p.seq is None, p.seq or 0))
    return Report(not problems, n, rows, prev or None, head_seq, genesis, head, anchor_seq, problems)


def verify_rows(conn: sqlite3.Connection, rows: list[tuple[str, int]]) -> list[Problem]:
    """The given live rows against their latest chain entries (`eagle show`: one run's rows,
    without walking the whole chain; `verify` also checks the links and deletions)."""
    problems: list[Problem] = []
    if not table_exists(conn, CHAIN_TABLE):
        return problems
    cols: dict[str, list[str]] = {}
    for t, rid in rows:
        if t not in cols:
            cols[t] = columns(conn, t)
        live = conn.execute(f"select {row_json_sql(cols[t], '')} from {_q(t)} where rowid = ?", [rid]).fetchone()
        entry = conn.execute(f"select seq, op, content_sha256, hash from {CHAIN_TABLE} where tbl = ? and row_id = ? "
                             f"and op <> ? order by seq desc limit 1", [t, rid, COLUMNS]).fetchone()
        if live is None:
            continue
        if entry is None:
            problems.append(Problem(None, t, rid, "the row is not in the audit chain (written without trace)"))
        elif entry[3] is None:
            problems.append(Problem(entry[0], t, rid, "changed outside eaglebot (an entry without a hash)"))
        elif entry[1] == "D":
            problems.append(Problem(entry[0], t, rid, "the row was deleted in the chain but is present"))
        elif _sha(live[0]) != entry[2]:
            problems.append(Problem(entry[0], t, rid, "the row's content differs from its last audit entry "
                                                      "(edited without trace)"))
    return problems


_OPS = {"I": "an insert", "U": "an update", "D": "a delete", "S": "a snapshot"}
