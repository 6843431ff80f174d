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
- The triggers call no custom SQL function, so a write by another program (the sqlite3
  shell, Datasette) still succeeds, but its entry stays unsealed: `verify` names it. An edit
  made with the triggers dropped shows as a live row whose content differs from its last
  entry, a deleted row as a row with no 'D' entry, an edited or removed entry as a broken link.
  Cutting entries off the end is only visible against an anchor kept outside the DB: the
  head hash posted to Slack (`eagle audit verify --head HASH`).
- A database made before the chain existed starts it with a genesis entry that says so; the
  migration that first chains a table snapshots ('S') its rows as they were then. That is the
  only snapshot ever taken.

To chain a new table or column: a migration creates it, adds its columns to `CHAIN_SCHEMA`
under the new schema version, and calls `record_migration(conn, version)`. Rule for store
code: write chained tables only inside `Store._tx()` (the seal runs at its COMMIT); an
autocommit write leaves an unsealed entry that `verify` reports as a change by another program.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import sqlite3
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from eaglebot.store.sealing import Sealer, Verifier, seal_mac

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
_READABLE = (GENESIS, COLUMNS, MIGRATION, TRIGGERS)  # entries whose content stays in the chain


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"pragma table_info({_q(table)})")]


def table_exists(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute("select 1 from sqlite_master where type = 'table' and name = ?", [table]).fetchone() is not None


def row_json_sql(cols: list[str] | tuple[str, ...], ref: str, present: set[str] | None = None) -> str:
    """The row as canonical JSON text, in SQL, so the trigger and `verify` build the same text.
    A column not `present` in the live table (dropped outside a migration) reads as null."""
    parts = []
    for c in cols:
        v = f"{ref}{_q(c)}"
        if present is not None and c not in present:
            v = "null"
        parts.append(f"'{c}', case when typeof({v}) = 'blob' then hex({v}) else {v} end")
    return "json_object(" + ", ".join(parts) + ")"


def _trigger_sql(table: str, cols: list[str] | tuple[str, ...]) -> dict[str, str]:
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
    """Migration v5: the chain table and its genesis entry (inside the caller's transaction)."""
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


def add_seal_columns(conn: sqlite3.Connection) -> None:
    """Migration v7: each entry's epoch and keyed seal (store/sealing.py)."""
    have = set(columns(conn, CHAIN_TABLE))
    for col, typ in (("epoch", "integer"), ("seal", "text")):
        if col not in have:
            conn.execute(f"alter table {CHAIN_TABLE} add column {col} {typ}")


def _covered_tables(conn: sqlite3.Connection) -> set[str]:
    out = {r[0] for r in conn.execute(f"select distinct tbl from {CHAIN_TABLE} where op = ?", [COLUMNS])}
    for (content,) in conn.execute(f"select content from {CHAIN_TABLE} where op = ?", [MIGRATION]):
        out |= set(_migration_tables(content))
    return out


def _migration_tables(content: str | None) -> dict[str, list[str]]:
    try:
        tables = json.loads(content or "{}").get("tables") or {}
        return {str(t): [str(c) for c in cols] for t, cols in tables.items()}
    except (ValueError, AttributeError, TypeError):
        return {}


def record_migration(conn: sqlite3.Connection, version: int) -> None:
    """A migration to `version` as a chain entry of its own (inside the migration's transaction;
    the caller seals): install each chained table's triggers for its columns in `CHAIN_SCHEMA`,
    append an 'M' entry with the version and the column lists, and snapshot the rows of a table
    the chain did not cover before (its genesis; never again)."""
    schema = chain_schema(version)
    covered = _covered_tables(conn)
    for t, cols in schema.items():
        for name, sql in _trigger_sql(t, cols).items():
            conn.execute(f"drop trigger if exists {_q(name)}")
            conn.execute(sql)
    conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) values ('', null, ?, ?)",
                 [MIGRATION, json.dumps({"version": version, "tables": {t: list(c) for t, c in schema.items()}},
                                        sort_keys=True)])
    for t, cols in schema.items():
        if t not in covered:
            conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) "
                         f"select ?, rowid, 'S', {row_json_sql(cols, '')} from {_q(t)} order by rowid", [t])


