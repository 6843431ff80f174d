"""The SQLite audit store (sqlite-utils, WAL): the source of truth for every run.

`Store` is synchronous (the CLI uses it directly); `eaglebot.store.aio.AsyncStore` is its
door from the event loop (`await store.call(fn)`: `fn(store)` on one writer thread), so the
event loop never blocks on SQLite.

Why mixins and not repository objects behind a facade: every aggregate writes through the
one connection and the one sealed transaction (`StoreBase._tx`), callers have always called
`store.create_run(...)`, and a facade would repeat each of the ~100 signatures once more (the
faces in store/protocol*.py restate them for mypy, and nothing else does).
Each mixin is one aggregate's module; `Store` only opens the DB. PostgreSQL (store/pg_store.py)
runs the same mixins, statement for statement, over its own connection (store/pg_conn.py); `store.factory.open_store` picks
the backend `audit_db` names. Both are held to `store.protocol.StoreProtocol` by
`tests/support/store_contract.py`.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

from eaglebot.store import chain
from eaglebot.store.approvals import ApprovalsMixin
from eaglebot.store.base import owner_alive, proc_start_time, store_error
from eaglebot.store.health import HealthMixin
from eaglebot.store.incidents import IncidentsMixin
from eaglebot.store.locks import LocksMixin
from eaglebot.store.maintenance import MaintenanceMixin
from eaglebot.store.migrations import SCHEMA_VERSION, migrate
from eaglebot.store.runs import RunsMixin
from eaglebot.store.schedules import SchedulesMixin
from eaglebot.store.sealing import Sealer
from eaglebot.store.steps import StepsMixin
from eaglebot.store.sweeps import SweepsMixin
from eaglebot.store.trends import TrendsMixin

__all__ = ["SCHEMA_VERSION", "Store", "owner_alive", "proc_start_time"]


class Store(RunsMixin, StepsMixin, TrendsMixin, IncidentsMixin, ApprovalsMixin, LocksMixin, SweepsMixin,
            SchedulesMixin, HealthMixin, MaintenanceMixin):
    """The audit store on one SQLite file: every aggregate's methods on one connection."""

    def __init__(self, path: str | Path, *, key_file: str | Path | None = None, readonly: bool = False):
        """`key_file`: the audit sealing key (store/sealing.py); every chain entry this store
        writes is sealed with it. `readonly`: open for reading only (`eagle audit verify`):
        no migration, no trigger repair, no recovery, not a byte written."""
        self.path = Path(path)
        self._setup(key_file, readonly)
        try:
            if readonly:
                self._connect_readonly()
            else:
                self._open()
        except (sqlite3.Error, OSError) as e:
            if hasattr(self, "db"):
                self.db.conn.close()
            raise store_error(self.path, e) from None

    def _setup(self, key_file: str | Path | None, readonly: bool) -> None:
        """What every backend sets before it connects."""
        self.readonly = readonly
        self._chained = self._seal_cols = False
        self._db_id = None
        # Read before the DB is opened: a key file that cannot be used stops the command at once.
        self._sealer = Sealer(Path(key_file)) if key_file is not None and not readonly else None
        if self._sealer is not None:
            # Each open moves the key file on to today's key (the days before are then gone),
            # even on a day nothing is written.
            self._sealer.key_for()

    def _open(self) -> None:
        self._connect_rw()
        self._ready()

    def _ready(self) -> None:
        """On a connected, writable store of any backend: migrate, repair, recover."""
        migrate(self)  # checkpoints the WAL after each migration it applies (SQLite)
        self._db_id = self.db_id  # read once here, on the opening thread
        # Only the schema this code knows: a newer eagle's triggers are not this one's to "repair".
        if self._version() == SCHEMA_VERSION and not chain.triggers_current(self.db, SCHEMA_VERSION):
            with self._tx():
                chain.reinstall_triggers(self.db, SCHEMA_VERSION)
        self.recover()

