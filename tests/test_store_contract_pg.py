"""The store contract (tests/support/store_contract.py) bound to the PostgreSQL backend: a real server
(tests/support/pg.py), a fresh migrated database per test."""
from __future__ import annotations

import pytest

from eaglebot.store import open_store
from eaglebot.store.pg_store import PgStore
from support.store_contract import *  # noqa: F401,F403


@pytest.fixture
def store(pg_url):
    s = open_store(pg_url)
    assert isinstance(s, PgStore)
    yield s
    s.close()
