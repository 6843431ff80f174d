"""What every `eagle` command module needs: the config its `--config` names, the store, who
runs it, and the one way errors and JSON are printed. Nothing heavy at import time (`eagle
--help` loads argparse only): each helper imports what it needs when called."""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from eaglebot.errors import UsageError

if TYPE_CHECKING:
    from eaglebot.config import Settings
    from eaglebot.store import Store


def settings(args: argparse.Namespace) -> Settings:
    from eaglebot.config import load_settings

    return load_settings(getattr(args, "config", None))


def whoami() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return str(os.getuid())


def err(msg: str) -> None:
    """One line on stderr, with the built-in patterns and the environment's secrets redacted."""
    from eaglebot.engine.redact import Redactor

    print(f"eagle: {Redactor().text(msg)}", file=sys.stderr)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def open_store(cfg: Settings) -> Store:
    from eaglebot.store import Store

    return Store(cfg.db_path, key_file=cfg.audit_key_path)


def store_only(args: argparse.Namespace) -> Store:
    """The store, for a command that needs nothing else of the config (no pydantic)."""
    from eaglebot.configfile import audit_db_path, audit_key_path
    from eaglebot.store import Store

    db = audit_db_path(getattr(args, "config", None))
    known, key = audit_key_path(getattr(args, "config", None)) if db is not None else (False, None)
    return Store(db, key_file=key) if db is not None and known else open_store(settings(args))


def known_run(store: Store, run_id: int) -> dict[str, Any]:
    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"no run #{run_id}")
    return run
