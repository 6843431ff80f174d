"""Checking the audit chain (`eagle audit verify`, doctor, `eagle show`): only reads.

The writing side, and what the chain is, is store/chain.py. Verify walks every entry (its
number, link hash and, with a key, its seal), compares each chained table's live columns and
triggers with the last migration entry, and every live row with its last entry.

With a key (`--key`, or `audit_key_file`) a seal is never optional: the seal columns must be
there, every entry after the one where sealing started (a sealed 'K' entry, or a genesis
sealed from the start) must be sealed, and unsealed entries with no sealed start after them
are a break; so is an epoch that has not begun yet (checked before any key is derived: the
walk costs at most `sealing.MAX_EPOCHS` derivations, whatever the database says).
"""
from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from eaglebot.store.chain import (CHAIN_SCHEMA, CHAIN_TABLE, CHAINED_TABLES, COLUMNS, GENESIS, KEY_ROTATED, MIGRATION,
                                  READABLE, SEALING_STARTED, TRIGGERS, SqlConn, chain_schema, columns, dialect,
                                  has_seal_columns, link_hash, migration_tables, quote, rotation, sha_text,
                                  table_exists)
from eaglebot.store.sealing import SEALING, VERIFICATION, AuditKey, Verifier, epoch_now, key_id


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
    unkeyed: int = 0                # seals of a key era (after a rotation, or before) no key given holds
    rotations: list[int] = field(default_factory=list)   # the 'R' entries: where the key changed
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
    # Every seal the chain holds was checked (or it holds none). False: intact as far as it
    # was checked, but seals were left unchecked (no key, or a sealing key past whose epochs
    # cannot be derived): a rewrite of those entries would not show; `verify` exits 4.
    complete: bool = True

    def to_json(self) -> dict[str, Any]:
        def one(p: Problem) -> dict[str, Any]:
            return {**asdict(p), "id": p.row_id, "message": p.line()}  # id: the row's rowid (= its id)

        d = asdict(self)
        d["intact"] = self.ok
        d["first_broken"] = one(self.problems[0]) if self.problems else None
        d["problems"] = [one(p) for p in self.problems[:50]]
        return d


@dataclass
class _Walk:
    """What the walk of a keyed chain has seen of its seals so far."""
    keyed: bool
    today: int | None                # the key's current epoch (keyed only)
    start: int | None = None         # the entry where sealing started
    unsealed: list[tuple[int, str, int | None]] = field(default_factory=list)  # unsealed, before any start


@dataclass
class _Era:
    """The key that checks one era of the chain (before its first 'R' entry, or after one)."""
    verifier: Verifier | None
    kind: str | None


def _key_eras(conn: SqlConn, keys: list[AuditKey]) -> tuple[_Era, dict[int, _Era]]:
    """Which key checks which era: an era after an 'R' entry is the key it names (by
    `sealing.key_id`: a verification key, or a sealing file not evolved yet); the newest era,
    if no key given is named, the sealing key given (evolved: its id is gone); the first era,
    the verification key no 'R' names (or, with no rotation, the key given)."""
    def era(k: AuditKey | None) -> _Era:
        return _Era(Verifier(k), k.kind) if k is not None else _Era(None, None)

    named: dict[int, str] = {}
    if keys:
        for seq, content in conn.execute(f"select seq, content from {CHAIN_TABLE} where op = $1 order by seq",
                                         [KEY_ROTATED]):
            if (r := rotation(content)) is not None:
                named[seq] = r[1]
    if not named:
        return era(keys[0] if keys else None), {}
    by_id = {key_id(k): k for k in keys}
    rest = [k for k in keys if key_id(k) not in named.values()]
    newest = max(named)
    sealing = next((k for k in rest if k.kind == SEALING), None)
    eras = {seq: era(by_id.get(nid) or (sealing if seq == newest else None)) for seq, nid in named.items()}
    return era(next((k for k in rest if k.kind == VERIFICATION), None)), eras


