"""The audit DB's migrations (store/migrations.py): named and ordered, each applied in its own
transaction with its record (user_version), idempotent, and a DB at any older version ends
with the schema of a new one."""
from __future__ import annotations

import sqlite3

import pytest

from eaglebot.errors import StoreError
from eaglebot.store import Store, migrations
from eaglebot.store.migrations import MIGRATIONS, SCHEMA_VERSION
from eaglebot.store.rows import NewRun


def _schema(path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("select name, sql from sqlite_master where name not like 'sqlite_%' "
                            "order by name").fetchall()
    finally:
        conn.close()


def test_migrations_are_named_numbered_and_in_order():
    assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))
    assert [m.name[:4] for m in MIGRATIONS] == [f"{v:04d}" for v in range(1, SCHEMA_VERSION + 1)]
    assert MIGRATIONS[0].name == "0001_initial" and MIGRATIONS[-1].name == "0013_metric_class_parent_run"
    assert [m.name for m in migrations.pending(5)] == ["0006_remote_procs", "0007_chain_seals",
                                                      "0008_step_output_file", "0009_incident_causes",
                                                          "0010_health_watch", "0011_replicas", "0012_seen_requests",
                                                      "0013_metric_class_parent_run"]
    assert migrations.pending(SCHEMA_VERSION) == [] and migrations.pending(SCHEMA_VERSION + 1) == []


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_a_database_marked_at_an_older_version_converges_to_the_current_schema(tmp_path, version):
    fresh = tmp_path / "fresh.db"
    Store(fresh).close()
    old = tmp_path / "old.db"
    s = Store(old)
    rid = s.create_run(NewRun(playbook="p", hosts=["h"], inputs={}, variables={}, actor="a", origin="cli"))
    s.finish_run(rid, "succeeded", exit_code=0)
    s.db.execute(f"PRAGMA user_version = {version}")
    s.close()
    s = Store(old)
    assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert s.audit_verify()["ok"] and [r["id"] for r in s.history()] == [rid]
    s.close()
    assert _schema(old) == _schema(fresh)


def test_each_migration_commits_on_its_own_and_a_failed_one_is_retried(tmp_path, monkeypatch):
    seen: list[int] = []

    def boom(db, from_version):
        seen.append(db.execute("PRAGMA user_version").fetchone()[0])
        raise sqlite3.OperationalError("disk I/O error")

    broken = tuple(migrations.Migration(m.version, m.name, boom) if m.version == 6 else m for m in MIGRATIONS)
    monkeypatch.setattr(migrations, "MIGRATIONS", broken)
    with pytest.raises(StoreError, match="disk I/O error"):
        Store(tmp_path / "a.db")
    assert seen == [5]  # 0001..0005 were committed, one at a time, before it ran
    conn = sqlite3.connect(tmp_path / "a.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
    assert conn.execute("select count(*) from sqlite_master where name = 'remote_procs'").fetchone()[0] == 0
    conn.close()
    monkeypatch.undo()
    s = Store(tmp_path / "a.db")  # the next open applies what is left
    assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION and s.audit_verify()["ok"]
    s.close()
