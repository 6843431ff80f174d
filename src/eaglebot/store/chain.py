"""The tamper-evident audit trail: every change to an audit row is a link in one hash chain.

Design (why triggers, a versioned column list and a seal):
- AFTER INSERT/UPDATE/DELETE triggers on each chained table append one entry to
  `audit_chain` (table, rowid, op, the row's columns as JSON), so no code path of the store
  (nor of another branch's new methods) has to remember to write the link.
- The columns a row is hashed over come from the CODE's schema (`CHAIN_SCHEMA`, per schema
  version), never from whatever columns the live table has: a migration records them in a
  chained 'M' entry (its version and every table's column list) and installs the triggers for
  them. `verify` compares each chained table's live columns and trigger SQL with the last 'M'
  entry, so a column added, a trigger dropped or edited outside a migration is itself a break.
  Rows are checked against the column list in force when their last entry was written, so a
  migration that adds a column does not re-snapshot (re-bless) old rows.
- Normal commands that find a chain trigger missing or altered put it back (new rows must be
  chained) and append a 'T' entry saying so; they never snapshot or re-seal old rows. `verify`
  reports every 'T' entry as a break, so the gap stays visible.
- The store's write transaction `seals` the entries it made before COMMIT: the row's JSON
  is replaced by its SHA-256, and the entry's hash covers that, the entry's fields and the
  previous entry's hash. Same transaction as the row, so a row never exists without its link.
  With an audit key (store/sealing.py) each entry also records its epoch and an HMAC seal
  over its hash under that epoch's key: without the key, nobody can append a sealed entry.
- With a key, the first transaction that seals a chain which has unsealed entries (a
  database that had no key before) records a sealed 'K' entry, "sealing starts here", first;
  the key file then says it has started (store/sealing.py), so no later command records one
  again. `verify` with a key accepts unsealed entries only before that entry (or none at all,
  for a chain sealed from its genesis): seals stripped off, a database written without the
  key swapped in, or an entry appended by another program are breaks, never notes.
- Entries are numbered without gaps: `verify` names a gap (entries cut out, or cut off the
  end and the chain continued). SQLite's AUTOINCREMENT counter is part of the transaction;
  PostgreSQL's identity is not (a rolled-back transaction skips numbers), so there `seal`
  renumbers the transaction's entries after a high-water mark kept in a table of its own
  (store/pg_dialect.py), which a cut does not lower.
- The triggers call no custom SQL function, so a write by another program (the sqlite3
  shell, Datasette) still succeeds, but its entry stays unsealed: `verify` names it. An edit
  made with the triggers dropped shows as a live row whose content differs from its last
  entry, a deleted row as a row with no 'D' entry, an edited or removed entry as a broken link.
  Cutting entries off the end is only visible against an anchor kept outside the DB: the
  head hash posted to Slack (`eagle audit verify --head HASH`).
- A database made before the chain existed starts it with a genesis entry that says so; the
  migration that first chains a table snapshots ('S') its rows as they were then. That is the
  only snapshot ever taken.

Checking the chain (it only reads) is store/verify.py.

To chain a new table or column: a migration creates it, adds its columns to `CHAIN_SCHEMA`
under the new schema version, and calls `record_migration(conn, version)`. Rule for store
code: write chained tables only inside `Store._tx()` (the seal runs at its COMMIT); an
autocommit write leaves an unsealed entry that `verify` reports as a change by another program.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol

from eaglebot.store.sealing import Sealer, seal_mac


class SqlConn(Protocol):
    """What the chain needs of a connection: the store's face of either backend (store/sqlite_db.py
    `SqliteDatabase`, store/pg_conn.py `PgDatabase`), which runs statements in the store's one
    spelling (`$1`, `$2`, ... placeholders, values as a sequence) and names its `dialect`."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...

