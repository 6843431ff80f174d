"""`eagle hosts pin HOSTS [--yes]`: show the keys hosts present and write them to their known_hosts.

HOSTS is what `-H` takes: names, comma lists, ranges (`gpu-[02:04]`), groups and patterns. Every
key is read (concurrently, through each host's jump host, as a run connects) and its fingerprint
printed, with or without a terminal; then one question pins them all (`--yes` skips it; without
a terminal `--yes` is required). A host whose known_hosts already holds another key is refused:
its key changed, or someone is in the way. Each key pinned is an audit event with its fingerprint.
Exit 0 every host pinned (or already pinned), 1 one refused or not reachable, 2 bad usage.
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from eaglebot.errors import EagleError, TransportError, UsageError
from eaglebot.frontends.cli.common import err, no_store_text, open_store
from eaglebot.frontends.cli.common import settings as _settings

if TYPE_CHECKING:    # `eagle --help` builds this parser: the settings models load only when a pin runs
    from eaglebot.config import HostConfig, Settings

SCANS_AT_ONCE = 32   # handshakes in flight: a rack of 128 hosts is read in a few connect times


def _audit(args: argparse.Namespace, events: list[tuple[str, str]]) -> None:
    """events rows, when the audit DB exists (pinning never creates a DB as whoever ran it)."""
    if not events or no_store_text(args) is not None:
        return
    store = open_store(_settings(args))
    try:
        for kind, message in events:
            store.add_event(None, kind, message)
    finally:
        store.close()


async def _scan_all(settings: Settings, names: list[str]) -> dict[str, Any]:
    """Host name -> its HostKey, or the TransportError that kept it from being read."""
    import asyncio

    from eaglebot.transport import TransportPool
    from eaglebot.transport.hostkeys import scan
    from eaglebot.transport.ssh import SSHTransport

    pool = TransportPool(settings)
    gate = asyncio.Semaphore(SCANS_AT_ONCE)

    async def one(name: str) -> Any:
        cfg = settings.hosts[name]
        async with gate:
            try:
                tunnel = pool.get(cfg.jump) if cfg.jump else None
                return await scan(cfg, tunnel if isinstance(tunnel, SSHTransport) else None)
            except TransportError as e:
                return e
    try:
        return dict(zip(names, await asyncio.gather(*(one(n) for n in names))))
    finally:
        await pool.close()


def _where(name: str, cfg: HostConfig) -> str:
    return f"{name} ({cfg.address}:{cfg.port}" + (f" via {cfg.jump})" if cfg.jump else ")")


def cmd_pin(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.common import whoami
    from eaglebot.transport.hostkeys import host_pattern, known_hosts_path, pin, pinned_state

    settings = _settings(args)
    names = settings.resolve_hosts(args.names)
    ssh = [n for n in names if settings.hosts[n].transport == "ssh"]
    if not ssh:
        raise UsageError(f"host {names[0]} uses the {settings.hosts[names[0]].transport} transport: it has no host "
                         f"key to pin" if len(names) == 1 else f"none of {', '.join(names)} uses SSH: no host key to pin")
    import asyncio  # loads only when pinning (`eagle --help` stays light: tests/test_startup.py)

    keys = asyncio.run(_scan_all(settings, ssh))
    me, failed, events = whoami(), 0, []
    todo: list[tuple[str, Any]] = []
    for name in ssh:
        cfg, key = settings.hosts[name], keys[name]
        if isinstance(key, TransportError):
            err(f"host {name}: {key}")
            failed += 1
            continue
        print(f"host {_where(name, cfg)} presents {key.describe()}")
        state = pinned_state(cfg, key)
        path = known_hosts_path(cfg)
        if state == "same":
            print(f"  already pinned in {path} as {host_pattern(cfg)}")
        elif state == "different":
            events.append(("host_key_refused", f"{me}: {name} presents {key.describe()}, {path} pins another key"))
            err(f"REFUSED: {path} already pins a DIFFERENT key for {host_pattern(cfg)}, and host {name} now presents "
                f"{key.fingerprint}. Either the host was reinstalled or someone is intercepting the connection "
                f"(man in the middle). Check the key on the host's console (`ssh-keygen -lf "
                f"/etc/ssh/ssh_host_*_key.pub`); if it is right, remove the old line (`ssh-keygen -R "
                f"'{host_pattern(cfg)}' -f {path}`) and pin again. Nothing was changed for {name}.")
            failed += 1
        else:
            todo.append((name, key))
    if todo and not args.yes:
        what = f"{todo[0][0]}'s key" if len(todo) == 1 else f"these {len(todo)} hosts' keys"
        if not sys.stdin.isatty():
            _audit(args, events)
            raise UsageError(f"no terminal to confirm on: check the fingerprint{'s' if len(todo) > 1 else ''} "
                             f"above, then pass --yes to pin {what}")
        answer = input(f"pin {what}? Compare with `ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on the host first. "
                       f"[y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            _audit(args, events)
            print("not pinned; nothing changed")
            return 1
    for name, key in todo:
        cfg = settings.hosts[name]
        if pinned_state(cfg, key) == "same":   # another name of the same address, pinned a moment ago
            print(f"{name}: already pinned as {host_pattern(cfg)}")
            continue
        try:
            written = pin(cfg, key)
        except OSError as e:
            _audit(args, events)
            raise EagleError(f"cannot write {known_hosts_path(cfg)}: {e.strerror or e}") from None
        events.append(("host_key_pinned", f"{me}: {name} ({host_pattern(cfg)}) {key.describe()} in {written}"))
        print(f"pinned: {name} {host_pattern(cfg)} {key.algorithm} appended to {written}")
    _audit(args, events)
    return 1 if failed else 0


def register(hosts: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """`eagle hosts pin` under `eagle hosts` (which still lists the hosts on its own)."""
    sub = hosts.add_subparsers(dest="hosts_cmd", metavar="pin")
    p = sub.add_parser("pin", parents=[common], help="show hosts' SSH key fingerprints and pin them in their known_hosts")
    p.add_argument("names", metavar="HOSTS", nargs="+", help="hosts as -H takes them: names, ranges (gpu-[02:04]), "
                                                              "groups, patterns")
    p.add_argument("--yes", action="store_true", help="pin without asking (check the fingerprints first)")
    p.set_defaults(func=cmd_pin)
