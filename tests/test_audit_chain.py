"""The tamper-evident audit trail: every audit row is a link in one hash chain, and
`eagle audit verify` names the first row whose content or link is wrong."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from support.helpers import eagle_json as eagle_process_json, write_playbook, write_yaml
from support.inproc import eagle_here as eagle, eagle_here_json as eagle_json

from eaglebot.store import Store
from eaglebot.store import chain
from eaglebot.store.rows import NewRun


@pytest.fixture(scope="module")
def ran_once(tmp_path_factory) -> tuple[Path, int]:
    """A real run through the CLI that leaves a run, steps, a metric, a change (with a diff),
    a warning; plus an approval and an event through the store. Made once, copied per test."""
    tmp_path = tmp_path_factory.mktemp("audited")
    books = tmp_path / "books"
    books.mkdir()
    target = tmp_path / "cfg.json"
    target.write_text('{"a": 1}\n')
    write_playbook(books, "audited", f"""
        name: audited
        steps:
          - skill: shell
            with: {{command: "echo hello"}}
          - skill: metric.record
            with: {{name: output_throughput, value: 91.5, unit: tok/s}}
          - skill: config.patch
            with: {{path: "{target}", set: {{a: 2}}}}
          - skill: shell
            continue_on_error: true
            with: {{command: "exit 3"}}
    """)
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "playbooks_dir": "books"})
    res, doc = eagle_process_json("run", "audited", config=cfg)  # a real `eagle run` process
    assert res.returncode == 0, res.stderr
    store = Store(tmp_path / "eagle.db")
    aid = store.approval_requested(doc["run_id"], 0, "local", "x", "kill", ["pid 1"])
    store.approval_decided(aid, "approved", "U1")
    store.add_event(doc["run_id"], "note", "an event")
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return tmp_path / "eagle.db", doc["run_id"]


@pytest.fixture
def ran(ran_once, tmp_path) -> tuple[Path, Path, int]:
    src, run_id = ran_once
    db = tmp_path / "eagle.db"
    shutil.copyfile(src, db)
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    return cfg, db, run_id


def _verify(cfg: Path, *extra: str):
    return eagle_json("audit", "verify", *extra, config=cfg)


def test_an_untouched_audit_trail_verifies_intact(ran):
    cfg, db, run_id = ran
    res, doc = _verify(cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    assert doc["ok"] is True and doc["first_broken"] is None
    assert doc["rows_checked"] >= 10  # run, 4 steps, metric, change, warning, approval, event
    assert doc["genesis"] == "audit chain starts with this database"
    text = eagle("audit", "verify", config=cfg)
    assert text.returncode == 0 and text.stdout.startswith("audit chain intact:")


TAMPERS = [
    ("step status", "update steps set status = 'ok' where status = 'failed'", "steps"),
    ("run actor", "update runs set actor = 'mallory'", "runs"),
    ("metric value", "update metrics set value = 200", "metrics"),
    ("deleted approval", "delete from approvals", "approvals"),
    ("blanked diff", "update changes set diff = ''", "changes"),
    ("event message", "update events set message = 'nothing happened'", "events"),
]


@pytest.mark.parametrize("what,sql,table", TAMPERS, ids=[t[0] for t in TAMPERS])
def test_an_edit_by_another_program_is_named(ran, what, sql, table):
    cfg, db, _ = ran
    conn = sqlite3.connect(db)
    conn.execute(sql)
    conn.commit()
    conn.close()
    if table == "runs":  # the CLI's exit code and line, once; the rest in-process
        line = eagle("audit", "verify", config=cfg)
        assert line.returncode == 1
        assert line.stdout.startswith(f"audit chain broken at {table} row ")
        doc = json.loads(eagle("audit", "verify", "--json", config=cfg).stdout)
    else:
        store = Store(db)
        doc = store.audit_verify()
        store.close()
    assert doc["ok"] is False and doc["first_broken"]["table"] == table
    assert "another program" in doc["first_broken"]["reason"]


@pytest.mark.parametrize("what,sql,table", TAMPERS, ids=[t[0] for t in TAMPERS])
def test_an_edit_with_the_triggers_dropped_is_named(ran, what, sql, table):
    cfg, db, _ = ran
    conn = sqlite3.connect(db)
    for (name,) in conn.execute("select name from sqlite_master where type = 'trigger'").fetchall():
        conn.execute(f'drop trigger "{name}"')
    conn.execute(sql)
    conn.commit()
    conn.close()
    store = Store(db)  # opening puts the triggers back, without blessing the edit
    doc = store.audit_verify()
    store.close()
    assert doc["ok"] is False
    assert doc["first_broken"]["table"] == table
    reason = doc["first_broken"]["reason"]
    assert ("deleted without trace" in reason) if sql.startswith("delete") else ("edited without trace" in reason)


def test_an_altered_or_removed_chain_entry_breaks_the_link(ran):
    cfg, db, _ = ran
    conn = sqlite3.connect(db)
    seq = conn.execute("select seq from audit_chain where tbl = 'metrics'").fetchone()[0]
    conn.execute("update audit_chain set content_sha256 = ? where seq = ?", ["0" * 64, seq])
    conn.commit()
    store = Store(db)
    doc = store.audit_verify()
    store.close()
    assert doc["first_broken"]["seq"] == seq and doc["first_broken"]["reason"] == "the chain entry was altered"
    conn.execute("delete from audit_chain where seq = ?", [seq])
    conn.commit()
    conn.close()
    res, doc = _verify(cfg)
    assert res.returncode == 1
    assert doc["first_broken"]["seq"] == seq + 1
    assert "broken link" in doc["first_broken"]["reason"]


def test_the_anchored_head_catches_entries_cut_off_the_end(ran):
    cfg, db, run_id = ran
    store = Store(db)
    before = store.db.execute("select max(seq) from audit_chain").fetchone()[0]
    store.add_event(run_id, "note", "later")
    posted = store.audit_head()["hash"]  # what the bot posted to Slack
    store.close()
    res, doc = _verify(cfg, "--head", posted)
    assert res.returncode == 0 and doc["anchor_seq"] == doc["head_seq"]
    # Rewind history cleanly: the newest event and its chain entry go; the rest is consistent.
    conn = sqlite3.connect(db)
    conn.execute("delete from events where message = 'later'")  # its 'D' entry goes with the rest
    conn.execute("delete from audit_chain where seq > ?", [before])
    conn.commit()
    conn.close()
    store = Store(db)
    assert store.audit_verify()["ok"]  # without an anchor outside the DB nothing shows
    store.close()
    res, doc = _verify(cfg, "--head", posted)
    assert res.returncode == 1
    assert "anchored head" in doc["first_broken"]["reason"]
    bad = eagle("audit", "verify", "--head", "nothex", config=cfg)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_an_existing_database_is_migrated_and_its_chain_says_where_it_starts(tmp_path):
    db = tmp_path / "old.db"
    store = Store(db)
    rid = store.create_run(NewRun(playbook="bench", hosts=["gpu-01"], inputs={}, variables={}, actor="a", origin="cli"))
    store.finish_run(rid, "succeeded", exit_code=0)
    store.close()
    # Make it a schema-v2 database from before the chain.
    conn = sqlite3.connect(db)
    for (name,) in conn.execute("select name from sqlite_master where type = 'trigger'").fetchall():
        conn.execute(f'drop trigger "{name}"')
    conn.execute("drop table audit_chain")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    store = Store(db)
    report = store.audit_verify()
    assert report["ok"], report["problems"]
    assert "at the migration to schema v5" in report["genesis"]
    assert store.db.execute("select count(*) from audit_chain where op = 'S' and tbl = 'runs'").fetchone()[0] == 1
    assert [json.loads(c)["version"] for (c,) in store.db.execute("select content from audit_chain where op = 'M'")] == [7, 8, 9, 10, 13]
    n = store.db.execute("select count(*) from audit_chain").fetchone()[0]
    store.close()
    store = Store(db)  # idempotent: a second open adds no genesis, no snapshot
    assert store.db.execute("select count(*) from audit_chain").fetchone()[0] == n
    assert store.db.execute("select count(*) from audit_chain where op = 'G'").fetchone()[0] == 1
    store.close()


def test_a_column_added_by_a_later_migration_is_covered(tmp_path, monkeypatch):
    """A migration that adds a column says so in the code's schema (CHAIN_SCHEMA) and in a
    chained 'M' entry: old rows still verify over the columns they were written with, nothing
    is snapshotted again, and the new column is covered from then on."""
    db = tmp_path / "a.db"
    store = Store(db)
    rid = store.create_run(NewRun(playbook="p", hosts=["h"], inputs={}, variables={}, actor="a", origin="cli"))
    snapshots = store.db.execute("select count(*) from audit_chain where op = 'S'").fetchone()[0]
    monkeypatch.setitem(chain.CHAIN_SCHEMA, 99, {"runs": ("incident",)})
    with store._tx():
        store.db.conn.execute("alter table runs add column incident text")
        chain.record_migration(store.db, 99)
    assert store.audit_verify()["ok"], store.audit_verify()["problems"]
    assert store.db.execute("select count(*) from audit_chain where op = 'S'").fetchone()[0] == snapshots
    store.close()
    conn = sqlite3.connect(db)
    conn.execute("update runs set incident = 'forged' where id = ?", [rid])
    conn.commit()
    conn.close()
    store = Store(db, readonly=True)
    assert store.audit_verify()["first_broken"]["table"] == "runs"
    store.close()


def test_every_chained_table_exists_and_prune_is_recorded_not_flagged(tmp_path):
    store = Store(tmp_path / "a.db")
    for t in chain.CHAINED_TABLES:
        assert chain.table_exists(store.db, t), t
    rid = store.create_run(NewRun(playbook="p", hosts=["h"], inputs={}, variables={}, actor="a", origin="cli"))
    store.finish_run(rid, "succeeded", exit_code=0)
    store.db.conn.execute("update runs set started_at = '2000-01-01T00:00:00.000Z'")  # outside a tx: unsealed
    assert not store.audit_verify()["ok"]
    store.close()


def test_doctor_runs_the_verification(ran):
    cfg, db, _ = ran
    res = eagle("doctor", config=cfg)
    assert "audit chain intact" in res.stderr + res.stdout
    conn = sqlite3.connect(db)
    conn.execute("update metrics set value = 1")
    conn.commit()
    conn.close()
    res = eagle("doctor", config=cfg)
    assert res.returncode == 1
    assert "audit chain broken at metrics row" in res.stderr + res.stdout


async def test_the_scheduler_posts_the_chain_head_and_verify_accepts_it(make_settings):
    from eaglebot.frontends.service.scheduler import Scheduler
    from eaglebot.frontends.services import Services

    settings = make_settings(slack={"channel": "C1"})
    services = await Services.open(settings)
    posted: list[tuple[str | None, str]] = []

    class Hooks:
        def observer(self, schedule):  # pragma: no cover - no schedules here
            raise AssertionError

        async def post(self, channel, text):
            posted.append((channel, text))
            return "1.0"

        async def upload(self, channel, thread_ts, path, title):  # pragma: no cover
            raise AssertionError

    try:
        await services.store.call(lambda s: s.add_event(None, "note", "something"))
        sched = Scheduler(services, Hooks())
        text = await sched.post_audit_anchor()
        head = (await services.store.call(lambda s: s.audit_head()))["hash"]
        assert posted == [("C1", text)] and head in text
        assert (await services.store.call(lambda s: s.audit_verify(head)))["ok"]
    finally:
        await services.close()


def test_verifying_a_missing_database_is_an_error_not_an_empty_intact_one(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "nothing.db"})
    res = eagle("audit", "verify", config=cfg)
    assert res.returncode == 1 and "there is no database file to verify" in res.stderr
    assert not (tmp_path / "nothing.db").exists()


def test_show_names_a_row_of_the_run_edited_without_trace(ran):
    """`eagle show` checks the rows it shows against the chain: untouched, nothing on stderr;
    a step's status edited by another program, one line naming the row (stdout unchanged)."""
    cfg, db, run_id = ran
    clean = eagle("show", str(run_id), config=cfg)
    assert clean.returncode == 0 and "audit:" not in clean.stderr, clean.stderr
    conn = sqlite3.connect(db)
    conn.execute("update steps set status = 'ok' where status = 'failed'")
    conn.commit()
    conn.close()
    res = eagle("show", str(run_id), config=cfg)
    assert res.returncode == 0
    [line] = [ln for ln in res.stderr.splitlines() if "audit:" in ln]
    assert f"run #{run_id}: steps row" in line and "changed outside eaglebot" in line
    res_json, doc = eagle_json("show", str(run_id), "--json", config=cfg)
    assert doc["run_id"] == run_id and "changed outside eaglebot" in res_json.stderr
    # with the triggers dropped first, the edit leaves no entry: the content no longer matches
    conn = sqlite3.connect(db)
    for (trigger,) in conn.execute("select name from sqlite_master where type = 'trigger'").fetchall():
        conn.execute(f"drop trigger {trigger}")
    conn.execute("update metrics set value = 200")
    conn.commit()
    conn.close()
    res = eagle("show", str(run_id), config=cfg)
    assert any("metrics row" in ln and "edited without trace" in ln for ln in res.stderr.splitlines()), res.stderr