# The columns each chained table is hashed over, per schema version: a version lists only
# what it adds (new tables, or new columns appended to a table), so a later migration adds one
# entry here, e.g. `8: {"steps": ("output_bytes", "output_sha256", "output_file")}`.
# `locks` is not chained: it is transient coordination (a row lives only while a run holds a
# host), and what it decides is recorded as runs and events.
CHAIN_SCHEMA: dict[int, dict[str, tuple[str, ...]]] = {
    7: {
        "runs": ("id", "playbook", "status", "actor", "origin", "pid", "hostname", "proc_start", "hosts",
                 "inputs", "vars", "started_at", "finished_at", "dry_run", "rerun_of", "schedule", "channel",
                 "thread_ts", "cancel_requested", "error", "fingerprint", "exit_code", "source"),
        "steps": ("id", "run_id", "idx", "section", "host", "name", "skill", "status", "summary", "output",
                  "params", "data", "attempts", "duration_ms", "started_at", "finished_at"),
        "metrics": ("id", "run_id", "step_id", "host", "name", "value", "unit", "better"),
        "changes": ("id", "run_id", "step_id", "host", "path", "before_sha256", "after_sha256", "diff",
                    "backup_path", "created_at"),
        "approvals": ("id", "run_id", "step_idx", "host", "step", "action", "details", "status", "decided_by",
                      "requested_at", "decided_at", "requester", "channel", "message_ts"),
        "events": ("id", "run_id", "at", "kind", "message", "actor", "text", "reason"),
        "warnings": ("id", "run_id", "step_id", "host", "message"),
        "regressions": ("id", "run_id", "host", "metric", "value", "reference", "delta_pct", "reason", "kind"),
        "baselines": ("playbook", "host", "run_id", "set_by", "set_at"),
        "incidents": ("id", "playbook", "host", "metric", "status", "opened_run", "ref_before_run", "reference",
                      "unit", "better", "opened_at", "last_run", "closed_run", "closed_at", "closed_kind",
                      "closed_by", "reason"),
        "incident_runs": ("incident_id", "run_id"),
        "sweeps": ("id", "kind", "playbook", "host", "spec", "status", "actor", "origin", "created_at",
                   "finished_at", "result"),
        "sweep_points": ("id", "sweep_id", "idx", "inputs", "status", "reason", "run_id", "result"),
        "schedule_state": ("name", "paused", "changed_by", "changed_at"),
        "schedule_fires": ("id", "schedule", "fire_time", "run_id", "status", "recorded_at"),
        "run_hosts": ("run_id", "host"),
        "remote_procs": ("id", "run_id", "step_id", "host", "tag", "pgids", "state", "note", "created_at",
                         "cleaned_at"),
        "meta": ("key", "value"),
    },
    8: {"steps": ("output_bytes", "output_sha256", "output_file")},
    9: {"incidents": ("cause_id",)},
    10: {"health_state": ("host", "gpu", "state", "since", "reason", "clean", "actor", "channel", "message_ts",
                          "silenced_until", "silenced_by"),
         "health_events": ("id", "host", "gpu", "kind", "code", "from_state", "to_state", "reason", "actor", "at")},
    13: {"metrics": ("config_class",), "runs": ("parent_run_id",)},
}


def chain_schema(version: int) -> dict[str, tuple[str, ...]]:
    """Every chained table's columns as of schema `version` (the additions up to it, in order)."""
    out: dict[str, tuple[str, ...]] = {}
    for v in sorted(CHAIN_SCHEMA):
        if v > version:
            break
        for t, cols in CHAIN_SCHEMA[v].items():
            have = out.get(t, ())
            out[t] = have + tuple(c for c in cols if c not in have)
    return out


