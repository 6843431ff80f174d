"""Keeping the audit DB: checking its chain (`eagle audit verify`, `show`), its head (the
anchor posted outside), online backups, the doctor's write probe, and retention (prune)."""
from __future__ import annotations

import os
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from eaglebot.errors import StoreError, UsageError
from eaglebot.store import chain
from eaglebot.store.base import StoreBase
from eaglebot.store.rows import AuditHead
from eaglebot.store.sealing import AuditKey, key_id, next_key
from eaglebot.store.sqlite_db import SqliteDatabase

# Runs a prune may delete: finished, started before the cutoff, baseline of nothing, and
# nothing an open incident points at (the runs it flagged and where its drop began), so an
# open incident can still be judged, shown and closed after a prune.
_DOOMED = ("select id from runs where started_at < $1 and status != 'running' "
           "and id not in (select run_id from baselines where run_id is not null) "
           "and id not in (select ir.run_id from incident_runs ir join incidents i on i.id = ir.incident_id "
           "where i.status = 'open') "
           "and id not in (select ref_before_run from incidents where status = 'open' and ref_before_run is not null)")


def _cutoff(older_than: timedelta) -> str:
    return (datetime.now(timezone.utc) - older_than).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def remove_output_files(paths: list[str]) -> None:
    """Delete pruned steps' output files, then their run folders once empty."""
    folders = set()
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        folders.add(os.path.dirname(p))
    for d in folders:
        try:
            os.rmdir(d)
        except OSError:  # not empty (another step's file) or gone: left as it is
            pass


