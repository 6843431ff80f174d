"""`eagle hosts pin HOST [--yes]`: show the key a host presents and write it to its known_hosts.

The key is read through the host's jump host, as a run connects. On a terminal it asks before
writing (`--yes` skips the question; without a terminal `--yes` is required). A host whose
known_hosts already holds another key is refused: its key changed, or someone is in the way.
Exit 0 pinned (or already pinned), 1 refused or not reachable, 2 bad usage.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from eaglebot.errors import EagleError, TransportError, UsageError
from eaglebot.frontends.cli.common import err, no_store_text, open_store
from eaglebot.frontends.cli.common import settings as _settings


def _audit(args: argparse.Namespace, kind: str, message: str) -> None:
    """An events row, when the audit DB exists (pinning never creates a DB as whoever ran it)."""
    if no_store_text(args) is not None:
        return
    store = open_store(_settings(args))
    try:
        store.add_event(None, kind, message)
    finally:
        store.close()


async def _scan(args: argparse.Namespace, name: str) -> Any:
    from eaglebot.transport import TransportPool
    from eaglebot.transport.hostkeys import scan
    from eaglebot.transport.ssh import SSHTransport

    settings = _settings(args)
    cfg = settings.hosts[name]
    pool = TransportPool(settings)
    try:
        tunnel = pool.get(cfg.jump) if cfg.jump else None
        return await scan(cfg, tunnel if isinstance(tunnel, SSHTransport) else None)
    finally:
        await pool.close()


def cmd_pin(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.common import whoami
    from eaglebot.transport.hostkeys import host_pattern, known_hosts_path, pin, pinned_state

    settings = _settings(args)
    name = args.name
    if name not in settings.hosts:
        raise UsageError(f"unknown host {name!r} (known: {', '.join(settings.hosts)})")
    cfg = settings.hosts[name]
    if cfg.transport != "ssh":
        raise UsageError(f"host {name} uses the {cfg.transport} transport: it has no host key to pin")
    if not args.yes and not sys.stdin.isatty():
        raise UsageError(f"no terminal to confirm on: check the fingerprint, then pass --yes to pin {name}'s key")
    path = known_hosts_path(cfg)
    try:
        import asyncio  # loads only when pinning (`eagle --help` stays light: tests/test_startup.py)

        key = asyncio.run(_scan(args, name))
    except TransportError as e:
        err(f"host {name}: {e}")
        return 1
    where = f"{cfg.address}:{cfg.port}" + (f" via {cfg.jump}" if cfg.jump else "")
    print(f"host {name} ({where}) presents {key.describe()}")
    state = pinned_state(cfg, key)
    if state == "same":
        print(f"already pinned in {path} as {host_pattern(cfg)}; nothing changed")
        return 0
    if state == "different":
        _audit(args, "host_key_refused", f"{whoami()}: {name} presents {key.describe()}, {path} pins another key")
        err(f"REFUSED: {path} already pins a DIFFERENT key for {host_pattern(cfg)}, and host {name} now presents "
            f"{key.fingerprint}. Either the host was reinstalled or someone is intercepting the connection "
            f"(man in the middle). Check the key on the host's console (`ssh-keygen -lf "
            f"/etc/ssh/ssh_host_*_key.pub`); if it is right, "
            f"remove the old line (`ssh-keygen -R '{host_pattern(cfg)}' -f {path}`) and pin again. Nothing was changed.")
        return 1
    if not args.yes:
        answer = input(f"pin this key for {host_pattern(cfg)} in {path}? Compare it with `ssh-keygen -lf` on the "
                       f"host first. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("not pinned; nothing changed")
            return 1
    try:
        written = pin(cfg, key)
    except OSError as e:
        raise EagleError(f"cannot write {path}: {e.strerror or e}") from None
    _audit(args, "host_key_pinned", f"{whoami()}: {name} ({host_pattern(cfg)}) {key.describe()} in {written}")
    print(f"pinned: {host_pattern(cfg)} {key.algorithm} appended to {written}")
    return 0


def register(hosts: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """`eagle hosts pin` under `eagle hosts` (which still lists the hosts on its own)."""
    sub = hosts.add_subparsers(dest="hosts_cmd", metavar="pin")
    p = sub.add_parser("pin", parents=[common], help="show a host's SSH key fingerprint and pin it in its known_hosts")
    p.add_argument("name", metavar="HOST", help="a host name from eagle.yaml")
    p.add_argument("--yes", action="store_true", help="pin without asking (check the fingerprint first)")
    p.set_defaults(func=cmd_pin)