CHAINED_TABLES: tuple[str, ...] = tuple(chain_schema(max(CHAIN_SCHEMA)))

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
COLUMNS = "C"    # a table's column list (before schema v7: taken from the live table; still read)
MIGRATION = "M"  # a schema version and the column list of every chained table
TRIGGERS = "T"   # a normal command found a table's chain triggers missing or altered, and put them back
SEALING_STARTED = "K"  # the first entry sealed with the audit key, in a chain with unsealed entries before it
KEY_ROTATED = "R"      # sealed with the old key: the entries after it are sealed with the next (`rotate-key`)
READABLE = (GENESIS, COLUMNS, MIGRATION, TRIGGERS, SEALING_STARTED, KEY_ROTATED)  # content stays in the chain


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class Dialect:
    """How the chain's SQL is written on SQLite (the triggers, the row's canonical JSON, the
    catalog); PostgreSQL's is store/pg_dialect.py. Every entry, link hash and seal is the same
    on both: only how a trigger appends it and how a row becomes JSON text differ, and on one
    backend the trigger and `verify` always build the JSON the same way."""

    create_chain = _CREATE

    def table_exists(self, conn: SqlConn, table: str) -> bool:
        return conn.execute("select 1 from sqlite_master where type = 'table' and name = $1",
                            [table]).fetchone() is not None

    def columns(self, conn: SqlConn, table: str) -> list[str]:
        return [r[1] for r in conn.execute(f"pragma table_info({quote(table)})")]

    # -- what the mixins' SQL spells differently on each backend (named, never matched as text) --
    def member_key(self, key: str) -> str:
        """The parameter naming one key of a JSON object column (`member_sql`): SQLite's JSON path."""
        return '$."' + key.replace('"', '') + '"'

    def member_sql(self, col: str, param: str) -> str:
        """SQL for the JSON text of `col`'s member named by the placeholder `param` (e.g. `$1`, bound
        to `member_key(...)`)."""
        return f"json_extract({col}, {param})"

    def member_is_object_sql(self, col: str, param: str) -> str:
        """SQL: `col` is JSON and its member named by `param` is an object."""
        return f"json_valid({col}) and json_type({col}, {param}) = 'object'"

    def backfill_run_hosts_sql(self) -> str:
        """Migration 0002: one run_hosts row per name in each run's `hosts` (a JSON list)."""
        return ("insert or ignore into run_hosts (run_id, host) select r.id, j.value from runs r, "
                "json_each(r.hosts) j where json_valid(r.hosts) and j.type = 'text'")

    def row_json_sql(self, cols: list[str] | tuple[str, ...], ref: str, present: set[str] | None = None) -> str:
        """The row as canonical JSON text, in SQL, so the trigger and `verify` build the same text.
        A column not `present` in the live table (dropped outside a migration) reads as null."""
        parts = []
        for c in cols:
            v = f"{ref}{quote(c)}"
            if present is not None and c not in present:
                v = "null"
            parts.append(f"'{c}', case when typeof({v}) = 'blob' then hex({v}) else {v} end")
        return "json_object(" + ", ".join(parts) + ")"

    def trigger_sql(self, table: str, cols: list[str] | tuple[str, ...]) -> dict[str, str]:
        t, lit = quote(table), "'" + table.replace("'", "''") + "'"
        ins = f"insert into {CHAIN_TABLE} (tbl, row_id, op, content)"
        new, old = self.row_json_sql(cols, "NEW."), self.row_json_sql(cols, "OLD.")
        return {
            f"audit_chain_{table}_i": (
                f"CREATE TRIGGER {quote('audit_chain_' + table + '_i')} AFTER INSERT ON {t} BEGIN "
                f"{ins} values ({lit}, NEW.rowid, 'I', {new}); END"),
            f"audit_chain_{table}_u": (
                f"CREATE TRIGGER {quote('audit_chain_' + table + '_u')} AFTER UPDATE ON {t} BEGIN "
                f"{ins} select {lit}, OLD.rowid, 'D', {old} where OLD.rowid <> NEW.rowid; "
                f"{ins} values ({lit}, NEW.rowid, 'U', {new}); END"),
            f"audit_chain_{table}_d": (
                f"CREATE TRIGGER {quote('audit_chain_' + table + '_d')} AFTER DELETE ON {t} BEGIN "
                f"{ins} values ({lit}, OLD.rowid, 'D', {old}); END"),
        }

    def triggers(self, conn: SqlConn) -> dict[str, str]:
        """Each installed trigger's name and what `trigger_sql` compares it with."""
        return dict(conn.execute("select name, sql from sqlite_master where type = 'trigger'").fetchall())

    def install_trigger(self, conn: SqlConn, table: str, name: str, sql: str) -> None:
        conn.execute(f"drop trigger if exists {quote(name)}")
        conn.execute(sql)

    def number(self, conn: SqlConn, after_seq: int, seqs: list[int]) -> list[int]:
        """The final numbers of a transaction's new entries (`seqs`, in order; the chain's last
        committed one is `after_seq`). SQLite's AUTOINCREMENT counter rolls back with the
        transaction and is never lowered by a delete: its numbers are already the chain's."""
        return seqs


SQLITE = Dialect()


def dialect(conn: SqlConn) -> Dialect:
    """The connection's dialect: each face names its own (anything else is taken for SQLite)."""
    d = getattr(conn, "dialect", SQLITE)
    assert isinstance(d, Dialect)
    return d


def columns(conn: SqlConn, table: str) -> list[str]:
    return dialect(conn).columns(conn, table)


def table_exists(conn: SqlConn, table: str) -> bool:
    return dialect(conn).table_exists(conn, table)