class MaintenanceMixin(StoreBase):
    """Whole-DB operations: audit checks, backup, writability, prune."""

    def audit_verify(self, head: str | None = None, key: AuditKey | list[AuditKey] | None = None) -> dict[str, Any]:
        """Walk the audit hash chain (`eagle audit verify`): ok, head, first_broken, problems,
        seals. With `key` (a verification or sealing key; one per key era of a rotated chain)
        every seal it can derive is checked."""
        from eaglebot.store import verify   # (here: only the audit commands read the chain, not a run)

        keys = key if isinstance(key, list) else [key] if key is not None else []
        return self._stable_read(lambda: verify.verify(self.db, head, keys).to_json())

    def audit_rotate_key(self) -> AuditKey:
        """`eagle audit rotate-key`: a sealed 'R' entry names the next key, and the key file is
        replaced with it before that transaction commits, so every entry after it (this
        process's or another's, which reads the replaced file at its next seal) is sealed with
        the next key. Returns the next key's key_0 (its verification key)."""
        sealer = self._sealer
        if sealer is None:
            raise UsageError("no audit key to rotate: set `audit_key_file` in eagle.yaml (`eagle audit init-key`)")
        with self._tx():
            pass   # a chain that the key has not started sealing starts now ('K'), before its handover
        old = sealer.key_for()
        new = next_key(old)
        try:
            with self._tx():
                since = chain.last_seq(self.db)
                chain.record_rotation(self.db, new.epoch, key_id(new))
                chain.seal(self.db, since, sealer)   # with the old key, inside this transaction
                sealer.install(new)
        except BaseException:
            if sealer.key.key == new.key:
                sealer.install(old)
            raise
        return AuditKey("verification", new.epoch, new.epoch_s, new.key)

    def run_audit_problems(self, run_id: int) -> list[str]:
        """One run's rows (the run, its steps, metrics, changes, approvals, events, warnings,
        regressions) checked against the audit chain: a sentence per edited row."""
        from eaglebot.store import verify

        conn = self.db
        found: list[tuple[str, int]] = [("runs", run_id)]
        for t in chain.CHAINED_TABLES:
            if t != "runs" and chain.table_exists(conn, t) and "run_id" in chain.columns(conn, t):
                found += [(t, r[0]) for r in conn.execute(f'select rowid from "{t}" where run_id = $1 order by rowid',
                                                          [run_id])]
        return [p.line() for p in verify.verify_rows(conn, found)]

    def audit_head(self) -> AuditHead:
        """The newest sealed link of the audit chain: the anchor posted outside the DB."""
        row = self._stable_read(lambda: self.db.execute(f"select seq, hash from {chain.CHAIN_TABLE} where hash is "
                                                       f"not null order by seq desc limit 1").fetchone())
        return {"seq": row[0], "hash": row[1]} if row else {"seq": None, "hash": None}

    def backup(self, dest: Path) -> AuditHead:
        """A consistent copy of the whole DB (SQLite's online backup: the bot may keep
        writing) at `dest`, a new file with this DB's mode; the chain head the COPY holds (the
        live DB may have moved on while it was taken)."""
        try:
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise UsageError(f"{dest} exists; name a new file for the backup") from None
        except OSError as e:
            raise StoreError(f"cannot create {dest}: {e.strerror}") from None
        os.close(fd)
        try:
            target = sqlite3.connect(dest)
            try:
                # One step (pages=-1): the copy is one read snapshot; the bot's writes go on
                # (WAL) and never restart it.
                self._stable_read(lambda: self.db.conn.backup(target))
                row = target.execute(f"select seq, hash from {chain.CHAIN_TABLE} where hash is not null "
                                     f"order by seq desc limit 1").fetchone() \
                    if chain.table_exists(SqliteDatabase(target), chain.CHAIN_TABLE) else None
            finally:
                target.close()
            os.chmod(dest, os.stat(self.path).st_mode & 0o777)
        except (sqlite3.Error, OSError) as e:
            dest.unlink(missing_ok=True)
            raise StoreError(f"backup to {dest} failed: {e}") from None
        return {"seq": row[0], "hash": row[1]} if row else {"seq": None, "hash": None}

    def check_writable(self) -> None:
        """Raise if the audit DB cannot take a write lock now (doctor)."""
        self.db.begin()
        self.db.rollback()

    def _run_children(self) -> list[str]:
        """Every table with a foreign key to runs (other modules may add their own), and events
        (a run_id without a declared foreign key)."""
        names = self.db.table_names()
        out = [t for t in names if t != "runs" and any(fk.other_table == "runs" for fk in self.db.table(t).foreign_keys)]
        return out + [t for t in ("events",) if t in names and t not in out]

    def prune_count(self, older_than: timedelta) -> int:
        """How many runs `prune(older_than)` would delete."""
        return int(self.db.execute(f"select count(*) from ({_DOOMED}) as doomed", [_cutoff(older_than)]).fetchone()[0])

    def prune(self, older_than: timedelta) -> int:
        """Delete finished runs started before now - older_than, with their child rows.

        Baseline runs are kept; so is the newest fire record of each schedule (misfire
        detection reads it).
        """
        cutoff = _cutoff(older_than)
        children = self._run_children()
        with self._tx():
            self.db.execute("create temp table if not exists _prune_ids (id integer primary key)")
            self.db.execute("delete from _prune_ids")
            self.db.execute(f"insert into _prune_ids (id) {_DOOMED}", [cutoff])
            n = int(self.db.execute("select count(*) from _prune_ids").fetchone()[0])
            files = [r[0] for r in self.db.execute(
                "select output_file from steps where output_file is not null "
                "and run_id in (select id from _prune_ids)")]
            for t in children:
                self.db.execute(f"delete from {chain.quote(t)} where run_id in (select id from _prune_ids)")
            self.db.execute("delete from runs where id in (select id from _prune_ids)")
            self.db.execute(
                "delete from schedule_fires where fire_time < $1 and id not in "
                "(select max(id) from schedule_fires group by schedule)", [cutoff])
            self.db.execute("delete from _prune_ids")
        remove_output_files(files)  # after the commit: a failed prune keeps every file its rows name
        return n