def _gap(prev: int, seq: int) -> str:
    missing = f"entry #{prev + 1} is" if seq == prev + 2 else f"entries #{prev + 1} to #{seq - 1} are"
    return f"{missing} missing from the chain (a gap in its numbering): cut out, or cut off its end before it went on"


Eras = dict[str, list[tuple[int, list[str]]]]  # table -> [(seq of the C/M entry, columns in force from it)]


def _eras(conn: SqlConn) -> Eras:
    out: Eras = {}
    for seq, tbl, op, content in conn.execute(
            f"select seq, tbl, op, content from {CHAIN_TABLE} where op in ($1, $2) order by seq", [COLUMNS, MIGRATION]):
        if op == COLUMNS:
            try:
                out.setdefault(tbl, []).append((seq, [str(c) for c in json.loads(content or "[]")]))
            except (ValueError, TypeError):
                continue
        else:
            for t, cols in migration_tables(content).items():
                out.setdefault(t, []).append((seq, cols))
    return out


def _era_index(eras: list[tuple[int, list[str]]], seq: int) -> int:
    return max(0, bisect.bisect_right([s for s, _ in eras], seq) - 1)


def _schema_problems(conn: SqlConn, last_m: tuple[int, dict[str, list[str]]] | None) -> list[Problem]:
    """Each chained table's live columns and chain triggers against the last migration entry."""
    if last_m is None:
        return []
    _, tables = last_m
    d = dialect(conn)
    triggers = d.triggers(conn)
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
        for name, sql in d.trigger_sql(t, cols).items():
            if name not in triggers:
                what.append(f"trigger {name} missing")
            elif triggers[name] != sql:
                what.append(f"trigger {name} altered")
        if what:
            # A changed column list first: it says more than a missing trigger.
            out.append((not (added or dropped), rank.get(t, len(rank)), Problem(
                None, t, None, f"schema of `{t}` changed outside a migration ({'; '.join(what)})")))
    return [p for *_, p in sorted(out, key=lambda x: (x[0], x[1]))]


