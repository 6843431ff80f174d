"""The audit chain on PostgreSQL (a real server, tests/support/pg.py): the same tamper cases as
tests/test_audit_chain.py, made with psql's means (a plain connection; triggers switched off
with `session_replication_role`; chain entries edited or deleted), the keyed seals, and the
CLI end to end against `audit_db: postgresql://...`."""
from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import psycopg
import pytest

from support.helpers import eagle_json as eagle_process_json, write_yaml
from support.inproc import eagle_here as eagle, eagle_here_json as eagle_json
from test_audit_chain import TAMPERS

from eaglebot.store import Store, open_store
from eaglebot.store.pg_store import PgStore
from eaglebot.store.rows import NewRun, StepEnd


def _psql(url: str, *sql: str, replica: bool = False) -> None:
    """What another program (psql) does to the database, in one transaction."""
    with psycopg.connect(url) as conn:
        if replica:   # the session's triggers do not fire: the edit leaves no chain entry
            conn.execute("set session_replication_role = replica")
        for s in sql:
            conn.execute(s)


def _fill(store: Store) -> int:
    """A run with steps, a metric, a change, a warning, an approval and an event."""
    from eaglebot.sdk import FileChange, Metric

    rid = store.create_run(NewRun(playbook="audited", hosts=["local"], inputs={"a": 1}, variables={}, actor="alice",
                           origin="cli"))
    for i, status in enumerate(("ok", "failed")):
        sid = store.step_started(rid, i, "local", f"s{i}", "shell", {"command": "echo"})
        store.step_finished(sid, StepEnd(run_id=rid, host="local", status=status, summary="x", duration_ms=5, attempts=1,
                            metrics=[Metric("output_throughput", 91.5, "tok/s")] if i == 0 else [],
                            changes=[FileChange("/etc/x.json", "a" * 64, "b" * 64, "-1\n+2", None)] if i == 0 else [],
                            warnings=["careful"] if i == 1 else []))
    aid = store.approval_requested(rid, 0, "local", "x", "kill", ["pid 1"])
    store.approval_decided(aid, "approved", "U1")
    store.add_event(rid, "note", "an event")
    store.finish_run(rid, "failed", exit_code=1)
    return rid


@pytest.fixture
def filled(pg_url, tmp_path) -> tuple[Path, str]:
    store = open_store(pg_url)
    _fill(store)
    store.close()
    return write_yaml(tmp_path / "eagle.yaml", {"audit_db": pg_url}), pg_url


def _verify(url: str) -> dict:
    store = open_store(url, readonly=True)
    try:
        return store.audit_verify()
    finally:
        store.close()