def create_chain_table(conn: SqlConn, from_version: int) -> None:
    """Migration v5: the chain table and its genesis entry (inside the caller's transaction)."""
    conn.execute(dialect(conn).create_chain)
    conn.execute(f"create index if not exists {CHAIN_TABLE}_row on {CHAIN_TABLE} (tbl, row_id, seq)")
    if conn.execute(f"select 1 from {CHAIN_TABLE} where op = $1", [GENESIS]).fetchone() is None:
        had_rows = any(table_exists(conn, t) and conn.execute(f"select 1 from {quote(t)} limit 1").fetchone()
                       for t in CHAINED_TABLES)
        note = ("audit chain starts here, at the migration to schema v5: rows written before it are "
                "snapshotted as they were then; their earlier history is not covered"
                if had_rows else "audit chain starts with this database")
        conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) values ('', null, $1, $2)",
                     [GENESIS, json.dumps({"note": note, "from_schema": from_version}, sort_keys=True)])


def add_seal_columns(conn: SqlConn) -> None:
    """Migration v7: each entry's epoch and keyed seal (store/sealing.py)."""
    have = set(columns(conn, CHAIN_TABLE))
    for col, typ in (("epoch", "integer"), ("seal", "text")):
        if col not in have:
            conn.execute(f"alter table {CHAIN_TABLE} add column {col} {typ}")


def _covered_tables(conn: SqlConn) -> set[str]:
    out = {r[0] for r in conn.execute(f"select distinct tbl from {CHAIN_TABLE} where op = $1", [COLUMNS])}
    for (content,) in conn.execute(f"select content from {CHAIN_TABLE} where op = $1", [MIGRATION]):
        out |= set(migration_tables(content))
    return out


def migration_tables(content: str | None) -> dict[str, list[str]]:
    try:
        tables = json.loads(content or "{}").get("tables") or {}
        return {str(t): [str(c) for c in cols] for t, cols in tables.items()}
    except (ValueError, AttributeError, TypeError):
        return {}


def record_migration(conn: SqlConn, version: int) -> None:
    """A migration to `version` as a chain entry of its own (inside the migration's transaction;
    the caller seals): install each chained table's triggers for its columns in `CHAIN_SCHEMA`,
    append an 'M' entry with the version and the column lists, and snapshot the rows of a table
    the chain did not cover before (its genesis; never again)."""
    schema = chain_schema(version)
    covered = _covered_tables(conn)
    d = dialect(conn)
    have = d.triggers(conn)
    for t, cols in schema.items():
        for name, sql in d.trigger_sql(t, cols).items():
            if have.get(name) == sql:     # unchanged: rewriting every trigger each migration fills the WAL
                continue
            d.install_trigger(conn, t, name, sql)
    conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) values ('', null, $1, $2)",
                 [MIGRATION, json.dumps({"version": version, "tables": {t: list(c) for t, c in schema.items()}},
                                        sort_keys=True)])
    for t, cols in schema.items():
        if t not in covered:
            conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) "
                         f"select $1, rowid, 'S', {d.row_json_sql(cols, '')} from {quote(t)} order by rowid", [t])


def _stale_triggers(conn: SqlConn, schema: dict[str, tuple[str, ...]]) -> list[str]:
    d = dialect(conn)
    have = d.triggers(conn)
    return [t for t, cols in schema.items()
            if any(have.get(n) != s for n, s in d.trigger_sql(t, cols).items())]


def triggers_current(conn: SqlConn, version: int) -> bool:
    """Cheap check at every open: does each chained table have its triggers, as the code writes them?"""
    if not table_exists(conn, CHAIN_TABLE):
        return True  # before the migration created it
    return not _stale_triggers(conn, chain_schema(version))


def reinstall_triggers(conn: SqlConn, version: int) -> list[str]:
    """Put back chain triggers found missing or altered (inside the caller's write transaction;
    the caller seals), so NEW rows are chained again, and say so in a 'T' entry per table that
    `verify` reports as a break. No row is snapshotted: rows edited meanwhile still show as
    edited. A table that lacks one of its columns is left alone (its triggers could not run)."""
    schema = chain_schema(version)
    fixed = []
    for t in _stale_triggers(conn, schema):
        if not table_exists(conn, t) or not set(schema[t]) <= set(columns(conn, t)):
            continue
        d = dialect(conn)
        for name, sql in d.trigger_sql(t, schema[t]).items():
            d.install_trigger(conn, t, name, sql)
        conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) values ($1, null, $2, $3)",
                     [t, TRIGGERS, json.dumps({"note": f"chain triggers of {t} were missing or altered; "
                                                       f"reinstalled for new rows"})])
        fixed.append(t)
    return fixed


