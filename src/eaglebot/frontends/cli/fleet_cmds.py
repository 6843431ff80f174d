"""`eagle fleet`, `eagle rerun RUN [--failed]` and `eagle watch RUN`: the health watch's table, a past run again (all its hosts, or the
ones that failed or were unreachable), and a running run followed from the store, wherever it
was started (Slack, a schedule, another terminal)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from eaglebot.errors import UsageError
from eaglebot.frontends.cli.common import add_run_options, err, known_run, print_json, read_store

if TYPE_CHECKING:  # (the engine loads only when a command runs: `eagle --help` stays light)
    from eaglebot.store.rows import RunRow

WATCH_POLL_S = 0.5
FLEET_XIDS = 200          # the watch's newest events read for `eagle fleet --json`'s `xids`
FLEET_CHECKS = 5000       # hosts whose last gpu.health step `eagle fleet` shows


def register(sub: "argparse._SubParsersAction[argparse.ArgumentParser]", common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("rerun", parents=[common], help="run a past run's playbook again with the same inputs")
    s.add_argument("run_id", type=int)
    s.add_argument("--failed", action="store_true", help="only the hosts that failed or were unreachable")
    add_run_options(s)
    s.set_defaults(func=cmd_rerun)

    s = sub.add_parser("fleet", parents=[common], help="health state per host and GPU (the health watch)")
    s.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    s.set_defaults(func=cmd_fleet)

    s = sub.add_parser("watch", parents=[common], help="follow a running run (started anywhere); exits with its code")
    s.add_argument("run_id", type=int)
    s.add_argument("--json", action="store_true", help="at the end, print the run as `eagle show --json` does")
    s.set_defaults(func=cmd_watch)


def cmd_fleet(args: argparse.Namespace) -> int:
    """The health watch's table: every watched host, and every host and GPU with a recorded state."""
    from eaglebot.frontends.cli.common import settings, view_store
    from eaglebot.frontends.fleet_text import fleet_checks, fleet_rows, fleet_text, fleet_xids

    cfg = settings(args)
    watched = cfg.resolve_hosts(cfg.health_watch.hosts) if cfg.health_watch else []
    with view_store(args) as store:
        rows = fleet_rows(store.health_states(), watched)
        checks = fleet_checks(store.newest_steps("gpu.health", limit=FLEET_CHECKS))
        xids = fleet_xids(store.health_events(limit=FLEET_XIDS)) if args.json else []
    if args.json:
        print_json({"hosts": rows, "xids": xids, "checks": checks, "watching": cfg.health_watch is not None})
    else:
        print(fleet_text(rows, checks, watching=cfg.health_watch is not None))
    return 0


def cmd_rerun(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.run_cmds import cmd_run
    from eaglebot.history.recap import failed_hosts, host_recap

    store = read_store(args, f"no run #{args.run_id}")
    run = known_run(store, args.run_id)
    hosts = list(run.get("hosts") or [])
    if args.failed:
        hosts = failed_hosts(host_recap(hosts, store.steps(args.run_id), store.warnings(args.run_id)))
        if not hosts:
            raise UsageError(f"run #{args.run_id} has no failed or unreachable host to run again")
    store.close()
    # the file it ran from while it is there (a playbook given by path has no name to find it by)
    source = run.get("source")
    args.playbook = source if source and Path(source).is_file() else run["playbook"]
    args.hosts, args.inputs, args.extra = hosts, dict(run.get("inputs") or {}), []
    args.rerun_of = args.run_id
    print(f"run #{args.run_id} again: {run['playbook']} on {', '.join(hosts[:8])}"
          f"{f' … ({len(hosts)} hosts)' if len(hosts) > 8 else ''}", file=sys.stderr)
    return cmd_run(args)


def cmd_watch(args: argparse.Namespace) -> int:
    """The lines `eagle run` prints (its TerminalObserver, fed from the store's rows as each
    step ends), until the run ends; then its result block, and its exit code."""
    import asyncio

    from eaglebot.engine.records import RunOutcome, StepRecord
    from eaglebot.frontends.cli.terminal import TerminalObserver, result_text, use_colour
    from eaglebot.sdk import StepResult
    from eaglebot.history.view import RunView

    store = read_store(args, f"no run #{args.run_id}")
    try:
        run = known_run(store, args.run_id)
        hosts = list(run.get("hosts") or [])
        obs = TerminalObserver()
        obs.start(args.run_id, run["playbook"], hosts, _step_count(args, run), bool(run.get("dry_run")),
                  f", started by {run.get('actor')} via {run.get('origin')}")
        seen: set[int] = set()
        while True:
            run = known_run(store, args.run_id)
            steps = store.steps(args.run_id)
            for s in steps:
                if s["id"] in seen or s["status"] == "running":
                    continue
                seen.add(s["id"])
                rec = StepRecord(s["host"], s["idx"], s.get("section") or "steps", s["name"], s["skill"], s["status"],
                                 s.get("summary") or "", s.get("duration_ms") or 0, s.get("attempts") or 0)
                # the observer reads only the result's warnings: the store's are in the recap
                asyncio.run(obs.step_finished(args.run_id, rec, StepResult.skipped()))
            if run["status"] != "running":
                break
            # each poll reads every step row: a fleet's run is polled less often
            time.sleep(WATCH_POLL_S * (1 + len(steps) // 500))
            store.recover()  # a run whose process died while watched ends `interrupted`
        view = RunView.load(store, args.run_id)
        run = known_run(store, args.run_id)
        if view is not None:
            untouched = [h["name"] for h in view.recap() if h["status"] == "untouched"]
            asyncio.run(obs.run_finished(RunOutcome(args.run_id, run["playbook"], hosts, run["status"],
                                                    int(run.get("exit_code") or 0), untouched=untouched)))
    finally:
        store.close()
    if view is not None and args.json:
        print_json(view.as_json())
    elif view is not None:
        print(result_text(view, colour=use_colour(sys.stdout)))
    if run.get("error") and run["status"] != "succeeded":
        err(str(run["error"]))
    code = run.get("exit_code")
    return int(code) if code is not None else (0 if run["status"] == "succeeded" else 1)


def _step_count(args: argparse.Namespace, run: "RunRow") -> int | None:
    """Steps per host, from the playbook the run ran (its file, else its name); None when it
    cannot be read (the lines then say `?`)."""
    from eaglebot.engine.playbook import find_playbook
    from eaglebot.frontends.cli.common import settings

    try:
        source = run.get("source")
        pb = find_playbook(source if source and Path(source).is_file() else run["playbook"],
                           settings(args).playbooks_path)
    except Exception:  # a playbook since removed or broken: the count is only a nicety
        return None
    return len(pb.steps) + len(pb.always)
