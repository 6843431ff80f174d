"""A keyed chain never accepts an unsealed entry (issue 35, item 1), through the `eagle` CLI
(in this process, tests/support/inproc.py; a real process where a bound on its time is the point) on a
real SQLite file and a real PostgreSQL (tests/support/pg.py).

With `audit_key_file` (or `verify --key`), every forgery an unkeyed chain allows used to pass
again once the seals were removed: "no entry is sealed" was a note and exit 0. Now unsealed
entries are allowed only before a sealed "sealing started" entry; a missing seal column, an
unsealed entry, a gap in the numbering or an epoch that has not begun is a break (exit 1, the
first named), and no later command blesses it. Hostile key files are one sentence, exit 2, in
bounded time.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from support.helpers import eagle, write_yaml
from support.inproc import eagle_here, eagle_here_json

from eaglebot.store import chain, sealing
from eaglebot.store import pg_dialect as chain_pg
from eaglebot.store.migrations import SCHEMA_VERSION


def _sql(db: Path, *statements: str) -> None:
    """What another program does to the DB file: the sqlite3 shell where installed."""
    if shutil.which("sqlite3"):
        for sql in statements:
            subprocess.run(["sqlite3", str(db), sql], check=True, capture_output=True, timeout=30)
        return
    conn = sqlite3.connect(db)
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


@pytest.fixture
def keyed(tmp_path) -> tuple[Path, Path, Path]:
    """The issue's setup: `eagle audit init-key keys/audit.key > verify.key`, a config naming
    it, and `eagle run hello -H local`."""
    (tmp_path / "keys").mkdir(mode=0o700)
    res = eagle_here("audit", "init-key", "keys/audit.key", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (tmp_path / "verify.key").write_text(res.stdout)
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "audit_key_file": "keys/audit.key"})
    res = eagle_here("run", "hello", "-H", "local", config=cfg)
    assert res.returncode == 0, res.stderr
    return cfg, tmp_path / "eagle.db", tmp_path / "verify.key"


def _verify(cfg: Path, *argv: str) -> tuple[subprocess.CompletedProcess, dict]:
    return eagle_here_json("audit", "verify", *argv, config=cfg)


def _broken(cfg: Path, vk: Path) -> list[dict]:
    """Both ways of giving the key (--key, the configured sealing key) name a break, exit 1."""
    docs = []
    for argv in (("--key", str(vk)), ()):
        res, doc = _verify(cfg, *argv)
        assert res.returncode == 1, (argv, doc["problems"][:3], doc["seals"])
        assert doc["ok"] is False and doc["first_broken"] is not None
        docs.append(doc)
    text = eagle_here("audit", "verify", "--key", str(vk), config=cfg)
    assert text.returncode == 1 and text.stdout.startswith("audit chain broken at ")
    return docs


def test_the_issues_reproduction_seals_stripped_is_a_break_and_stays_one(keyed):
    cfg, db, vk = keyed
    assert _verify(cfg, "--key", str(vk))[0].returncode == 0
    _sql(db, "update audit_chain set seal=null, epoch=null")
    doc = _broken(cfg, vk)[0]
    assert doc["first_broken"]["seq"] == 1
    assert "no sealed 'sealing started' entry follows" in doc["first_broken"]["reason"]
    # the next writing command (with the key) seals its own entries, and blesses nothing before them
    assert eagle_here("run", "hello", "-H", "local", config=cfg).returncode == 0
    doc = _broken(cfg, vk)[0]
    assert doc["first_broken"]["seq"] == 1 and "no sealed 'sealing started' entry" in doc["first_broken"]["reason"]
    assert not sqlite3.connect(db).execute("select 1 from audit_chain where op = 'K'").fetchone()


def test_stripping_the_seals_of_a_tail_or_of_one_entry_is_a_break(keyed):
    cfg, db, vk = keyed
    last = sqlite3.connect(db).execute("select max(seq) from audit_chain").fetchone()[0]
    _sql(db, f"update audit_chain set seal = null, epoch = null where seq = {last - 3}")
    doc = _broken(cfg, vk)[0]
    assert doc["first_broken"]["seq"] == last - 3 and "unsealed entry after sealed ones" in doc["first_broken"]["reason"]


def test_an_edit_rehashed_with_the_chains_own_link_hash_is_a_break(keyed):
    """The forger edits a row and recomputes its entry and every later link, as eaglebot would,
    without the key: the rewritten entries are unsealed (or keep seals that no longer match)."""
    cfg, db, vk = keyed
    conn = sqlite3.connect(db)
    for (name,) in conn.execute("select name from sqlite_master where type = 'trigger' and tbl_name = 'runs'"):
        conn.execute(f'drop trigger "{name}"')
    conn.execute("update runs set actor = 'mallory' where id = 1")
    cols = chain.chain_schema(SCHEMA_VERSION)["runs"]
    content = conn.execute(f"select {chain.SQLITE.row_json_sql(cols, '')} from runs where id = 1").fetchone()[0]
    seq = conn.execute("select max(seq) from audit_chain where tbl = 'runs' and row_id = 1").fetchone()[0]
    conn.execute("update audit_chain set content_sha256 = ? where seq = ?", [chain.sha_text(content), seq])
    rows = conn.execute("select seq, tbl, row_id, op, at, content_sha256 from audit_chain where seq >= ? order by seq",
                        [seq]).fetchall()
    prev = conn.execute("select hash from audit_chain where seq = ?", [seq - 1]).fetchone()[0]
    for s, tbl, row_id, op, at, csha in rows:
        h = chain.link_hash(prev, s, tbl, row_id, op, at, csha)
        conn.execute("update audit_chain set prev_hash = ?, hash = ?, seal = null, epoch = null where seq = ?",
                     [prev, h, s])
        prev = h
    for name, sql in chain.SQLITE.trigger_sql("runs", cols).items():   # and the triggers back, as they were
        conn.execute(sql)
    conn.commit()
    conn.close()
    docs = _broken(cfg, vk)
    assert docs[0]["first_broken"]["seq"] == seq and "unsealed entry after sealed ones" in docs[0]["first_broken"]["reason"]
    # ... and with every other seal stripped too, as the issue's forger did: no seal is left to
    # contradict the edit, and without a sealed start nothing unsealed is accepted
    _sql(db, "update audit_chain set seal = null, epoch = null")
    doc = _broken(cfg, vk)[0]
    assert doc["first_broken"]["seq"] == 1 and "no sealed 'sealing started' entry" in doc["first_broken"]["reason"]
    # keeping made-up seals instead: they do not match
    conn = sqlite3.connect(db)
    conn.execute("update audit_chain set epoch = ?, seal = '00' || substr(hash, 3)", [json.loads(vk.read_text())["epoch"]])
    conn.commit()
    conn.close()
    res, doc = _verify(cfg, "--key", str(vk))
    assert res.returncode == 1 and "the seal does not match" in doc["first_broken"]["reason"]


def test_the_seal_columns_dropped_are_a_break_and_the_next_command_does_not_bless_it(keyed):
    cfg, db, vk = keyed
    _sql(db, "alter table audit_chain drop column seal", "alter table audit_chain drop column epoch")
    doc = _broken(cfg, vk)[0]
    assert doc["first_broken"]["table"] == "" and "no seal columns" in doc["first_broken"]["reason"]
    assert eagle_here("run", "hello", "-H", "local", config=cfg).returncode == 0   # puts them back for new entries
    assert {"seal", "epoch"} <= {r[1] for r in sqlite3.connect(db).execute("pragma table_info(audit_chain)")}
    doc = _broken(cfg, vk)[0]
    assert doc["first_broken"]["seq"] == 1 and "no sealed 'sealing started' entry" in doc["first_broken"]["reason"]


def test_a_database_written_without_the_key_swapped_in_is_a_break(keyed, tmp_path):
    cfg, db, vk = keyed
    other = tmp_path / "other"
    other.mkdir()
    plain = write_yaml(other / "eagle.yaml", {"audit_db": "eagle.db"})
    assert eagle_here("run", "hello", "-H", "local", config=plain).returncode == 0
    shutil.copy(other / "eagle.db", db)
    doc = _broken(cfg, vk)[0]
    assert doc["first_broken"]["seq"] == 1 and "no sealed 'sealing started' entry" in doc["first_broken"]["reason"]
    # the bot writing it with its key (which has started sealing) records no start: still broken
    assert eagle_here("run", "hello", "-H", "local", config=cfg).returncode == 0
    _broken(cfg, vk)
    assert json.loads((tmp_path / "keys" / "audit.key").read_text())["started"] is True


def test_a_forged_migration_entry_laundering_an_added_column_is_a_break(keyed):
    """An 'M' entry of an unknown version listing the added column (and triggers to match)
    makes the schema look migrated; with a key, that entry is unsealed and named."""
    cfg, db, vk = keyed
    conn = sqlite3.connect(db)
    conn.execute("alter table runs add column backdoor text")
    tables = {t: list(c) for t, c in chain.chain_schema(SCHEMA_VERSION).items()}
    tables["runs"].append("backdoor")
    for name, sql in chain.SQLITE.trigger_sql("runs", tables["runs"]).items():   # triggers for the new list
        conn.execute(f'drop trigger "{name}"')
        conn.execute(sql)
    content = json.dumps({"version": 99, "tables": tables}, sort_keys=True)
    conn.execute("insert into audit_chain (tbl, row_id, op, content) values ('', null, 'M', ?)", [content])
    seq, at = conn.execute("select seq, at from audit_chain order by seq desc limit 1").fetchone()
    prev = conn.execute("select hash from audit_chain where seq = ?", [seq - 1]).fetchone()[0]
    csha = chain.sha_text(content)
    conn.execute("update audit_chain set content_sha256 = ?, prev_hash = ?, hash = ? where seq = ?",
                 [csha, prev, chain.link_hash(prev, seq, "", None, "M", at, csha), seq])
    conn.commit()
    conn.close()
    doc = _broken(cfg, vk)[0]
    assert doc["first_broken"]["seq"] == seq and "unsealed entry after sealed ones" in doc["first_broken"]["reason"]
    _sql(db, "update audit_chain set seal = null, epoch = null")   # the issue's forger strips them all
    doc = _broken(cfg, vk)[0]
    assert doc["first_broken"]["seq"] == 1 and "no sealed 'sealing started' entry" in doc["first_broken"]["reason"]


def test_a_chain_keyed_mid_life_starts_with_a_sealed_entry_and_verifies(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    assert eagle_here("run", "hello", "-H", "local", config=cfg).returncode == 0
    (tmp_path / "keys").mkdir(mode=0o700)
    res = eagle_here("audit", "init-key", "keys/audit.key", cwd=tmp_path)
    (tmp_path / "verify.key").write_text(res.stdout)
    keyed = write_yaml(tmp_path / "keyed.yaml", {"audit_db": "eagle.db", "audit_key_file": "keys/audit.key"})
    assert eagle_here("run", "hello", "-H", "local", config=keyed).returncode == 0
    res, doc = _verify(keyed, "--key", str(tmp_path / "verify.key"))
    assert res.returncode == 0, doc["problems"][:3]
    (start,) = sqlite3.connect(tmp_path / "eagle.db").execute(
        "select seq from audit_chain where op = 'K' and seal is not null").fetchall()
    assert doc["seals"]["first_sealed_seq"] == start[0] and doc["seals"]["unsealed_before_key"] == start[0] - 1
    assert any("unsealed (made before an audit key was configured)" in n for n in doc["seals"]["notes"])


def test_entries_cut_off_the_end_leave_a_gap_once_the_chain_goes_on(keyed):
    cfg, db, vk = keyed
    conn = sqlite3.connect(db)
    last = conn.execute("select max(seq) from audit_chain").fetchone()[0]
    cut = conn.execute("select min(seq) from audit_chain where tbl = 'runs' and op = 'U'").fetchone()[0]
    conn.close()
    _sql(db, f"delete from audit_chain where seq >= {cut}", "delete from steps", "delete from run_hosts",
         "delete from locks", "delete from runs")
    assert eagle_here("run", "hello", "-H", "local", config=cfg).returncode == 0
    docs = _broken(cfg, vk)
    gaps = [p for p in docs[0]["problems"] if "gap in its numbering" in p["reason"]]
    assert gaps and gaps[0]["seq"] == last + 1 and f"entries #{cut} to #{last} are missing" in gaps[0]["reason"]
    assert eagle_here("audit", "verify", config=write_yaml(cfg.parent / "u.yaml", {"audit_db": "eagle.db"})).returncode == 1


def test_prune_cuts_no_entry_and_the_numbering_stays_whole(keyed):
    cfg, db, vk = keyed
    res = eagle_here("prune", "--older-than", "0min", config=cfg)
    assert res.returncode == 0 and res.stdout.startswith("pruned 1 runs"), res.stdout + res.stderr
    assert eagle_here("run", "hello", "-H", "local", config=cfg).returncode == 0
    seqs = [s for (s,) in sqlite3.connect(db).execute("select seq from audit_chain order by seq")]
    assert seqs == list(range(1, len(seqs) + 1))
    res, doc = _verify(cfg, "--key", str(vk))
    assert res.returncode == 0 and doc["seals"]["checked"] == doc["entries"], doc["problems"][:3]


def test_verify_creates_no_wal_or_shm_beside_a_closed_database(keyed):
    cfg, db, vk = keyed
    side = [Path(f"{db}-wal"), Path(f"{db}-shm")]
    assert not any(p.exists() for p in side)   # `eagle run` closed it
    before = db.read_bytes()
    for argv in (("audit", "verify", "--key", str(vk)), ("audit", "verify", "--json"), ("audit", "head")):
        assert eagle_here(*argv, config=cfg).returncode == 0
        assert not any(p.exists() for p in side), argv
    assert db.read_bytes() == before


def test_an_epoch_that_has_not_begun_is_a_break_found_without_deriving_it(keyed):
    cfg, db, vk = keyed
    _sql(db, "update audit_chain set epoch = 999999999999 where seq = (select max(seq) from audit_chain)")
    t0 = time.monotonic()
    res, doc = _verify(cfg, "--key", str(vk))
    assert res.returncode == 1 and "which has not begun" in doc["first_broken"]["reason"]
    assert time.monotonic() - t0 < 60   # generous: a derivation to that epoch would never end
    res = eagle("run", "hello", "-H", "local", config=cfg, timeout=60)   # writing on it is bounded too
    assert res.returncode == 0, res.stderr


# -- hostile key files -------------------------------------------------------------------------

def _one_sentence(res: subprocess.CompletedProcess, *words: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    for w in words:
        assert w in res.stderr, res.stderr


@pytest.mark.parametrize("case", ["epoch_s 1", "future epoch", "invalid UTF-8", "fifo", "loose folder", "huge"])
def test_a_hostile_key_file_is_one_sentence_exit_2_in_bounded_time(keyed, tmp_path, case):
    cfg, db, vk = keyed
    kf = tmp_path / "keys" / "audit.key"
    key = json.loads(kf.read_text())
    words: tuple[str, ...] = ()
    if case == "epoch_s 1":          # day numbers under one-second epochs: 1.7 billion evolutions
        kf.write_text(json.dumps({**key, "epoch_s": 1}) + "\n")
        words = ("epochs of 1 s behind the clock",)
    elif case == "future epoch":
        kf.write_text(json.dumps({**key, "epoch": key["epoch"] + 10}) + "\n")
        words = ("which has not begun",)
    elif case == "invalid UTF-8":
        kf.write_bytes(b'{"eagle_audit_key": "sealing", "k\xff\xfe": 1}\n')
        words = ("not UTF-8",)
    elif case == "fifo":
        kf.unlink()
        os.mkfifo(kf, 0o600)
        words = ("not a regular file",)
    elif case == "loose folder":
        os.chmod(kf.parent, 0o777)
        words = ("writable by group or others", "chmod go-w")
    elif case == "huge":
        kf.write_text(json.dumps({**key, "pad": "x" * 10000}) + "\n")
        words = ("over 4096 bytes",)
    for argv in (("run", "hello", "-H", "local"), ("history",), ("audit", "verify")):
        _one_sentence(eagle(*argv, config=cfg, timeout=60), str(kf), *words)
    if case != "loose folder":       # the verification key's folder is not the bot's
        vk.write_bytes(kf.read_bytes()) if case != "fifo" else (vk.unlink(), os.mkfifo(vk, 0o600))
        _one_sentence(eagle("audit", "verify", "--key", str(vk), config=cfg, timeout=60), str(vk), *words)


def test_init_key_refuses_a_folder_others_may_write(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    res = eagle_here("audit", "init-key", str(loose / "audit.key"))
    _one_sentence(res, "writable by group or others")
    assert not (loose / "audit.key").exists()


# -- PostgreSQL ----------------------------------------------------------------------------------

def _psql(url: str, *sql: str) -> None:
    with psycopg.connect(url) as conn:
        for s in sql:
            conn.execute(s)


@pytest.fixture
def pg_keyed(pg_url, tmp_path) -> tuple[Path, str, Path]:
    (tmp_path / "keys").mkdir(mode=0o700)
    res = eagle_here("audit", "init-key", "keys/audit.key", cwd=tmp_path)
    (tmp_path / "verify.key").write_text(res.stdout)
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": pg_url, "audit_key_file": "keys/audit.key"})
    res = eagle_here("run", "hello", "-H", "local", config=cfg)
    assert res.returncode == 0, res.stderr
    res, doc = _verify(cfg, "--key", str(tmp_path / "verify.key"))
    assert res.returncode == 0, doc["problems"][:3]
    return cfg, pg_url, tmp_path / "verify.key"


def test_postgresql_seals_stripped_are_a_break_and_stay_one(pg_keyed):
    cfg, url, vk = pg_keyed
    _psql(url, "update audit_chain set seal = null, epoch = null")
    assert "no sealed 'sealing started' entry" in _broken(cfg, vk)[0]["first_broken"]["reason"]
    assert eagle_here("run", "hello", "-H", "local", config=cfg).returncode == 0
    assert "no sealed 'sealing started' entry" in _broken(cfg, vk)[0]["first_broken"]["reason"]


def test_postgresql_seal_columns_dropped_are_a_break(pg_keyed):
    cfg, url, vk = pg_keyed
    _psql(url, "alter table audit_chain drop column seal", "alter table audit_chain drop column epoch")
    assert "no seal columns" in _broken(cfg, vk)[0]["first_broken"]["reason"]


def test_postgresql_a_database_written_without_the_key_swapped_in_is_a_break(pg_keyed, pg_server, tmp_path):
    cfg, _, vk = pg_keyed
    swapped = pg_server.fresh_db()    # migrated without a key: what `pg_restore` of another DB gives
    plain = write_yaml(tmp_path / "plain.yaml", {"audit_db": swapped})
    assert eagle_here("run", "hello", "-H", "local", config=plain).returncode == 0
    cfg = write_yaml(cfg, {"audit_db": swapped, "audit_key_file": "keys/audit.key"})
    assert "no sealed 'sealing started' entry" in _broken(cfg, vk)[0]["first_broken"]["reason"]
    assert eagle_here("run", "hello", "-H", "local", config=cfg).returncode == 0
    _broken(cfg, vk)


def test_postgresql_a_forged_migration_entry_is_a_break(pg_keyed):
    cfg, url, vk = pg_keyed
    tables = {t: list(c) for t, c in chain.chain_schema(SCHEMA_VERSION).items()}
    tables["runs"].append("backdoor")
    content = json.dumps({"version": 99, "tables": tables}, sort_keys=True)
    with psycopg.connect(url) as conn:
        conn.execute("alter table runs add column backdoor text")
        for name, body in chain_pg.PG.trigger_sql("runs", tables["runs"]).items():
            conn.execute(f'create or replace function "{name}"() returns trigger language plpgsql as $x${body}$x$')
        seq, at = conn.execute("insert into audit_chain (tbl, row_id, op, content) values ('', null, 'M', %s) "
                               "returning seq, at", [content]).fetchone()
        prev_seq, prev = conn.execute("select seq, hash from audit_chain where seq < %s order by seq desc limit 1",
                                      [seq]).fetchone()
        conn.execute("update audit_chain set seq = %s where seq = %s", [prev_seq + 1, seq])  # no gap either
        csha = chain.sha_text(content)
        conn.execute("update audit_chain set content_sha256 = %s, prev_hash = %s, hash = %s where seq = %s",
                     [csha, prev, chain.link_hash(prev, prev_seq + 1, "", None, "M", at, csha), prev_seq + 1])
    doc = _broken(cfg, vk)[0]
    assert doc["first_broken"]["seq"] == prev_seq + 1 and "unsealed entry after sealed ones" in doc["first_broken"]["reason"]
    _psql(url, "update audit_chain set seal = null, epoch = null")   # the issue's forger strips them all
    assert "no sealed 'sealing started' entry" in _broken(cfg, vk)[0]["first_broken"]["reason"]


def test_postgresql_rolled_back_transactions_leave_no_gap_and_a_cut_end_leaves_one(pg_keyed):
    from eaglebot.store import open_store

    cfg, url, vk = pg_keyed
    store = open_store(url, key_file=cfg.parent / "keys" / "audit.key")
    for _ in range(3):   # each takes identity numbers, then rolls back
        with pytest.raises(RuntimeError):
            with store._tx():
                store.db.execute("insert into events (run_id, at, kind, message) values (null, 'x', 'note', 'y')")
                raise RuntimeError("rolled back")
    store.add_event(None, "note", "after the rollbacks")
    store.close()
    res, doc = _verify(cfg, "--key", str(vk))
    assert res.returncode == 0, doc["problems"][:3]
    with psycopg.connect(url) as conn:
        seqs = [s for (s,) in conn.execute("select seq from audit_chain order by seq")]
    assert seqs == list(range(1, len(seqs) + 1))
    _psql(url, "delete from events where message = 'after the rollbacks'",
          f"delete from audit_chain where seq > {seqs[-3]}")
    assert eagle_here("run", "hello", "-H", "local", config=cfg).returncode == 0
    gaps = [p for p in _broken(cfg, vk)[0]["problems"] if "gap in its numbering" in p["reason"]]
    assert gaps and f"entries #{seqs[-3] + 1} to #{seqs[-1]} are missing" in gaps[0]["reason"]


def test_the_key_file_says_once_it_has_started_sealing(keyed, tmp_path):
    key = sealing.read_key_file(tmp_path / "keys" / "audit.key", private=True)
    assert key.started and key.kind == "sealing"
    assert sealing.parse_key((tmp_path / "verify.key").read_text(), "vk").started is False


def test_postgresql_a_rotated_key_verifies_each_era_with_its_own_key(pg_keyed):
    """`eagle audit rotate-key` on PostgreSQL (issue 46 item 6): the handover is sealed in the
    chain, the next run seals with the new key, and each era verifies with its own key."""
    cfg, url, vk = pg_keyed
    res = eagle("audit", "rotate-key", config=cfg)
    assert res.returncode == 0, res.stderr
    vk2 = vk.with_name("verify-2.key")
    vk2.write_text(res.stdout)
    assert eagle("run", "hello", "-H", "local", config=cfg).returncode == 0
    res, doc = _verify(cfg, "--key", str(vk), "--key", str(vk2))
    assert res.returncode == 0 and doc["complete"] and doc["seals"]["checked"] == doc["seals"]["sealed"], doc["problems"][:3]
    res, doc = _verify(cfg, "--key", str(vk))
    assert res.returncode == 4 and doc["intact"] and doc["seals"]["unkeyed"] > 0
