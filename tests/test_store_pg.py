"""The PostgreSQL store's own rules (a real server, tests/support/pg.py): the same migrations make the
same tables and columns as on SQLite, one process migrates while the others wait, the
schema version is a row, and the leader lease is an advisory lock that dies with its session."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from support.helpers import wait_for

from eaglebot.errors import StoreError
from eaglebot.store import Store, chain, open_store
from eaglebot.store.migrations import SCHEMA_VERSION
from eaglebot.store.rows import NewRun


def _tables(store: Store) -> dict[str, list[str]]:
    conn = store.db.conn
    # each backend's own bookkeeping: SQLite's sqlite_sequence and user_version are PostgreSQL's
    # audit_chain_seq (the chain's high-water mark) and eagle_schema
    names = [t for t in store.db.table_names() if not t.startswith(("sqlite_", "eagle_schema", "audit_chain_seq"))]
    return {t: chain.columns(conn, t) for t in sorted(names)}


def test_the_migrations_make_the_same_tables_and_columns_as_on_sqlite(pg_url, tmp_path):
    pg, lite = open_store(pg_url), Store(tmp_path / "eagle.db")
    try:
        assert _tables(pg) == _tables(lite)
        assert pg._version() == lite._version() == SCHEMA_VERSION
        migrations = pg.db.execute("select content from audit_chain where op = 'M' order by seq").fetchall()
        assert [r[0] for r in migrations] == [r[0] for r in lite.db.execute(
            "select content from audit_chain where op = 'M' order by seq").fetchall()]
    finally:
        pg.close()
        lite.close()


@pytest.mark.parametrize("version", [1, 5, 6, SCHEMA_VERSION - 1])
def test_a_database_marked_at_an_older_version_converges(pg_url, version):
    s = open_store(pg_url)
    want = _tables(s)
    rid = s.create_run(NewRun(playbook="p", hosts=["h"], inputs={}, variables={}, actor="a", origin="cli"))
    s.finish_run(rid, "succeeded", exit_code=0)
    s.db.execute("update eagle_schema set version = $1", [version])
    s.close()
    s = open_store(pg_url)
    try:
        assert s._version() == SCHEMA_VERSION and _tables(s) == want
        assert s.audit_verify()["ok"] and [r["id"] for r in s.history()] == [rid]
    finally:
        s.close()


def test_one_process_migrates_an_empty_database_while_the_others_wait(pg_server):
    name = f"empty_{os.getpid()}"
    with pg_server.admin() as c:
        c.execute(f'create database "{name}" template template0')
    url = pg_server.url(name)
    opened: list[Store] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            opened.append(open_store(url))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(opened) == 4
    s = opened[0]
    applied = s.db.execute("select count(*) from audit_chain where op = 'M'").fetchone()[0]
    assert applied == len(chain.CHAIN_SCHEMA)   # each chained migration once (0011 chains no table)
    assert s.db.execute("select count(*) from meta").fetchone()[0] == 1 and s.audit_verify()["ok"]
    for s in opened:
        s.close()


def test_readonly_opening_writes_nothing(pg_url):
    s = open_store(pg_url, readonly=True)
    try:
        with pytest.raises(Exception, match="read-only"):
            s.add_event(None, "note", "x")
        assert s.audit_verify()["ok"]
    finally:
        s.close()


# -- the leader lease -----------------------------------------------------------------------

def test_only_one_store_acquires_a_lease_and_it_moves_on_release(pg_url):
    a, b = open_store(pg_url), open_store(pg_url)
    try:
        assert a.lease_acquire("leader", "replica-a", 15)
        assert not b.lease_acquire("leader", "replica-b", 15)
        assert a.lease_acquire("leader", "replica-a", 15)   # a renewal
        row = b.lease_holder("leader")
        assert row is not None and row["holder"] == "replica-a" and row["expires_at"] > row["renewed_at"]
        a.lease_release("leader", "replica-a")
        assert b.lease_holder("leader") is None
        assert b.lease_acquire("leader", "replica-b", 15)
        assert a.lease_holder("leader")["holder"] == "replica-b"
        assert not a.lease_acquire("leader", "replica-a", 15)
        assert a.lease_acquire("other", "replica-a", 15)   # leases by name
    finally:
        a.close()
        b.close()


HOLDER = """
import sys, time
from eaglebot.store import open_store
s = open_store(sys.argv[1])
assert s.lease_acquire("leader", "child", 15)
print("held", flush=True)
time.sleep(600)
"""


def test_a_sigkilled_holder_loses_the_lease_to_the_next_try(pg_url):
    child = subprocess.Popen([sys.executable, "-c", HOLDER, pg_url], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        s = open_store(pg_url)
        assert not s.lease_acquire("leader", "survivor", 15)
        assert s.lease_holder("leader")["holder"] == "child"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        # The server sees the connection drop at once (a local socket closed by the kernel).
        wait_for(lambda: s.lease_acquire("leader", "survivor", 15), timeout=10, what="the lease to be free")
        row = s.lease_holder("leader")
        assert row is not None and row["holder"] == "survivor"
        s.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_holder_that_stops_renewing_is_cut_off_by_the_server(pg_url):
    a, b = open_store(pg_url), open_store(pg_url)
    try:
        assert a.lease_acquire("leader", "a", 1.0)   # idle_session_timeout = the ttl
        time.sleep(1.5)   # a hung leader: it renews nothing
        wait_for(lambda: b.lease_acquire("leader", "b", 15), timeout=10, what="the idle lease to be cut off")
        assert not a.lease_acquire("leader", "a", 1.0)   # its session is gone and b holds the lock
    finally:
        a.close()
        b.close()


def test_an_unreachable_server_is_one_sentence():
    with pytest.raises(StoreError) as e:
        open_store("postgresql://eagle@127.0.0.1:1/x")
    assert str(e.value).startswith("audit store postgresql://eagle@127.0.0.1:1/x: nothing listens there")
    assert "\n" not in str(e.value)


async def test_the_async_store_runs_the_postgresql_store_on_its_thread(pg_url):
    from eaglebot.store import AsyncStore
    from eaglebot.store.pg_store import PgStore

    store = await AsyncStore.open(pg_url)
    try:
        assert isinstance(store.sync, PgStore)
        rid = await store.call(lambda s: s.create_run(NewRun(playbook="p", hosts=["h"], inputs={}, variables={}, actor="a", origin="cli")))
        await store.call(lambda s: s.finish_run(rid, "succeeded", exit_code=0))
        assert [r["id"] for r in await store.call(lambda s: s.history())] == [rid]
        assert (await store.call(lambda s: s.audit_verify()))["ok"]
    finally:
        await store.aclose()


def test_a_url_in_audit_db_is_never_turned_into_a_path(tmp_path):
    from eaglebot.config import load_settings
    from eaglebot.errors import UsageError

    url = "postgresql://eagle@db.internal:5432/eagle"
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(f"audit_db: {url}\n")
    s = load_settings(cfg)
    assert s.audit_db_url == url and s.audit_store == url
    assert s.output_root == tmp_path / "eagle-output"
    with pytest.raises(UsageError, match="PostgreSQL URL, not a file"):
        s.db_path
    cfg.write_text("audit_db: state/eagle.db\n")
    s = load_settings(cfg)
    assert s.audit_db_url is None and s.audit_store == s.db_path == tmp_path / "state" / "eagle.db"


def test_a_table_a_migration_creates_numbers_its_rows_and_has_a_hidden_rowid(pg_url):
    s = open_store(pg_url)
    try:
        with s._tx():   # as a migration does: the table through the face, the row through insert_row
            s.db.table("sample_rows").create({"id": int, "name": str}, pk="id", not_null={"name"})
            s.db.table("sample_keys").create({"key": str, "note": str}, pk="key")
            assert s.db.insert_row("sample_rows", {"name": "r1"}) == 1
            assert s.db.insert_row("sample_rows", {"name": "r2"}) == 2
            assert s.db.insert_row("sample_keys", {"key": "k", "note": "n"}) == 1   # an identity rowid
        assert [tuple(r) for r in s.db.execute("select rowid, id from sample_rows order by id").fetchall()] == \
            [(1, 1), (2, 2)]
        assert chain.columns(s.db, "sample_rows") == ["id", "name"]
        assert list(s.db.query("select * from sample_rows order by id")) == [{"id": 1, "name": "r1"},
                                                                              {"id": 2, "name": "r2"}]
        assert list(s.db.query("select * from sample_keys")) == [{"key": "k", "note": "n"}]
    finally:
        s.close()


def _terminate_sessions(pg_url: str, application_name: str = "eaglebot") -> int:
    """What a PostgreSQL restart or a failover does to the store's session: it is gone."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as admin:
        return len(admin.execute("select pg_terminate_backend(pid) from pg_stat_activity "
                                 "where application_name = %s and datname = current_database() and pid <> pg_backend_pid()",
                                 [application_name]).fetchall())


