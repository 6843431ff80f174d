"""The store's SQL is written once and runs as written on both backends (issue 36: PostgreSQL's
differences are named dialect methods, and store/pg_conn.py matches no SQL text).

- pg_conn.py reads no statement: no `re`, and a statement's text is only ever handed on;
- what the mixins hand the PostgreSQL face reaches psycopg byte for byte (spied on psycopg's own
  raw cursor, which sends the text to the server unparsed);
- the store contract's workload gives both faces the same statements, apart from the catalog
  and bookkeeping each backend keeps in its own words (SQLite's pragmas and sqlite_master;
  PostgreSQL's pg_catalog, the chain's high-water mark and the write lock).
"""
from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from support import store_contract
from eaglebot.store import Store, open_store
from eaglebot.store import pg_conn as pg_conn_module
from eaglebot.store.pg_conn import PgDatabase
from eaglebot.store.sqlite_db import SqliteDatabase

PG_CONN = Path(inspect.getfile(pg_conn_module))
FACE = ("execute", "executemany", "query", "insert_row")
# Contract tests whose methods PostgreSQL implements on its own (the lease: store/pg_lease.py).
OWN_METHODS = {"test_a_lease_has_one_holder_until_it_is_released"}
WORKLOAD = [f for name, f in vars(store_contract).items() if name.startswith("test_") and name not in OWN_METHODS]


def test_pg_conn_imports_no_regex_and_only_hands_a_statement_on():
    tree = ast.parse(PG_CONN.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names} | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "re" not in imported
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "sql"]
    assert uses, "pg_conn.py's statements are parameters named `sql`"
    for n in uses:
        parent = parents[n]
        # a statement is passed as an argument (to psycopg, or to the connection), never looked into
        assert isinstance(parent, ast.arg) or (isinstance(parent, ast.Call) and n in parent.args), \
            f"pg_conn.py line {n.lineno} does something with a statement's text"


class Spy:
    """Records each statement a class's methods are handed (outermost call only), calling through."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.mp = monkeypatch
        self.seen: list[str] = []
        self.active = False   # off while a store opens (SQLite's files migrate, PostgreSQL's are cloned)
        self._depth = 0

    def on(self, cls: type, names: tuple[str, ...], text: Callable[[str, tuple[Any, ...]], str]) -> None:
        for name in names:
            real = getattr(cls, name, None)
            if real is None:
                continue

            def wrapper(obj: Any, *args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                if self.active and self._depth == 0:
                    self.seen.append(text(_name, args))
                self._depth += 1
                try:
                    return _real(obj, *args, **kw)
                finally:
                    self._depth -= 1
            self.mp.setattr(cls, name, wrapper)


def _face_text(name: str, args: tuple[Any, ...]) -> str:
    # insert_row builds its statement inside each face: record what the mixin asked for
    return f"insert_row {args[0]} {sorted(args[1])}" if name == "insert_row" else str(args[0])


def _run_workload(make_store: Callable[[], Any], *spies: Spy) -> None:
    for test in WORKLOAD:
        store = make_store()
        for spy in spies:
            spy.active = True
        try:
            test(store)
        finally:
            for spy in spies:
                spy.active = False
            store.close()


@pytest.mark.e2e  # every mixin's statements on PostgreSQL
def test_the_mixins_statements_reach_postgresql_as_written(pg_server, monkeypatch):
    face, driver = Spy(monkeypatch), Spy(monkeypatch)
    face.on(PgDatabase, FACE, _face_text)
    driver.on(psycopg.RawCursor, ("execute", "executemany"), lambda _n, args: str(args[0]))
    _run_workload(lambda: open_store(pg_server.fresh_db()), face, driver)
    written = {s for s in face.seen if not s.startswith("insert_row ")}
    assert len(written) > 100   # the workload covers the store
    assert written <= set(driver.seen), sorted(written - set(driver.seen))[:5]


def _own_words(statement: str) -> bool:
    """A backend's catalog or bookkeeping, which each spells its own way (the dialects)."""
    s = statement.lower()
    return any(w in s for w in ("pragma", "sqlite_master", "pg_", "current_schema", "eagle_schema",
                                "audit_chain_seq", "audit_chain set seq", "json"))


@pytest.mark.e2e  # every mixin on SQLite and PostgreSQL
def test_both_backends_are_handed_the_same_statements(pg_server, tmp_path, monkeypatch):
    lite, pg = Spy(monkeypatch), Spy(monkeypatch)
    lite.on(SqliteDatabase, FACE, _face_text)
    pg.on(PgDatabase, FACE, _face_text)
    paths = iter(range(10_000))
    _run_workload(lambda: Store(tmp_path / f"{next(paths)}.db"), lite)
    _run_workload(lambda: open_store(pg_server.fresh_db()), pg)
    on_lite = {s for s in lite.seen if not _own_words(s)}
    on_pg = {s for s in pg.seen if not _own_words(s)}
    assert len(on_lite & on_pg) > 100
    assert on_lite - on_pg == set()
    assert on_pg - on_lite == set()
