"""The store contract (tests/support/store_contract.py) bound to the SQLite backend: a real file."""
from __future__ import annotations

import pytest

from eaglebot.store import Store
from support.store_contract import *  # noqa: F401,F403


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "eagle.db")
    yield s
    s.close()