V6_DB = Path(__file__).parent / "fixtures" / "audit" / "v6.db"  # written by eaglebot at dd1f8b7 (schema v6)


def test_a_schema_v6_database_is_migrated_by_a_chained_migration_entry(tmp_path):
    """A real v6 database (its chain took each table's columns from the live table): the
    migration to v7 is one 'M' entry with the code's column lists; only the tables chained
    for the first time (schedule_fires, run_hosts, meta) are snapshotted; the old rows still
    verify, and a key configured afterwards seals what comes next."""
    db = tmp_path / "eagle.db"
    shutil.copyfile(V6_DB, db)
    store = Store(db)
    conn = store.db.conn
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 13   # 0011_replicas, 0012_seen_requests: no chained table
    (m_seq, content), (m8_seq, content8), (_, content9), (_, content10), (_, content13) = conn.execute(
        "select seq, content from audit_chain where op = 'M' order by seq").fetchall()
    m = json.loads(content)
    assert m["version"] == 7 and m["tables"]["runs"] == list(chain.CHAIN_SCHEMA[7]["runs"])
    assert json.loads(content8)["version"] == 8 and json.loads(content8)["tables"]["steps"][-1] == "output_file"
    assert json.loads(content9)["version"] == 9 and json.loads(content9)["tables"]["incidents"][-1] == "cause_id"
    assert json.loads(content10)["version"] == 10 and "health_events" in json.loads(content10)["tables"]
    assert json.loads(content13)["tables"]["metrics"][-1] == "config_class"
    snapped = {t for (t,) in conn.execute("select distinct tbl from audit_chain where op = 'S' and seq > ?", [m_seq])}
    assert snapped == {"schedule_fires", "run_hosts", "meta"}
    assert not conn.execute("select 1 from audit_chain where op = 'S' and seq < ?", [m_seq]).fetchone()
    report = store.audit_verify()
    assert report["ok"], report["problems"]
    assert report["schema_version"] == 13
    n = conn.execute("select count(*) from audit_chain").fetchone()[0]
    store.close()
    store = Store(db)  # idempotent
    assert store.db.execute("select count(*) from audit_chain").fetchone()[0] == n
    store.close()
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "audit_key_file": "audit.key"})
    vline = eagle("audit", "init-key", str(tmp_path / "audit.key")).stdout
    (tmp_path / "verify.key").write_text(vline)
    assert eagle("baseline", "set", "1", config=cfg).returncode == 0
    res, doc = eagle_json("audit", "verify", "--key", str(tmp_path / "verify.key"), config=cfg)
    assert res.returncode == 0, doc["problems"]
    assert doc["seals"]["checked"] > 0 and doc["seals"]["unsealed_before_key"] == n