def _stale_triggers(conn: sqlite3.Connection, schema: dict[str, tuple[str, ...]]) -> list[str]:
    have = dict(conn.execute("select name, sql from sqlite_master where type = 'trigger'").fetchall())
    return [t for t, cols in schema.items()
            if any(have.get(n) != s for n, s in _trigger_sql(t, cols).items())]


def triggers_current(conn: sqlite3.Connection, version: int) -> bool:
    """Cheap check at every open: does each chained table have its triggers, as the code writes them?"""
    if not table_exists(conn, CHAIN_TABLE):
        return True  # before the migration created it
    return not _stale_triggers(conn, chain_schema(version))


def reinstall_triggers(conn: sqlite3.Connection, version: int) -> list[str]:
    """Put back chain triggers found missing or altered (inside the caller's write transaction;
    the caller seals), so NEW rows are chained again, and say so in a 'T' entry per table that
    `verify` reports as a break. No row is snapshotted: rows edited meanwhile still show as
    edited. A table that lacks one of its columns is left alone (its triggers could not run)."""
    schema = chain_schema(version)
    fixed = []
    for t in _stale_triggers(conn, schema):
        if not table_exists(conn, t) or not set(schema[t]) <= set(columns(conn, t)):
            continue
        for name, sql in _trigger_sql(t, schema[t]).items():
            conn.execute(f"drop trigger if exists {_q(name)}")
            conn.execute(sql)
        conn.execute(f"insert into {CHAIN_TABLE} (tbl, row_id, op, content) values (?, null, ?, ?)",
                     [t, TRIGGERS, json.dumps({"note": f"chain triggers of {t} were missing or altered; "
                                                       f"reinstalled for new rows"})])
        fixed.append(t)
    return fixed


def last_seq(conn: sqlite3.Connection) -> int:
    row = conn.execute(f"select max(seq) from {CHAIN_TABLE}").fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def link_hash(prev: str, seq: int, tbl: str, row_id: int | None, op: str, at: str, content_sha: str) -> str:
    return _sha("\x1f".join([prev, str(seq), tbl, "" if row_id is None else str(row_id), op, at, content_sha]))


def has_seal_columns(conn: sqlite3.Connection) -> bool:
    return "seal" in columns(conn, CHAIN_TABLE)


def seal(conn: sqlite3.Connection, after_seq: int, sealer: Sealer | None = None) -> None:
    """Hash the entries this transaction appended (seq > after_seq), inside it; with a sealer,
    also record the epoch and the HMAC seal of each."""
    rows = conn.execute(f"select seq, tbl, row_id, op, at, content from {CHAIN_TABLE} "
                        f"where seq > ? and hash is null order by seq", [after_seq]).fetchall()
    if not rows:
        return
    prev_row = conn.execute(f"select hash{', epoch' if sealer is not None else ', null'} from {CHAIN_TABLE} "
                            f"where seq <= ? and hash is not null order by seq desc limit 1", [after_seq]).fetchone()
    prev = prev_row[0] if prev_row else ""
    # Epochs never go backwards along the chain: the last entry's epoch is the least we may use.
    key = sealer.key_for(int(prev_row[1]) if prev_row and prev_row[1] is not None else 0) if sealer else None
    for seq, tbl, row_id, op, at, content in rows:
        csha = _sha(content or "")
        h = link_hash(prev, seq, tbl, row_id, op, at, csha)
        # Readable entries keep their content; a row's JSON is only kept as its hash (the row is live).
        keep = content if op in _READABLE else None
        if key is not None:
            conn.execute(f"update {CHAIN_TABLE} set content = ?, content_sha256 = ?, prev_hash = ?, hash = ?, "
                         f"epoch = ?, seal = ? where seq = ?",
                         [keep, csha, prev, h, key.epoch, seal_mac(key.key, key.epoch, h), seq])
        else:
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
        return f"{where(self.table, self.row_id)}{_entry(self.seq)}: {self.reason}"


def where(table: str, row_id: int | None) -> str:
    if not table:
        return "the chain"
    return f"{table} row {row_id}" if row_id is not None else f"table `{table}`"


def _entry(seq: int | None) -> str:
    return f" (chain entry #{seq})" if seq is not None else ""