def test_eagle_run_history_and_verify_against_postgresql(pg_url, tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": pg_url})
    res, doc = eagle_process_json("run", "hello", config=cfg)   # a real `eagle run` process
    assert res.returncode == 0, res.stderr
    assert doc["status"] == "succeeded" and doc["steps"]
    res, hist = eagle_json("history", config=cfg)
    assert res.returncode == 0 and [h["run_id"] for h in hist] == [doc["run_id"]]
    assert hist[0]["playbook"] == "hello" and hist[0]["hosts"] == ["local"] and hist[0]["origin"] == "cli"
    res, show = eagle_json("show", str(doc["run_id"]), config=cfg)
    assert res.returncode == 0 and [s["name"] for s in show["steps"]] == [s["name"] for s in doc["steps"]]
    res, ver = eagle_json("audit", "verify", config=cfg)
    assert res.returncode == 0 and ver["ok"] and ver["schema_version"] == 13 and ver["rows_checked"] >= 3
    head = eagle("audit", "head", config=cfg)
    assert head.returncode == 0 and head.stdout.strip() == ver["head"]


def test_an_untouched_trail_verifies_and_has_the_entries_sqlite_has(filled, tmp_path):
    cfg, url = filled
    res, doc = eagle_json("audit", "verify", config=cfg)
    assert res.returncode == 0 and doc["ok"] and doc["genesis"] == "audit chain starts with this database"
    lite = Store(tmp_path / "same.db")
    _fill(lite)
    want = lite.db.execute("select tbl, row_id, op from audit_chain order by seq").fetchall()
    lite.close()
    pg = open_store(url)
    got = pg.db.execute("select tbl, row_id, op from audit_chain order by seq").fetchall()
    pg.close()
    assert [tuple(r) for r in got] == [tuple(r) for r in want]   # the same entries, in the same order


@pytest.mark.parametrize("what,sql,table", TAMPERS, ids=[t[0] for t in TAMPERS])
def test_an_edit_by_another_program_is_named(filled, what, sql, table):
    cfg, url = filled
    _psql(url, sql)
    if table == "runs":
        line = eagle("audit", "verify", config=cfg)
        assert line.returncode == 1 and line.stdout.startswith("audit chain broken at runs row 1")
        doc = json.loads(eagle("audit", "verify", "--json", config=cfg).stdout)
    else:
        doc = _verify(url)
    assert doc["ok"] is False and doc["first_broken"]["table"] == table
    assert "another program" in doc["first_broken"]["reason"]


@pytest.mark.parametrize("what,sql,table", TAMPERS, ids=[t[0] for t in TAMPERS])
def test_an_edit_with_the_triggers_off_is_named(filled, what, sql, table):
    cfg, url = filled
    _psql(url, sql, replica=True)
    res, doc = eagle_json("audit", "verify", config=cfg)
    assert res.returncode == 1 and doc["first_broken"]["table"] == table
    reason = doc["first_broken"]["reason"]
    assert ("deleted without trace" in reason) if sql.startswith("delete") else ("edited without trace" in reason)
    assert doc["first_broken"]["id"] is not None


def test_a_disabled_trigger_is_a_schema_break_and_the_next_open_puts_it_back(filled):
    cfg, url = filled
    _psql(url, "alter table runs disable trigger user", "update runs set actor = 'mallory'")
    doc = _verify(url)
    assert not doc["ok"] and doc["problems"][0]["table"] == "runs"
    assert "trigger audit_chain_runs_i altered" in doc["problems"][0]["reason"]
    open_store(url).close()   # a normal command re-enables it and says so in the chain
    doc = _verify(url)
    reasons = [p["reason"] for p in doc["problems"]]
    assert any("edited without trace" in r for r in reasons)
    assert any("chain triggers of `runs` were dropped or altered" in r for r in reasons)
    assert not any("schema of" in r for r in reasons)


def test_an_altered_or_removed_chain_entry_breaks_the_link(filled):
    cfg, url = filled
    with psycopg.connect(url) as c:
        seq = c.execute("select seq from audit_chain where tbl = 'metrics'").fetchone()[0]
    _psql(url, f"update audit_chain set content_sha256 = '{'0' * 64}' where seq = {seq}")
    doc = _verify(url)
    assert doc["first_broken"]["seq"] == seq and doc["first_broken"]["reason"] == "the chain entry was altered"
    _psql(url, f"delete from audit_chain where seq = {seq}")
    res, doc = eagle_json("audit", "verify", config=cfg)
    assert res.returncode == 1 and doc["first_broken"]["seq"] == seq + 1
    assert "broken link" in doc["first_broken"]["reason"]


def test_the_anchored_head_catches_entries_cut_off_the_end(filled):
    cfg, url = filled
    store = open_store(url)
    before = store.audit_head()["seq"]
    store.add_event(1, "note", "later")
    posted = store.audit_head()["hash"]
    store.close()
    res, doc = eagle_json("audit", "verify", "--head", posted, config=cfg)
    assert res.returncode == 0 and doc["anchor_seq"] == doc["head_seq"]
    _psql(url, "delete from events where message = 'later'", f"delete from audit_chain where seq > {before}")
    assert _verify(url)["ok"]
    res, doc = eagle_json("audit", "verify", "--head", posted, config=cfg)
    assert res.returncode == 1 and "anchored head" in doc["first_broken"]["reason"]


def test_keyed_seals_are_checked_by_the_verification_key_and_another_key_fails(pg_url, tmp_path):
    keys = []
    for name in ("audit.key", "other.key"):
        res = eagle("audit", "init-key", str(tmp_path / name))
        assert res.returncode == 0, res.stderr
        (tmp_path / f"{name}.verify").write_text(res.stdout.strip() + "\n")
        keys.append(tmp_path / f"{name}.verify")
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": pg_url, "audit_key_file": "audit.key"})
    store = open_store(pg_url, key_file=tmp_path / "audit.key")
    _fill(store)
    store.close()
    res, doc = eagle_json("audit", "verify", "--key", str(keys[0]), config=cfg)
    assert res.returncode == 0, doc["problems"]
    assert doc["seals"]["key"] == "verification" and doc["seals"]["checked"] > 10
    # the template database was migrated without a key: its entries come before the first seal
    assert doc["seals"]["sealed"] == doc["seals"]["checked"]
    assert doc["seals"]["sealed"] + doc["seals"]["unsealed_before_key"] == doc["entries"]
    res, doc = eagle_json("audit", "verify", "--key", str(keys[1]), config=cfg)
    assert res.returncode == 1 and "sealed under another key" in doc["first_broken"]["reason"]
    store = open_store(pg_url)   # the key left out: a downgrade
    store.add_event(1, "note", "unsealed")
    store.close()
    res, doc = eagle_json("audit", "verify", "--key", str(keys[0]), config=cfg)
    assert res.returncode == 1 and "unsealed entry after sealed ones" in doc["first_broken"]["reason"]


def test_writers_in_several_connections_never_interleave_the_chain(pg_url):
    stores = [open_store(pg_url) for _ in range(4)]
    errors: list[BaseException] = []

    def work(s: Store) -> None:
        try:
            for _ in range(5):
                _fill(s)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert errors == []
    doc = _verify(pg_url)
    assert doc["ok"], doc["problems"][:3]
    assert doc["rows_checked"] >= 20 * 9


def test_backup_on_postgresql_says_to_use_pg_dump(filled, tmp_path):
    cfg, url = filled
    res = eagle("audit", "backup", str(tmp_path / "copy.db"), config=cfg)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "pg_dump --format=custom" in res.stderr and not (tmp_path / "copy.db").exists()


def test_a_password_in_the_url_is_never_shown(pg_server, tmp_path):
    url = f"postgresql://eagle:hunter2secret@127.0.0.1:{pg_server.port}/no_such_db"
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": url})
    for argv in (("history",), ("audit", "verify"), ("doctor",)):
        res = eagle(*argv, config=cfg)
        assert res.returncode != 0
        assert "hunter2secret" not in res.stdout + res.stderr
        assert "postgresql://eagle:***@127.0.0.1" in res.stdout + res.stderr, res.stdout + res.stderr


def test_the_store_is_postgresql_for_a_url_and_sqlite_for_a_path(pg_url, tmp_path):
    pg, lite = open_store(pg_url), open_store(tmp_path / "x.db")
    assert isinstance(pg, PgStore) and not isinstance(lite, PgStore)
    assert not (tmp_path / "postgresql:").exists()
    pg.close()
    lite.close()


def test_the_pg_dump_the_backup_advice_names_restores_a_copy_that_verifies(filled, pg_server, tmp_path):
    from support.pg import pg_bin

    _, url = filled
    dump = tmp_path / "eagle.dump"
    subprocess.run([pg_bin("pg_dump"), "--format=custom", f"--file={dump}", url], check=True, timeout=60)
    name = f"restored_{os.getpid()}"
    with pg_server.admin() as c:
        c.execute(f'create database "{name}" template template0')
    subprocess.run([pg_bin("pg_restore"), "--dbname", pg_server.url(name), str(dump)], check=True, timeout=60)
    copy = pg_server.url(name)
    assert _verify(copy)["ok"] and _verify(copy)["head"] == _verify(url)["head"]
    store = open_store(copy)   # the copy takes new rows where the original stopped
    rid = _fill(store)
    store.close()
    assert rid == 2 and _verify(copy)["ok"]
