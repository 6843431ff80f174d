"""What every `eagle` command module needs: the config its `--config` names, the store, who
runs it, and the one way errors and JSON are printed. Nothing heavy at import time (`eagle
--help` loads argparse only): each helper imports what it needs when called."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Coroutine, Iterator, TypeVar

from eaglebot.errors import UsageError

if TYPE_CHECKING:
    from eaglebot.config import Settings
    from eaglebot.store import Store
    from eaglebot.store.protocol import RunsFace
    from eaglebot.store.rows import RunRow

T = TypeVar("T")


def settings(args: argparse.Namespace) -> Settings:
    from eaglebot.config import load_settings

    return load_settings(getattr(args, "config", None))


def whoami() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return str(os.getuid())


def add_run_options(s: argparse.ArgumentParser) -> None:
    """The options every command that starts a run takes (`eagle run`, `eagle rerun`)."""
    s.add_argument("--batch", metavar="N|P%", help="rolling run: hosts per batch (default: the playbook's batch)")
    s.add_argument("--max-fail", metavar="N|P%", help="hosts that may fail before no new batch starts")
    s.add_argument("--dry-run", action="store_true", help="render every step and show the plan; change nothing")
    s.add_argument("--yes", action="store_true", help="approve confirm steps (e.g. killing foreign GPU processes)")
    s.add_argument("--force", action="store_true", help="run relaunch or bench on a quarantined host (audited)")
    s.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    s.add_argument("-v", "--verbose", action="store_true", help="stream step output to stderr")


def err(msg: str) -> None:
    """One line on stderr, with the built-in patterns and the environment's secrets redacted
    (and whatever a host put in it shown, not obeyed, by the terminal)."""
    from eaglebot.engine.redact import Redactor
    from eaglebot.frontends.cli.safe import terminal_safe

    from eaglebot.frontends.format import local_times

    print(f"eagle: {terminal_safe(local_times(Redactor().text(msg)))}", file=sys.stderr)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


def open_store(cfg: Settings) -> Store:
    from eaglebot.store import open_store

    return open_store(cfg.audit_store, key_file=cfg.audit_key_path)


def store_only(args: argparse.Namespace) -> Store:
    """The store, for a command that needs nothing else of the config (no pydantic)."""
    from eaglebot.configfile import audit_db_path, audit_key_path
    from eaglebot.store import Store

    db = audit_db_path(getattr(args, "config", None))
    known, key = audit_key_path(getattr(args, "config", None)) if db is not None else (False, None)
    return Store(db, key_file=key) if db is not None and known else open_store(settings(args))


def no_store_text(args: argparse.Namespace) -> str | None:
    """None when the audit DB the config names exists; else one sentence saying where the
    config and the DB were looked for (a read never creates a DB in whatever folder it ran)."""
    from eaglebot.configfile import audit_db_path, config_path, where_looked

    db = audit_db_path(getattr(args, "config", None))
    if db is None:
        target = settings(args).audit_store
        if not isinstance(target, Path):
            from eaglebot.store import redact_url
            from eaglebot.store.factory import store_exists

            # a PostgreSQL database: asked without DDL (the server says why when it cannot answer)
            return None if store_exists(target) else (f"no audit store in {redact_url(target)} yet (it has no "
                                                      f"tables); `eagle run` records runs there")
        db = target
    if db.exists():
        return None
    p, _ = config_path(getattr(args, "config", None))
    config = f"the config is {p.absolute()}" if p.exists() else where_looked()
    return f"no audit DB at {db} ({config}); `eagle run` records runs there"


def read_store(args: argparse.Namespace, what: str = "") -> Store:
    """The store for a command that needs what it holds (a run, an incident, a sweep):
    UsageError (one line, after `what` it looked for) when there is none, and nothing created."""
    missing = no_store_text(args)
    if missing:
        raise UsageError(f"{what}: {missing}" if what else missing)
    return store_only(args)


@contextlib.contextmanager
def view_store(args: argparse.Namespace) -> Iterator[Store]:
    """The store for a command that shows what it holds, and of none an empty view (`status`,
    `fleet`, `schedule list`, `prune --dry-run`): with no store yet, an empty one of its own in a
    temporary folder, gone after (no read-only command creates a store), so the view is the
    one an empty store gives, word for word."""
    if no_store_text(args) is None:
        store = store_only(args)
        try:
            yield store
        finally:
            store.close()
        return
    with empty_store() as store:
        yield store


@contextlib.contextmanager
def empty_store() -> Iterator[Store]:
    """An empty audit store in a temporary folder, removed on exit (no key: nothing is sealed)."""
    import tempfile

    from eaglebot.store import Store

    with tempfile.TemporaryDirectory(prefix="eagle-empty-") as d:
        store = Store(Path(d) / "empty.db")
        try:
            yield store
        finally:
            store.close()


def known_run(store: RunsFace, run_id: int) -> RunRow:
    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"no run #{run_id}")
    return run


def run_interruptible(main: Coroutine[Any, Any, T], what: str) -> T:
    """`asyncio.run(main)` for an experiment (tune, sweep, bisect): SIGINT or SIGTERM (a service
    restart) cancels `main`, so its cleanup (`what`: restoring the server) runs before the exit;
    a second signal cancels the cleanup too. Interrupted, it exits 128 + the signal's number."""
    import asyncio
    import signal

    async def go() -> T:
        task = asyncio.ensure_future(main)
        loop = asyncio.get_running_loop()
        got: list[signal.Signals] = []

        def on_signal(sig: signal.Signals) -> None:
            got.append(sig)
            if len(got) == 1:
                print(f"{sig.name}: {what}; interrupt again to abort", file=sys.stderr, flush=True)
            task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            return await task
        except asyncio.CancelledError:
            if not got:
                raise
            err(f"interrupted by {got[0].name}")
            raise SystemExit(128 + got[0].value) from None
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    return asyncio.run(go())
