"""The commands that read the audit store's past: history, show (and a run's whole output),
baseline, trend and prune."""
from __future__ import annotations

import argparse
import re
import sys
from datetime import timedelta
from typing import TYPE_CHECKING

from eaglebot.errors import UsageError
from eaglebot.frontends.cli.common import err, no_store_text, print_json, read_store, store_only
from eaglebot.frontends.cli.common import settings as _settings
from eaglebot.frontends.cli.common import whoami as _whoami

if TYPE_CHECKING:
    from eaglebot.store.protocol import RunsFace, StepsFace


def cmd_history(args: argparse.Namespace) -> int:
    from eaglebot.frontends.format import history_text
    from eaglebot.history.view import load_history

    missing = no_store_text(args)
    if missing:
        if args.json:
            print_json([])
        else:
            print(f"no runs yet: {missing}")
        return 0
    store = store_only(args)
    since = None
    if args.since:
        from datetime import datetime, timezone

        since = (datetime.now(timezone.utc) - parse_age(args.since, "--since")).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
    rows = load_history(store, playbook=args.playbook, host=args.host, limit=args.limit, status=args.status,
                        since=since, all_runs=args.all)
    if args.json:
        print_json([r.as_json() for r in rows])
        return 0
    print(history_text(rows, local=True) if rows else _nothing_matched(store, args))
    from eaglebot.history.incidents import open_text

    if (open_ := open_text(store, playbook=args.playbook, host=args.host)):
        print("\n" + open_)
    return 0


def _nothing_matched(store: RunsFace, args: argparse.Namespace) -> str:
    """What an empty history filtered out: `no failed runs of bench on gpu-01 in the last 7d
    (3 runs in all)`."""
    total = store.run_count()
    if not total:
        return "no runs yet (see `eagle playbooks`)"
    what = " ".join(w for w in (args.status, "runs") if w)
    if args.playbook:
        what += f" of {args.playbook}"
    if args.host:
        what += f" on {args.host}"
    if args.since:
        what += f" in the last {args.since}"
    return f"no {what} ({total} run{'s' if total != 1 else ''} in all)"


def run_ref(word: str) -> int | str:
    if word == "last":
        return word
    try:
        return int(word.lstrip("#"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{word!r} is not a run number (or `last`)") from None


def cmd_show(args: argparse.Namespace) -> int:
    from eaglebot.frontends.format import show_text
    from eaglebot.history.view import RunView

    store = read_store(args, "no runs yet" if args.run_id == "last" else f"no run #{args.run_id}")
    run_id = store.last_run_id() if args.run_id == "last" else args.run_id
    if run_id is None:
        raise UsageError("no runs yet (see `eagle playbooks`)")
    view = RunView.load(store, run_id)
    if view is None:
        raise UsageError(f"no run #{run_id}")
    if args.output and args.json:
        raise UsageError("--output writes the raw output; it does not combine with --json")
    if args.output:
        _write_outputs(store, run_id)
    elif args.json:
        print_json(view.as_json())
    else:
        from eaglebot.frontends.cli.safe import terminal_safe
        from eaglebot.frontends.recap_text import recap_block

        print(terminal_safe(show_text(view) + recap_block(view)))
    for problem in store.run_audit_problems(run_id):  # the rows shown were edited outside eaglebot
        err(f"audit: run #{run_id}: {problem} (`eagle audit verify` checks the whole trail)")
    return 0


def _write_outputs(store: StepsFace, run_id: int) -> None:
    """Every step's whole output, byte for byte, to stdout (in the order the steps ran), each
    after a header line on stderr; the file is checked against the SHA-256 in its row first."""
    from eaglebot.engine.output import check_output_file, printable, read_chunks

    out = sys.stdout.buffer
    for s in store.steps(run_id):
        what = f"step {s['idx'] + 1} of run #{run_id} ({s['host']}: {printable(s['name'] or '')})"
        path, nbytes = s.get("output_file"), s.get("output_bytes")
        if path is None:
            if s.get("output") and (nbytes is None or nbytes > 0):
                # Still running, from before whole outputs were kept, or the file could not be
                # written (the step's warning says why): what the DB holds.
                why = ("still running" if s["status"] == "running" else
                       "recorded before whole outputs were kept" if nbytes is None else
                       "its output file could not be written")
                print(f"== {what}: {why}; the text kept in the audit DB follows", file=sys.stderr, flush=True)
                out.write(str(s["output"]).encode())
                out.flush()
            else:
                print(f"== {what}: no output", file=sys.stderr, flush=True)
            continue
        check_output_file(path, s.get("output_sha256"), nbytes, what)
        print(f"== {what}: {nbytes} bytes", file=sys.stderr, flush=True)
        for chunk in read_chunks(path):
            out.write(chunk)
        out.flush()


def cmd_baseline(args: argparse.Namespace) -> int:
    from eaglebot.history.recorder import set_baseline

    store = read_store(args, f"no run #{args.run_id}")
    try:
        print(set_baseline(store, args.run_id, _whoami()))
    finally:
        store.close()
    return 0


_DURATION = re.compile(r"^(\d+)(d|h|w|min|m)$")


def parse_age(s: str, option: str = "--older-than") -> timedelta:
    m = _DURATION.match(s.strip())
    if not m:
        raise UsageError(f"{option} expects a number and a unit d, h, w or min (e.g. 90d), got {s!r}")
    n, unit = int(m.group(1)), m.group(2)
    if unit == "m":  # months or minutes? Guessing wrong deletes history: refuse.
        raise UsageError(f"{option} {s}: 'm' is ambiguous (months or minutes?): write e.g. 90d or 30min")
    age = {"d": timedelta(days=min(n, 10**7)), "h": timedelta(hours=min(n, 10**9)),
           "w": timedelta(weeks=min(n, 10**6)), "min": timedelta(minutes=min(n, 10**10))}[unit]
    if age > timedelta(days=100 * 366):
        raise UsageError(f"{option} {s}: at most 100 years back (e.g. 36500d)")
    return age


def cmd_prune(args: argparse.Namespace) -> int:
    age = parse_age(args.older_than)
    missing = no_store_text(args)
    if missing:   # nothing to delete, and no store made to say so
        print(f"{'would prune' if args.dry_run else 'pruned'} 0 runs: {missing}")
        return 0
    store = store_only(args)
    count = store.prune_count(age)
    if args.dry_run:
        print(f"would prune {count} runs older than {args.older_than} (baselines kept); nothing was deleted")
        return 0
    if count > PRUNE_CONFIRM_OVER and sys.stdin.isatty() and not args.yes:
        answer = input(f"delete {count} runs older than {args.older_than} and their steps, metrics and logs? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing was deleted")
            return 1
    n = store.prune(age)
    print(f"pruned {n} runs older than {args.older_than} (baselines kept)")
    return 0


PRUNE_CONFIRM_OVER = 100   # a terminal asks before deleting more runs than this


def cmd_trend(args: argparse.Namespace) -> int:
    from eaglebot.frontends.plot import default_out, plot_trend

    settings = _settings(args)
    store = read_store(args)
    try:
        path = plot_trend(store, args.playbook, args.host, args.metric,
                          args.out or default_out(args.playbook, args.host, args.metric),
                          limit=args.limit, cfg=settings.regression)
    finally:
        store.close()
    print(path)
    return 0