def test_a_session_killed_between_transactions_is_replaced_and_the_store_goes_on(pg_url):
    from support.store_contract import finished_run, new_run

    store = open_store(pg_url)
    try:
        first = finished_run(store)
        assert _terminate_sessions(pg_url) == 1
        # a read, then a write: each finds the session dead, opens a new one and runs once
        assert store.get_run(first)["status"] == "succeeded"
        assert _terminate_sessions(pg_url) == 1
        rid = new_run(store)
        store.finish_run(rid, "succeeded", exit_code=0)
        assert [r["id"] for r in store.history(limit=5)] == [rid, first]
        assert store.audit_verify()["ok"] is True
    finally:
        store.close()


def test_a_session_killed_inside_a_transaction_fails_that_write_in_one_sentence_and_the_next_works(pg_url):
    from support.store_contract import new_run

    store = open_store(pg_url)
    try:
        rid = new_run(store)
        with pytest.raises(StoreError) as e:
            with store._tx():
                store.db.execute("update runs set error = 'half' where id = $1", [rid])
                _terminate_sessions(pg_url)
                store.db.execute("update runs set error = 'done' where id = $1", [rid])
        assert "\n" not in str(e.value) and "audit store postgresql://" in str(e.value)
        store.finish_run(rid, "failed", exit_code=1)      # a new session, nothing of the half write
        run = store.get_run(rid)
        assert run["status"] == "failed" and run["error"] is None
        assert store.audit_verify()["ok"] is True
    finally:
        store.close()