def sealing_state(conn: SqlConn, upto: int) -> str:
    """Of the entries up to #`upto` (those committed before this transaction): "sealed", some
    carries a seal (the chain is sealed, or was); "unsealed", none does; "empty", none yet."""
    last = conn.execute(f"select seal from {CHAIN_TABLE} where seq <= $1 order by seq desc limit 1",
                        [upto]).fetchone()
    if last is None:
        return "empty"
    if last[0] is not None or conn.execute(f"select 1 from {CHAIN_TABLE} where seq <= $1 and seal is not null "
                                           f"limit 1", [upto]).fetchone():
        return "sealed"
    return "unsealed"


def start_sealing(conn: SqlConn, epoch: int, upto: int) -> None:
    """The 'K' entry: sealing starts here (sealed with this transaction's entries; the
    unsealed ones before it were written before the key)."""
    n = conn.execute(f"select count(*) from {CHAIN_TABLE} where seq <= $1", [upto]).fetchone()[0]
    conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) values ('', null, $1, $2)",
                 [SEALING_STARTED, json.dumps({"note": f"sealing with the audit key starts here: the "
                                                       f"{n} unsealed entries before it were written without it", "epoch": epoch},
                                              sort_keys=True)])


def record_rotation(conn: SqlConn, next_epoch: int, next_id: str) -> None:
    """The 'R' entry: the key that seals it hands the chain over to the key named `next_id`
    (sealing.key_id), whose first epoch is `next_epoch`."""
    conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) values ('', null, $1, $2)",
                 [KEY_ROTATED, json.dumps({"note": "the audit key changes here: the entries after this one are "
                                                   "sealed with the next key", "next_epoch": next_epoch,
                                           "next_key": next_id}, sort_keys=True)])


def rotation(content: str | None) -> tuple[int, str] | None:
    """(next_epoch, next_key) of an 'R' entry's content, or None when it is not one."""
    try:
        d = json.loads(content or "")
        return int(d["next_epoch"]), str(d["next_key"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def last_seq(conn: SqlConn) -> int:
    row = conn.execute(f"select max(seq) from {CHAIN_TABLE}").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def sha_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def link_hash(prev: str, seq: int, tbl: str, row_id: int | None, op: str, at: str, content_sha: str) -> str:
    return sha_text("\x1f".join([prev, str(seq), tbl, "" if row_id is None else str(row_id), op, at, content_sha]))


def has_seal_columns(conn: SqlConn) -> bool:
    return "seal" in columns(conn, CHAIN_TABLE)


def seal(conn: SqlConn, after_seq: int, sealer: Sealer | None = None) -> None:
    """Hash the entries this transaction appended (seq > after_seq), inside it; with a sealer,
    also record the epoch and the HMAC seal of each."""
    rows = conn.execute(f"select seq, tbl, row_id, op, at, content from {CHAIN_TABLE} "
                        f"where seq > $1 and hash is null order by seq", [after_seq]).fetchall()
    if not rows:
        return
    numbers = dialect(conn).number(conn, after_seq, [r[0] for r in rows])
    rows = [(n, *r[1:]) for n, r in zip(numbers, rows)]
    prev_row = conn.execute(f"select hash{', epoch' if sealer is not None else ', null'} from {CHAIN_TABLE} "
                            f"where seq <= $1 and hash is not null order by seq desc limit 1", [after_seq]).fetchone()
    prev = prev_row[0] if prev_row else ""
    # Epochs never go backwards along the chain: the last entry's epoch is the least we may use.
    key = sealer.key_for(int(prev_row[1]) if prev_row and prev_row[1] is not None else 0) if sealer else None
    for seq, tbl, row_id, op, at, content in rows:
        csha = sha_text(content or "")
        h = link_hash(prev, seq, tbl, row_id, op, at, csha)
        # Readable entries keep their content; a row's JSON is only kept as its hash (the row is live).
        keep = content if op in READABLE else None
        if key is not None:
            conn.execute(f"update {CHAIN_TABLE} set content = $1, content_sha256 = $2, prev_hash = $3, hash = $4, "
                         f"epoch = $5, seal = $6 where seq = $7",
                         [keep, csha, prev, h, key.epoch, seal_mac(key.key, key.epoch, h), seq])
        else:
            conn.execute(f"update {CHAIN_TABLE} set content = $1, content_sha256 = $2, prev_hash = $3, hash = $4 "
                         f"where seq = $5", [keep, csha, prev, h, seq])
        prev = h