def verify(conn: SqlConn, head: str | None = None, keys: list[AuditKey] | None = None,
           now: float | None = None) -> Report:
    """Walk the chain: every number, link and seal (each era's with its key: `keys`, one per
    rotation of the key, see `_key_eras`), each chained table's schema, then every live row
    against its latest entry. Only reads."""
    problems: list[Problem] = []
    keys = keys or []
    if not table_exists(conn, CHAIN_TABLE):
        return Report(False, 0, 0, None, None, None, problems=[
            Problem(None, "", None, "there is no audit chain in this database (run any eagle command to migrate)")])
    seals = Seals(key=keys[0].kind if keys else None, key_epoch=keys[0].epoch if keys else None)
    sealed_cols = has_seal_columns(conn)
    era, eras = _key_eras(conn, keys) if sealed_cols else (_Era(None, None), {})
    walk = _Walk(bool(keys), epoch_now(keys[0].epoch_s, now) if keys else None)
    unsealable = [Problem(None, "", None, "the chain has no seal columns (epoch, seal): they were dropped, "
                                          "or this database was never written with the audit key")] \
        if keys and not sealed_cols else []
    latest: dict[tuple[str, int], tuple[int, str, str | None]] = {}
    prev, n, head_seq, genesis, anchor_seq, prev_seq = "", 0, None, None, None, 0
    last_m: tuple[int, dict[str, list[str]]] | None = None
    schema_version = None
    extra = ", epoch, seal" if sealed_cols else ", null, null"
    for seq, tbl, row_id, op, at, content, csha, prev_hash, h, epoch, sl in conn.execute(
            f"select seq, tbl, row_id, op, at, content, content_sha256, prev_hash, hash{extra} "
            f"from {CHAIN_TABLE} order by seq"):
        n += 1
        gap = seq != prev_seq + 1
        if gap and (h is None or prev_hash == prev):   # (a broken link names the removed entry better)
            problems.append(Problem(seq, tbl, row_id, _gap(prev_seq, seq)))
        prev_seq = seq
        if h is None:
            problems.append(Problem(seq, tbl, row_id, f"changed outside eaglebot ({_OPS.get(op, op)} without a "
                                                       f"hash): another program wrote this row (or a store "
                                                       f"write outside Store._tx)"))
            if tbl and op not in READABLE:
                latest[(tbl, row_id)] = (seq, op, None)
            continue
        if op == GENESIS and content is not None and genesis is None:
            try:
                genesis = str(json.loads(content).get("note"))
            except (ValueError, AttributeError):
                genesis = None
        if prev_hash != prev:
            problems.append(Problem(seq, tbl, row_id, "broken link: the previous chain entry was removed or altered"))
        elif op in READABLE and sha_text(content or "") != csha:
            problems.append(Problem(seq, tbl, row_id, "the chain entry was altered"))
        elif link_hash(prev_hash or "", seq, tbl, row_id, op, at, csha or "") != h:
            problems.append(Problem(seq, tbl, row_id, "the chain entry was altered"))
        _check_seal(seals, walk, problems, era, seq, tbl, row_id, op, h, epoch, sl, at, n == 1)
        if op == KEY_ROTATED and seq in eras:   # its own seal is the old key's; the next entries, the new one's
            era = eras[seq]
            seals.rotations.append(seq)
        prev, head_seq = h, seq
        if head is not None and h == head:
            anchor_seq = seq
        if op == MIGRATION:
            tables = migration_tables(content)
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
        if tbl and op not in READABLE:
            latest[(tbl, row_id)] = (seq, op, csha)
    schema = _schema_problems(conn, last_m)
    rows = _check_rows(conn, latest, _eras(conn), problems)
    if head is not None and anchor_seq is None:
        problems.append(Problem(None, "", None, f"the anchored head {head[:16]}… is not in the chain: "
                                                f"entries were rewritten or cut off"))
    if seals.sealed and not keys:
        seals.notes.append("seals not checked: no key given (`--key FILE`, or `audit_key_file` in eagle.yaml)")
    if seals.unchecked:
        seals.notes.append(f"{seals.unchecked} seal(s) from epochs before {seals.key_epoch} not checked: a sealing "
                           f"key holds only its own epoch on; the verification key checks them all")
    if seals.unkeyed:
        at = ", ".join(f"#{s}" for s in seals.rotations) or "-"
        seals.notes.append(f"{seals.unkeyed} seal(s) of a key era no key given holds not checked (the key was "
                           f"rotated at entry {at}): give each era's verification key, `--key` once per key")
    if walk.keyed and walk.start is None and walk.unsealed:
        seq, tbl, row_id = walk.unsealed[0]
        problems.append(Problem(seq, tbl, row_id, f"unsealed, and no sealed 'sealing started' entry follows "
                                                  f"({len(walk.unsealed)} unsealed entries): this database was not "
                                                  f"written with the audit key, or its seals were removed"))
    elif seals.unsealed_before_key and seals.sealed:
        seals.notes.append(f"{seals.unsealed_before_key} entries before entry #{seals.first_sealed_seq} are "
                           f"unsealed (made before an audit key was configured)")
    problems.sort(key=lambda p: (p.seq is None, p.seq or 0))
    problems = unsealable + schema + problems
    complete = not seals.unchecked and not seals.unkeyed and not (seals.sealed and not keys)
    return Report(not problems, n, rows, prev or None, head_seq, genesis, head, anchor_seq, problems,
                  schema_version, seals, complete)


