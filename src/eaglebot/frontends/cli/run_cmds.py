"""`eagle run` and the commands that act on runs as they happen: cancel, status, logs, and
the chat front end on a terminal (`eagle chat`, `eagle console`)."""
from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from typing import TYPE_CHECKING, Sequence

from eaglebot.errors import EagleError, UsageError
from eaglebot.frontends.cli.common import err, known_run, print_json, read_store, view_store
from eaglebot.frontends.cli.common import settings as _settings
from eaglebot.frontends.cli.common import whoami as _whoami

if TYPE_CHECKING:
    from eaglebot.config import Settings
    from eaglebot.engine.runner import Observer


_KV = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def parse_extra_vars(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in pairs or []:
        m = _KV.match(p)
        if not m:
            from eaglebot.engine.output import printable  # (only here: `eagle --help` stays light)

            if "=" in p:
                raise UsageError(f"input '{printable(p.split('=', 1)[0])[:64]}': input names are plain "
                                 f"identifiers (letters, digits, _)")
            raise UsageError(f"-e expects key=value, got {printable(p)[:200]!r}")
        out[m.group(1)] = m.group(2)
    return out


async def _run_async(args: argparse.Namespace, settings: Settings, observer: Observer | None = None) -> int:
    import asyncio
    import signal

    from eaglebot.engine.runner import RunRequest
    from eaglebot.frontends.cli.terminal import TerminalObserver, result_text, terminal_approver, use_colour
    from eaglebot.frontends.services import Services
    from eaglebot.history.view import RunView

    try:  # an SSH host in the run: load asyncssh in the background meanwhile
        if any(settings.hosts[h].transport == "ssh" for h in settings.resolve_hosts(args.hosts)):
            from eaglebot.transport.ssh import preload
            preload()
    except UsageError:
        pass  # the engine says which host is unknown
    svc = await Services.open(settings)
    try:
        req = RunRequest(playbook=args.playbook, hosts=args.hosts, inputs={},
                         origin="cli", dry_run=args.dry_run, assume_yes=args.yes,
                         batch=getattr(args, "batch", None), max_fail=getattr(args, "max_fail", None),
                         rerun_of=getattr(args, "rerun_of", None), force=getattr(args, "force", False),
                         actor=os.environ.get("USER") or os.environ.get("LOGNAME") or _whoami())
        approver = terminal_approver if (sys.stdin.isatty() and not args.yes) else None
        observer = observer or TerminalObserver(verbose=args.verbose)
        try:
            try:
                given = getattr(args, "inputs", None)  # `eagle rerun`: the run's own, as stored
                req.inputs = dict(given) if given is not None else parse_extra_vars(args.extra)
            except UsageError as e:
                await svc.engine.record_rejected(req, e)
                raise
            run_id, task = await svc.engine.start(req, observer, approver)
        except EagleError as e:
            if args.json:
                print_json({"error": str(e), "exit_code": e.exit_code})
            err(str(e))
            return e.exit_code
        loop = asyncio.get_running_loop()
        interrupts = {"n": 0}

        def on_signal() -> None:
            interrupts["n"] += 1
            if interrupts["n"] == 1:
                print("cancelling (always-steps still run); interrupt again to abort", file=sys.stderr)
                svc.engine.cancel(run_id)
            else:
                task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_signal)
            except (NotImplementedError, RuntimeError):
                pass
        try:
            outcome = await task
        except asyncio.CancelledError:
            err(f"run #{run_id} aborted")
            return 1
        # The audit store is the source of truth: the result is read back from it, so
        # `eagle run --json` is exactly what `eagle show --json` prints for this run later.
        view = await svc.store.call(lambda s: RunView.load(s, run_id))
        if view is not None and args.json:
            print_json(view.as_json())
        elif view is not None:
            # The error goes to stderr below, once; the result block does not repeat it.
            print(result_text(view, outcome.plan, with_error=not outcome.error,
                              colour=use_colour(sys.stdout)))
        if outcome.status in ("failed", "unreachable") and outcome.error:
            err(outcome.error)
        return outcome.exit_code
    finally:
        await svc.close()


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    settings = _settings(args)
    return asyncio.run(_run_async(args, settings))


def cmd_rollback(args: argparse.Namespace) -> int:
    """`eagle rollback HOST`: the shipped `rollback` playbook on that one host (as `/eagle rollback HOST`)."""
    args.playbook, args.hosts = "rollback", [args.host]
    return cmd_run(args)


def cmd_cancel(args: argparse.Namespace) -> int:
    store = read_store(args, f"no run #{args.run_id}")
    run = known_run(store, args.run_id)
    if not store.request_cancel(args.run_id):
        err(f"run #{args.run_id} is not running ({run['status']})")
        return 2
    print(f"cancel requested for run #{args.run_id}; its always-steps still run")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    if getattr(args, "json", False):
        from eaglebot.frontends.replicas_text import LEADER, leader_of, replica_rows

        with view_store(args) as store:
            lease = store.lease_holder(LEADER)
            running = [{"run_id": r["id"], "playbook": r["playbook"], "hosts": r["hosts"], "actor": r["actor"],
                        "origin": r["origin"], "started_at": r["started_at"]} for r in store.running_runs()]
            locks = [{"host": lk["host"], "run_id": lk["run_id"], "reason": lk["reason"]} for lk in store.locks()]
            replicas = replica_rows(store.replicas(), lease)
        print_json({"running": running, "locks": locks, "replicas": replicas, "leader": leader_of(lease)})
        return 0
    from eaglebot.frontends.cli.chat import chat_main

    return chat_main(_settings(args), "status")


def cmd_logs(args: argparse.Namespace) -> int:
    if not 1 <= args.lines <= 5000:
        raise UsageError(f"--lines {args.lines}: give 1 to 5000")
    if not args.follow:
        from eaglebot.frontends.cli.chat import chat_main

        return chat_main(_settings(args), f"logs {shlex.quote(args.host)} {args.lines}")
    import asyncio

    from eaglebot.frontends.cli.terminal import LogFollower

    # the server-logs playbook in follow mode: an audited read-only run, the log on stdout as it
    # grows, the run's own lines on stderr; Ctrl-C cancels the run and ends the command (exit 0)
    run = argparse.Namespace(playbook="server-logs", hosts=[args.host], extra=[f"lines={args.lines}", "follow=true"],
                             dry_run=False, yes=True, verbose=False, json=False)
    follower = LogFollower()
    code = asyncio.run(_run_async(run, _settings(args), follower))
    return 0 if follower.stopped else code


def cmd_chat(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.chat import chat_main

    return chat_main(_settings(args), args.text)


def cmd_console(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.chat import console_main

    return console_main(_settings(args))