@dataclass
class Seals:
    """What `verify` found of the keyed seals."""
    key: str | None = None          # "verification", "sealing", or None (no key given)
    key_epoch: int | None = None
    sealed: int = 0                 # entries with a seal
    unsealed_before_key: int = 0    # entries before the first sealed one (made before a key was configured)
    checked: int = 0                # seals verified with the key
    unchecked: int = 0              # seals of epochs the key given cannot check (a sealing key's past)
    first_sealed_seq: int | None = None
    last_epoch: int | None = None
    notes: list[str] = field(default_factory=list)


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
    schema_version: int | None = None
    seals: Seals = field(default_factory=Seals)

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


Eras = dict[str, list[tuple[int, list[str]]]]  # table -> [(seq of the C/M entry, columns in force from it)]


def _eras(conn: sqlite3.Connection) -> Eras:
    out: Eras = {}
    for seq, tbl, op, content in conn.execute(
            f"select seq, tbl, op, content from {CHAIN_TABLE} where op in (?, ?) order by seq", [COLUMNS, MIGRATION]):
        if op == COLUMNS:
            try:
                out.setdefault(tbl, []).append((seq, [str(c) for c in json.loads(content or "[]")]))
            except (ValueError, TypeError):
                continue
        else:
            for t, cols in _migration_tables(content).items():
                out.setdefault(t, []).append((seq, cols))
    return out


def _era_index(eras: list[tuple[int, list[str]]], seq: int) -> int:
    return max(0, bisect.bisect_right([s for s, _ in eras], seq) - 1)


def _schema_problems(conn: sqlite3.Connection, last_m: tuple[int, dict[str, list[str]]] | None) -> list[Problem]:
    """Each chained table's live columns and chain triggers against the last migration entry."""
    if last_m is None:
        return []
    _, tables = last_m
    triggers = dict(conn.execute("select name, sql from sqlite_master where type = 'trigger'").fetchall())
    out: list[tuple[bool, int, Problem]] = []
    rank = {t: i for i, t in enumerate(CHAINED_TABLES)}
    for t, cols in tables.items():
        if not table_exists(conn, t):
            out.append((False, rank.get(t, len(rank)), Problem(
                None, t, None, f"schema of `{t}` changed outside a migration: the table was dropped")))
            continue
        what = []
        live = columns(conn, t)
        added = [c for c in live if c not in cols]
        dropped = [c for c in cols if c not in live]
        if added:
            what.append("column(s) added: " + ", ".join(added))
        if dropped:
            what.append("column(s) dropped: " + ", ".join(dropped))
        if not added and not dropped and live != cols:
            what.append("columns reordered")
        for name, sql in _trigger_sql(t, cols).items():
            if name not in triggers:
                what.append(f"trigger {name} missing")
            elif triggers[name] != sql:
                what.append(f"trigger {name} altered")
        if what:
            # A changed column list first: it says more than a missing trigger.
            out.append((not (added or dropped), rank.get(t, len(rank)), Problem(
                None, t, None, f"schema of `{t}` changed outside a migration ({'; '.join(what)})")))
    return [p for *_, p in sorted(out, key=lambda x: (x[0], x[1]))]