def _epoch_of(at: str, epoch_s: int, slack_s: float = 0) -> int | None:
    try:
        t = datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None
    return int((t + slack_s) // epoch_s)


def _check_seal(seals: Seals, walk: _Walk, problems: list[Problem], era: _Era, seq: int,
                tbl: str, row_id: int | None, op: str, h: str, epoch: int | None, sl: str | None, at: str,
                first: bool) -> None:
    verifier = era.verifier
    if sl is None:
        if walk.keyed and walk.start is not None:
            problems.append(Problem(seq, tbl, row_id, f"unsealed entry after sealed ones (sealing started at "
                                                      f"entry #{walk.start}): written without the audit key, "
                                                      f"or forged"))
        elif walk.keyed:
            walk.unsealed.append((seq, tbl, row_id))   # allowed only if a sealed start follows
            seals.unsealed_before_key += 1
        elif seals.sealed:
            problems.append(Problem(seq, tbl, row_id, "unsealed entry after sealed ones: written without the "
                                                      "audit key, or forged"))
        else:
            seals.unsealed_before_key += 1
        return
    if walk.start is None and (op == SEALING_STARTED or (first and op == GENESIS)):
        walk.start = seq
    if seals.first_sealed_seq is None:
        seals.first_sealed_seq = seq
    seals.sealed += 1
    if epoch is None:
        problems.append(Problem(seq, tbl, row_id, "the seal has no epoch: forged"))
        return
    if walk.today is not None and epoch > walk.today + 1:
        # Judged before deriving any key: a forged epoch far ahead must not cost its derivation.
        problems.append(Problem(seq, tbl, row_id, f"sealed for epoch {epoch}, which has not begun (now "
                                                  f"{walk.today}): forged"))
        return
    if seals.last_epoch is not None and epoch < seals.last_epoch:
        problems.append(Problem(seq, tbl, row_id, f"the epoch goes backwards ({seals.last_epoch} -> {epoch}): "
                                                  f"sealed out of order, or forged"))
        return   # (its seal is not derived: keys are derived forward only)
    seals.last_epoch = max(epoch, seals.last_epoch or epoch)
    if verifier is None:
        if walk.keyed:
            seals.unkeyed += 1
        return
    if not verifier.can_check(epoch):
        if era.kind == VERIFICATION:
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


def _check_rows(conn: SqlConn, latest: dict[tuple[str, int], tuple[int, str, str | None]],
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
            unset = " and ".join(f"{quote(c)} is null" for c in added) or "1"
            for rid, content, untouched in conn.execute(
                    f"select rowid, {dialect(conn).row_json_sql(cols, '', present)}, {unset} from {quote(t)} "
                    f"order by rowid"):
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
                elif entry[2] is not None and (sha_text(content) != entry[2] or not untouched):
                    problems.append(Problem(entry[0], t, rid, "the row's content differs from its last audit entry "
                                                              "(edited without trace)"))
        for (tbl, rid), (seq, op, _) in latest.items():
            if tbl == t and op != "D" and rid not in live:
                problems.append(Problem(seq, t, rid, "the row was deleted without trace"))
    return rows


def verify_rows(conn: SqlConn, rows: list[tuple[str, int]]) -> list[Problem]:
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
        entry = conn.execute(f"select seq, op, content_sha256, hash from {CHAIN_TABLE} where tbl = $1 and row_id = $2 "
                             f"and op not in ('C', 'T') order by seq desc limit 1", [t, rid]).fetchone()
        cols = eras[t][_era_index(eras[t], entry[0] if entry else 1 << 62)][1]
        live = conn.execute(f"select {dialect(conn).row_json_sql(cols, '', present[t])} from {quote(t)} "
                            f"where rowid = $1",
                            [rid]).fetchone()
        if live is None:
            continue
        if entry is None:
            problems.append(Problem(None, t, rid, "the row is not in the audit chain (written without trace)"))
        elif entry[3] is None:
            problems.append(Problem(entry[0], t, rid, "changed outside eaglebot (an entry without a hash)"))
        elif entry[1] == "D":
            problems.append(Problem(entry[0], t, rid, "the row was deleted in the chain but is present"))
        elif sha_text(live[0]) != entry[2]:
            problems.append(Problem(entry[0], t, rid, "the row's content differs from its last audit entry "
                                                      "(edited without trace)"))
    return problems


_OPS = {"I": "an insert", "U": "an update", "D": "a delete", "S": "a snapshot"}
