"""The store side of "no orphans": migration v6, pending cleanups after a crash, and the lock
that is kept (ownerless, with a reason) until they ran. Real SQLite files."""
from __future__ import annotations

from eaglebot.store import Store
from eaglebot.store.db import SCHEMA_VERSION
from eaglebot.store.migrations import MIGRATIONS
from eaglebot.store.rows import NewRun


def test_migration_v6_from_a_v2_database_is_idempotent(tmp_path):
    s = Store(tmp_path / "a.db")
    db_id = s.db_id
    s.db.execute("drop table remote_procs")
    s.db.execute("drop table meta")
    s.db.execute("alter table locks drop column reason")
    s.db.execute("PRAGMA user_version = 2")
    s.close()
    s = Store(tmp_path / "a.db")
    assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 6
    assert "reason" in s.db.table("locks").columns_dict and s.db.table("remote_procs").exists()
    assert s.db_id != db_id and len(s.db_id) == 12
    again = s.db_id
    (v6,) = [m for m in MIGRATIONS if m.name == "0006_remote_procs"]
    with s._tx():
        v6.fn(s.db, 6)  # once more: nothing changes
    s.close()
    s = Store(tmp_path / "a.db")
    assert s.db_id == again
    s.close()


def test_a_crashed_run_leaves_a_pending_cleanup_and_keeps_its_lock_with_a_reason(tmp_path):
    s = Store(tmp_path / "a.db")
    rid = s.create_run(NewRun(playbook="p", hosts=["gpu"], inputs={}, variables={}, actor="t", origin="cli"))
    s.acquire_hosts(rid, ["gpu"])
    sid = s.step_started(rid, 0, "gpu", "nap", "shell", {})
    # The process that ran it is gone (a pid that cannot be alive).
    s.db.execute("update runs set pid = 999999999 where id = $1", [rid])
    s.db.execute("update locks set pid = 999999999")
    assert s.recover() == [rid]
    (row,) = s.pending_procs("gpu")
    assert row["tag"] == f"{s.db_id}-{rid}-{sid}" and row["step_id"] == sid
    (lock,) = s.locks()
    assert lock["pid"] is None and lock["reason"].startswith(f"processes of run #{rid} may still run on gpu")
    assert s.steps(rid)[0]["status"] == "failed"
    # The next run takes the lock over, stops them, and the old step says so.
    rid2 = s.create_run(NewRun(playbook="p", hosts=["gpu"], inputs={}, variables={}, actor="t", origin="cli"))
    s.acquire_hosts(rid2, ["gpu"])
    s.procs_cleaned(row["id"], by_run=rid2, note=f"its processes on gpu were stopped by run #{rid2} (2 processes)")
    assert s.pending_procs("gpu") == []
    s.release_hosts(rid2)
    assert s.locks() == []
    assert s.steps(rid)[0]["summary"].endswith(f"; its processes on gpu were stopped by run #{rid2} (2 processes)")
    s.close()


def test_a_finished_run_without_pending_processes_frees_its_lock(tmp_path):
    s = Store(tmp_path / "a.db")
    rid = s.create_run(NewRun(playbook="p", hosts=["gpu"], inputs={}, variables={}, actor="t", origin="cli"))
    s.acquire_hosts(rid, ["gpu"])
    sid = s.step_started(rid, 0, "gpu", "nap", "shell", {})
    s.procs_record(rid, sid, "gpu", tag=s.proc_tag(rid, sid), state="stopped", note="2 processes stopped",
                   pgids=[123])
    s.release_hosts(rid)
    assert s.locks() == [] and s.pending_procs("gpu") == []
    s.close()