def verify(conn: sqlite3.Connection, head: str | None = None, verifier: Verifier | None = None,
           key_kind: str | None = None) -> Report:
    """Walk the chain: every link and seal, each chained table's schema, then every live row
    against its latest entry. Only reads."""
    problems: list[Problem] = []
    if not table_exists(conn, CHAIN_TABLE):
        return Report(False, 0, 0, None, None, None, problems=[
            Problem(None, "", None, "there is no audit chain in this database (run any eagle command to migrate)")])
    seals = Seals(key=key_kind, key_epoch=verifier.base.epoch if verifier else None)
    sealed_cols = has_seal_columns(conn)
    latest: dict[tuple[str, int], tuple[int, str, str | None]] = {}
    prev, n, head_seq, genesis, anchor_seq = "", 0, None, None, None
    last_m: tuple[int, dict[str, list[str]]] | None = None
    schema_version = None
    extra = ", epoch, seal" if sealed_cols else ", null, null"
    for seq, tbl, row_id, op, at, content, csha, prev_hash, h, epoch, sl in conn.execute(
            f"select seq, tbl, row_id, op, at, content, content_sha256, prev_hash, hash{extra} "
            f"from {CHAIN_TABLE} order by seq"):
        n += 1
        if h is None:
            problems.append(Problem(seq, tbl, row_id, f"changed outside eaglebot ({_OPS.get(op, op)} without a "
                                                       f"hash): another program wrote this row (or a store "
                                                       f"write outside Store._tx)"))
            if tbl and op not in _READABLE:
                latest[(tbl, row_id)] = (seq, op, None)
            continue
        if op == GENESIS and content is not None and genesis is None:
            try:
                genesis = str(json.loads(content).get("note"))
            except (ValueError, AttributeError):
                genesis = None
        if prev_hash != prev:
            problems.append(Problem(seq, tbl, row_id, "broken link: the previous chain entry was removed or altered"))
        elif op in _READABLE and _sha(content or "") != csha:
            problems.append(Problem(seq, tbl, row_id, "the chain entry was altered"))
        elif link_hash(prev_hash or "", seq, tbl, row_id, op, at, csha or "") != h:
            problems.append(Problem(seq, tbl, row_id, "the chain entry was altered"))
        _check_seal(seals, problems, verifier, seq, tbl, row_id, h, epoch, sl, at)
        prev, head_seq = h, seq
        if head is not None and h == head:
            anchor_seq = seq
        if op == MIGRATION:
            tables = _migration_tables(content)
            try:
                schema_version = int(json.loads(content or "{}").get("version"))
            except (ValueError, TypeError, AttributeError):
                schema_version = None
            if schema_version in CHAIN_SCHEMA and tables != {t: list(c) for t, c in
                                                             chain_schema(schema_version).items()}:
                problems.append(Problem(seq, "", None, f"the migration entry's column lists differ from "
                                                       f"eaglebot's schema v{schema_version}"))
            last_m = (seq, tables)
        elif op == TRIGGERS:
            problems.append(Problem(seq, tbl, None, f"the chain triggers of `{tbl}` were dropped or altered "
                                                    f"outside a migration (found and put back here): rows "
                                                    f"written meanwhile may be missing from the chain"))
        if tbl and op not in _READABLE:
            latest[(tbl, row_id)] = (seq, op, csha)
    schema = _schema_problems(conn, last_m)
    rows = _check_rows(conn, latest, _eras(conn), problems)
    if head is not None and anchor_seq is None:
        problems.append(Problem(None, "", None, f"the anchored head {head[:16]}… is not in the chain: "
                                                f"entries were rewritten or cut off"))
    if seals.sealed and verifier is None:
        seals.notes.append("seals not checked: no key given (`--key FILE`, or `audit_key_file` in eagle.yaml)")
    if seals.unchecked:
        seals.notes.append(f"{seals.unchecked} seal(s) from epochs before {seals.key_epoch} not checked: a sealing "
                           f"key holds only its own epoch on; the verification key checks them all")
    if seals.unsealed_before_key and seals.sealed:
        seals.notes.append(f"{seals.unsealed_before_key} entries before entry #{seals.first_sealed_seq} are "
                           f"unsealed (made before an audit key was configured)")
    elif verifier is not None and not seals.sealed:
        seals.notes.append("no entry is sealed: this database was never written with an audit key")
    problems.sort(key=lambda p: (p.seq is None, p.seq or 0))
    problems = schema + problems
    return Report(not problems, n, rows, prev or None, head_seq, genesis, head, anchor_seq, problems,
                  schema_version, seals)


