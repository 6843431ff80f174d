"""Which backend `audit_db` names: an SQLite file (the default) or a PostgreSQL database."""
from __future__ import annotations

from pathlib import Path

from eaglebot.errors import StoreError
from eaglebot.store.db import Store


def is_db_url(target: str | Path) -> bool:
    """Does `audit_db` name a database server (PostgreSQL) rather than an SQLite file?"""
    # The schemes of config.DB_URL_SCHEMES, spelled here: the store loads without the config
    # (pydantic), see tests/test_startup.py.
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def open_store(target: str | Path, *, key_file: str | Path | None = None, readonly: bool = False) -> Store:
    """The audit store `audit_db` names: a `postgresql://` URL opens the PostgreSQL store
    (psycopg loads only then), anything else is an SQLite file."""
    if is_db_url(target):
        try:
            from eaglebot.store.pg_store import PgStore
        except ImportError:
            raise StoreError("audit_db is a PostgreSQL URL but psycopg is not installed: "
                             "pip install 'eaglebot[postgres]'") from None
        return PgStore(str(target), key_file=key_file, readonly=readonly)
    return Store(target, key_file=key_file, readonly=readonly)


def store_exists(target: str | Path) -> bool:
    """Is there a store at `audit_db` yet: the SQLite file, or the PostgreSQL database's tables
    (asked over a read-only session: a read-only command runs no DDL)."""
    if not is_db_url(target):
        return Path(target).exists()
    from eaglebot.store import chain
    from eaglebot.store.pg_store import PgStore

    store = PgStore(str(target), readonly=True)
    try:
        return chain.table_exists(store.db, "runs")
    finally:
        store.close()
