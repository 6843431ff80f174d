"""Schema v3 (rejections as events, approval messages, paused schedules) on a v2 database."""
from __future__ import annotations

from support.history_seed import seed_run

from eaglebot.store import Store
from eaglebot.store.db import SCHEMA_VERSION


def test_a_v2_database_gains_the_v3_columns_and_keeps_its_rows(tmp_path):
    store = Store(tmp_path / "old.db")
    rid = seed_run(store, "bench", "gpu-01")
    store.add_event(rid, "note", "before the upgrade")
    # a real v2 database has no audit chain (v5): no triggers, no chain table
    for (trigger,) in store.db.execute("select name from sqlite_master where type = 'trigger'").fetchall():
        store.db.execute(f"drop trigger {trigger}")
    store.db.execute("drop table audit_chain")
    store.db.execute("drop table schedule_state")
    for col in ("actor", "text", "reason"):
        store.db.execute(f"alter table events drop column {col}")
    for col in ("requester", "channel", "message_ts"):
        store.db.execute(f"alter table approvals drop column {col}")
    store.db.execute("PRAGMA user_version = 2")
    store.close()
    store = Store(tmp_path / "old.db")
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 3
    assert {"actor", "text", "reason"} <= set(store.db.table("events").columns_dict)
    assert {"requester", "channel", "message_ts"} <= set(store.db.table("approvals").columns_dict)
    assert [e["message"] for e in store.events()] == ["before the upgrade"]
    store.add_rejection("rejected", "alice", "eagle run dsik", "unknown playbook 'dsik'")
    assert store.set_schedule_paused("nightly", True, "alice") and not store.set_schedule_paused("nightly", True, "x")
    store.close()
    store = Store(tmp_path / "old.db")           # opening again changes nothing (idempotent)
    assert [e["kind"] for e in store.events()] == ["rejected", "note"]
    assert store.schedule_states()["nightly"]["paused"] == 1
    assert [r["id"] for r in store.history()] == [rid]
    store.close()