def _epoch_of(at: str, epoch_s: int, slack_s: float = 0) -> int | None:
    try:
        t = datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None
    return int((t + slack_s) // epoch_s)


def _check_seal(seals: Seals, problems: list[Problem], verifier: Verifier | None, seq: int, tbl: str,
                row_id: int | None, h: str, epoch: int | None, sl: str | None, at: str) -> None:
    if sl is None:
        if seals.sealed:
            problems.append(Problem(seq, tbl, row_id, "unsealed entry after sealed ones: written without the "
                                                      "audit key, or forged"))
        else:
            seals.unsealed_before_key += 1
        return
    if seals.first_sealed_seq is None:
        seals.first_sealed_seq = seq
    seals.sealed += 1
    if epoch is None:
        problems.append(Problem(seq, tbl, row_id, "the seal has no epoch: forged"))
        return
    if seals.last_epoch is not None and epoch < seals.last_epoch:
        problems.append(Problem(seq, tbl, row_id, f"the epoch goes backwards ({seals.last_epoch} -> {epoch}): "
                                                  f"sealed out of order, or forged"))
    seals.last_epoch = max(epoch, seals.last_epoch or epoch)
    if verifier is None:
        return
    if not verifier.can_check(epoch):
        if seals.key == "verification":
            problems.append(Problem(seq, tbl, row_id, f"sealed for epoch {epoch}, before the key's first epoch "
                                                      f"{verifier.base.epoch}: forged, or another key"))
        else:
            seals.unchecked += 1
        return
    seals.checked += 1
    if not verifier.check(epoch, h, sl):
        problems.append(Problem(seq, tbl, row_id, f"the seal does not match the key of epoch {epoch}: forged, "
                                                  f"or sealed under another key"))
        return
    # An entry is sealed in the transaction that wrote it: its epoch is the one of its time
    # (or the next, for a transaction that ran across the boundary). Whoever stole a later
    # key can only seal entries that say they were written then: rewriting an earlier day
    # means moving its entries to today, which this catches.
    e_s = verifier.base.epoch_s
    lo, hi = _epoch_of(at, e_s), _epoch_of(at, e_s, max(1, e_s // 24))
    if lo is None or hi is None or not lo <= epoch <= hi:
        problems.append(Problem(seq, tbl, row_id, f"sealed for epoch {epoch} but written at {at} (epoch {lo}): "
                                                  f"rewritten with a later key, or forged"))


def _check_rows(conn: sqlite3.Connection, latest: dict[tuple[str, int], tuple[int, str, str | None]],
                eras: Eras, problems: list[Problem]) -> int:
    """Each live row of each chained table against its latest entry, hashed over the columns in
    force when that entry was written (columns added since must still be null)."""
    rows = 0
    for t in sorted(set(CHAINED_TABLES) | set(eras), key=lambda x: (x not in CHAINED_TABLES, x)):
        if not table_exists(conn, t) or t not in eras:
            continue
        present = set(columns(conn, t))
        t_eras = eras[t]
        newest = t_eras[-1][1]
        live: set[int] = set()
        for ei, (_, cols) in enumerate(t_eras):
            added = [c for c in newest if c not in cols and c in present]
            unset = " and ".join(f"{_q(c)} is null" for c in added) or "1"
            for rid, content, untouched in conn.execute(
                    f"select rowid, {row_json_sql(cols, '', present)}, {unset} from {_q(t)} order by rowid"):
                if ei == 0:
                    rows += 1
                    live.add(rid)
                entry = latest.get((t, rid))
                if entry is None:
                    if ei == 0:
                        problems.append(Problem(None, t, rid, "the row is not in the audit chain (written without trace)"))
                    continue
                if _era_index(t_eras, entry[0]) != ei:
                    continue
                if entry[1] == "D":
                    problems.append(Problem(entry[0], t, rid, "the row was deleted in the chain but is present"))
                elif entry[2] is not None and (_sha(content) != entry[2] or not untouched):
                    problems.append(Problem(entry[0], t, rid, "the row's content differs from its last audit entry "
                                                              "(edited without trace)"))
        for (tbl, rid), (seq, op, _) in latest.items():
            if tbl == t and op != "D" and rid not in live:
                problems.append(Problem(seq, t, rid, "the row was deleted without trace"))
    return rows


def verify_rows(conn: sqlite3.Connection, rows: list[tuple[str, int]]) -> list[Problem]:
    """The given live rows against their latest chain entries (`eagle show`: one run's rows,
    without walking the whole chain; `verify` also checks the links, seals and deletions)."""
    problems: list[Problem] = []
    if not table_exists(conn, CHAIN_TABLE):
        return problems
    eras = _eras(conn)
    present: dict[str, set[str]] = {}
    for t, rid in rows:
        if t not in eras:
            continue
        if t not in present:
            present[t] = set(columns(conn, t))
        entry = conn.execute(f"select seq, op, content_sha256, hash from {CHAIN_TABLE} where tbl = ? and row_id = ? "
                             f"and op not in ('C', 'T') order by seq desc limit 1", [t, rid]).fetchone()
        cols = eras[t][_era_index(eras[t], entry[0] if entry else 1 << 62)][1]
        live = conn.execute(f"select {row_json_sql(cols, '', present[t])} from {_q(t)} where rowid = ?",
                            [rid]).fetchone()
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
