"""The `eagle` command: parses arguments and calls the engine; nothing more.

Exit codes: 0 success, 1 the run failed, 2 bad usage / invalid playbook / invalid input /
unknown host / busy host, 3 completed with a regression flagged.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Sequence

from eaglebot import __version__
from eaglebot.errors import EagleError, UsageError
from eaglebot.frontends.cli.common import settings as _settings
from eaglebot.frontends.cli.common import whoami as _whoami

# Start-up (issue 13): `eagle --help` loads argparse and nothing else; each command imports
# what it needs (pydantic only with the config, sqlite-utils only with the store, the engine
# only to run). Import heavy modules inside the function that needs them.
if TYPE_CHECKING:
    from eaglebot.config import Settings
    from eaglebot.store import Store
    from eaglebot.store.rows import RunRow


def _err(msg: str) -> None:
    from eaglebot.engine.redact import Redactor

    print(f"eagle: {Redactor().text(msg)}", file=sys.stderr)  # built-in patterns + env secrets


# -- helpers ---------------------------------------------------------------------------

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


def _open_store(settings: Settings) -> Store:
    from eaglebot.store import Store

    return Store(settings.db_path, key_file=settings.audit_key_path)


def _store_only(args: argparse.Namespace) -> Store:
    """The store, for a command that needs nothing else of the config (no pydantic)."""
    from eaglebot.configfile import audit_db_path, audit_key_path
    from eaglebot.store import Store

    db = audit_db_path(getattr(args, "config", None))
    known, key = audit_key_path(getattr(args, "config", None)) if db is not None else (False, None)
    return Store(db, key_file=key) if db is not None and known else _open_store(_settings(args))


def _known_run(store: Store, run_id: int) -> RunRow:
    run = store.get_run(run_id)
    if run is None:
        raise UsageError(f"no run #{run_id}")
    return run


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


# -- commands --------------------------------------------------------------------------

async def _run_async(args: argparse.Namespace, settings: Settings) -> int:
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
                         actor=os.environ.get("USER") or os.environ.get("LOGNAME") or _whoami())
        approver = terminal_approver if (sys.stdin.isatty() and not args.yes) else None
        observer = TerminalObserver(verbose=args.verbose)
        try:
            try:
                req.inputs = parse_extra_vars(args.extra)
            except UsageError as e:
                await svc.engine.record_rejected(req, e)
                raise
            run_id, task = await svc.engine.start(req, observer, approver)
        except EagleError as e:
            if args.json:
                _print_json({"error": str(e), "exit_code": e.exit_code})
            _err(str(e))
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
            _err(f"run #{run_id} aborted")
            return 1
        # The audit store is the source of truth: the result is read back from it, so
        # `eagle run --json` is exactly what `eagle show --json` prints for this run later.
        view = await svc.store.call(lambda s: RunView.load(s, run_id))
        if view is not None and args.json:
            _print_json(view.as_json())
        elif view is not None:
            # The error goes to stderr below, once; the result block does not repeat it.
            print(result_text(view, outcome.plan, with_error=not outcome.error,
                              colour=use_colour(sys.stdout)))
        if outcome.status == "failed" and outcome.error:
            _err(outcome.error)
        return outcome.exit_code
    finally:
        await svc.close()


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    settings = _settings(args)
    return asyncio.run(_run_async(args, settings))


def cmd_history(args: argparse.Namespace) -> int:
    from eaglebot.frontends.format import history_text
    from eaglebot.history.view import load_history

    store = _store_only(args)
    since = None
    if args.since:
        from datetime import datetime, timezone

        since = (datetime.now(timezone.utc) - parse_age(args.since, "--since")).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
    rows = load_history(store, playbook=args.playbook, host=args.host, limit=args.limit, status=args.status,
                        since=since)
    if args.json:
        _print_json([r.as_json() for r in rows])
        return 0
    print(history_text(rows, local=True))
    from eaglebot.history.incidents import open_text

    if (open_ := open_text(store, playbook=args.playbook, host=args.host)):
        print("\n" + open_)
    return 0


def _run_ref(word: str) -> int | str:
    if word == "last":
        return word
    try:
        return int(word.lstrip("#"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{word!r} is not a run number (or `last`)") from None


def cmd_show(args: argparse.Namespace) -> int:
    from eaglebot.frontends.format import show_text
    from eaglebot.history.view import RunView

    store = _store_only(args)
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
        _print_json(view.as_json())
    else:
        print(show_text(view))
    for problem in store.run_audit_problems(run_id):  # the rows shown were edited outside eaglebot
        _err(f"audit: run #{run_id}: {problem} (`eagle audit verify` checks the whole trail)")
    return 0


def _write_outputs(store: Store, run_id: int) -> None:
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


def cmd_lint(args: argparse.Namespace) -> int:
    from eaglebot.engine.playbook import load_playbook, playbook_files
    from eaglebot.engine.registry import SkillRegistry

    settings = _settings(args)
    registry = SkillRegistry.from_settings(settings)
    files = args.files or [str(p) for p in playbook_files(settings.playbooks_path).values()]
    bad = 0
    for f in files:
        try:
            pb = load_playbook(f, registry)
        except UsageError as e:
            print(str(e), file=sys.stderr)
            bad += 1
            continue
        print(f"ok {f} ({pb.name}: {len(pb.steps)} step{'' if len(pb.steps) == 1 else 's'})")
    if not files:
        print("no playbooks found")
    if not args.files:
        from eaglebot.engine.schedules import check_schedules

        for problem in check_schedules(settings, registry):
            print(str(problem), file=sys.stderr)
            bad += 1
    return 2 if bad else 0


def cmd_playbooks(args: argparse.Namespace) -> int:
    from eaglebot.engine.playbook import load_playbook, playbook_files
    from eaglebot.engine.registry import SkillRegistry
    from eaglebot.frontends.format import describe_inputs

    settings = _settings(args)
    registry = SkillRegistry.from_settings(settings)
    listing: list[dict[str, Any]] = []
    for name, path in playbook_files(settings.playbooks_path).items():
        try:
            pb = load_playbook(path, registry)
        except UsageError as e:
            listing.append({"name": name, "path": str(path), "error": str(e)})
            continue
        listing.append({"name": name, "path": str(path), "description": pb.description,
                        "inputs": {k: v.model_dump(exclude_none=True) for k, v in pb.inputs.items()},
                        "input_help": describe_inputs(pb), "examples": pb.examples})
    if getattr(args, "json", False):
        _print_json(listing)
        return 0
    for p in listing:
        if "error" in p:
            print(f"{p['name']}: INVALID: {p['error']}")
            continue
        print(f"{p['name']}: {p['description']}")
        for line in p["input_help"]:
            print(f"    {line}")
        for ex in p["examples"]:
            print(f"    e.g. {ex}")
    return 0


def cmd_skills(args: argparse.Namespace) -> int:
    from eaglebot.engine.registry import SkillRegistry

    registry = SkillRegistry.from_settings(_settings(args))
    from dataclasses import asdict

    from eaglebot.engine.params_doc import params_doc

    docs = {name: params_doc(registry.get_skill(name).Params) for name in registry}
    listing = [{"name": name, "summary": registry.summary(name), "source": registry.source(name),
                "params": [asdict(p) for p in docs[name]]} for name in registry]
    if getattr(args, "json", False):
        _print_json(listing)
        return 0
    for name in registry:
        print(f"{name}: {registry.summary(name)}  [{registry.source(name)}]")
        for p in docs[name]:
            allowed = f"; {p.allowed}" if p.allowed else ""
            print(f"    {p.name}: {p.type} ({p.default}{allowed})")
    return 0


def cmd_hosts(args: argparse.Namespace) -> int:
    from eaglebot.frontends.format import table

    settings = _settings(args)
    rows: list[dict[str, Any]] = []
    for name, h in settings.hosts.items():
        groups = [g for g, members in settings.groups.items() if name in members]
        where = "this machine" if h.transport == "local" else f"{h.user + '@' if h.user else ''}{h.address}:{h.port}"
        rows.append({"name": name, "transport": h.transport, "address": where, "groups": groups,
                     "jump": h.jump, "vars": h.vars})
    if getattr(args, "json", False):
        _print_json(rows)
        return 0
    print(table(["host", "transport", "address", "groups", "jump"],
                [[r["name"], r["transport"], r["address"], ",".join(r["groups"]) or "-", r["jump"] or "-"]
                 for r in rows]))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    store = _store_only(args)
    run = _known_run(store, args.run_id)
    if not store.request_cancel(args.run_id):
        _err(f"run #{args.run_id} is not running ({run['status']})")
        return 2
    print(f"cancel requested for run #{args.run_id}; its always-steps still run")
    return 0


def cmd_baseline(args: argparse.Namespace) -> int:
    from eaglebot.history.regress import set_baseline

    settings = _settings(args)
    store = _open_store(settings)
    print(set_baseline(store, args.run_id, _whoami()))
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
    settings = _settings(args)
    age = parse_age(args.older_than)
    store = _open_store(settings)
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


def cmd_status(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.chat import chat_main

    return chat_main(_settings(args), "status")


def cmd_logs(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.chat import chat_main

    return chat_main(_settings(args), f"logs {shlex.quote(args.host)}")


def cmd_chat(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.chat import chat_main

    return chat_main(_settings(args), args.text)


def cmd_console(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.chat import console_main

    return console_main(_settings(args))


def cmd_serve(args: argparse.Namespace) -> int:
    from eaglebot.frontends.serve import serve_main  # Slack and the scheduler load only here

    return serve_main(_settings(args), http_port=args.http, host=args.host)


def cmd_doctor(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.doctor import doctor_main

    return doctor_main(_settings(args))


def cmd_schedule(args: argparse.Namespace) -> int:
    from eaglebot.frontends.scheduler import schedule_list_main

    return schedule_list_main(_settings(args), as_json=args.json)


def cmd_schedule_pause(args: argparse.Namespace) -> int:
    """`eagle schedule pause|resume NAME`: `/eagle schedule pause|resume NAME` on the terminal
    (the same row, event and checks); a running `eagle serve` reads it when the schedule fires."""
    from eaglebot.frontends.cli.chat import chat_main

    return chat_main(_settings(args), f"schedule {args.schedule_cmd} {shlex.quote(args.name)}")


def cmd_trend(args: argparse.Namespace) -> int:
    from eaglebot.frontends.plot import default_out, plot_trend

    settings = _settings(args)
    store = _open_store(settings)
    try:
        path = plot_trend(store, args.playbook, args.host, args.metric,
                          args.out or default_out(args.playbook, args.host, args.metric),
                          limit=args.limit, cfg=settings.regression)
    finally:
        store.close()
    print(path)
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.completion import completion_main, names

    if args.list:
        print("\n".join(names(_settings(args), args.list)))
        return 0
    if not args.shell:
        raise UsageError("completion needs a shell: eagle completion bash|zsh")
    return completion_main(build_parser(), args.shell)


def cmd_demo(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.demo import demo_main

    return demo_main(main, workdir=args.dir, keep=args.keep)


# -- parser ------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help="config file (env EAGLE_CONFIG, default ./eagle.yaml)")
    p = argparse.ArgumentParser(prog="eagle", parents=[common],
                                description="Chat-ops for SGLang / EAGLE-3 inference servers on GPU nodes.")
    p.add_argument("--version", action="version", version=f"eaglebot {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True

    s = sub.add_parser("run", parents=[common], help="run a playbook on hosts")
    s.add_argument("playbook", help="a playbook name or a path to a .yaml file")
    s.add_argument("-H", "--host", dest="hosts", action="append", default=[],
                   help="host, group or comma list (repeatable; default: default_hosts or local)")
    s.add_argument("-e", "--extra", action="append", default=[], metavar="KEY=VALUE", help="a playbook input")
    s.add_argument("--dry-run", action="store_true", help="render every step and show the plan; change nothing")
    s.add_argument("--yes", action="store_true", help="approve confirm steps (e.g. killing foreign GPU processes)")
    s.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    s.add_argument("-v", "--verbose", action="store_true", help="stream step output to stderr")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("chat", parents=[common], help="do what `/eagle TEXT` does in Slack, as text")
    s.add_argument("text")
    s.set_defaults(func=cmd_chat)

    s = sub.add_parser("console", parents=[common], help="interactive: each line is `/eagle <line>`")
    s.set_defaults(func=cmd_console)

    s = sub.add_parser("history", parents=[common], help="past runs, newest first")
    s.add_argument("--playbook")
    s.add_argument("--host")
    s.add_argument("--limit", type=int, default=20)
    s.add_argument("--status", choices=["running", "succeeded", "failed", "cancelled", "interrupted"])
    s.add_argument("--since", metavar="AGE", help="only runs started within AGE, e.g. 7d, 12h, 30min")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_history)

    s = sub.add_parser("show", parents=[common], help="one run: steps, metrics, warnings, changes")
    s.add_argument("run_id", type=_run_ref, metavar="RUN_ID", help="a run number, or `last`")
    s.add_argument("--json", action="store_true")
    s.add_argument("--output", action="store_true",
                   help="write each step's whole output, byte for byte, to stdout (a header per step on stderr)")
    s.set_defaults(func=cmd_show)

    s = sub.add_parser("status", parents=[common], help="running runs and busy hosts (as `/eagle status`)")
    s.set_defaults(func=cmd_status)

    s = sub.add_parser("logs", parents=[common], help="the tail of a host's server log (the server-logs playbook)")
    s.add_argument("host")
    s.set_defaults(func=cmd_logs)

    s = sub.add_parser("cancel", parents=[common], help="cancel a running run (its always-steps still run)")
    s.add_argument("run_id", type=int)
    s.set_defaults(func=cmd_cancel)

    s = sub.add_parser("lint", parents=[common], help="validate playbooks (default: all known)")
    s.add_argument("files", nargs="*")
    s.set_defaults(func=cmd_lint)

    s = sub.add_parser("playbooks", parents=[common], help="list playbooks with descriptions and inputs")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_playbooks)

    s = sub.add_parser("skills", parents=[common], help="list skills (shipped and plugins); `eagle chat 'help SKILL'` for one")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_skills)

    s = sub.add_parser("hosts", parents=[common], help="list configured hosts")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_hosts)

    s = sub.add_parser("serve", parents=[common], help="run the Slack bot (Socket Mode; --http for HTTP mode)")
    s.add_argument("--http", type=int, metavar="PORT", help="serve Slack's HTTP requests on PORT")
    s.add_argument("--host", default="127.0.0.1", help="address to bind in HTTP mode (default 127.0.0.1)")
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("doctor", parents=[common], help="check hosts, host keys, GPU tools, Slack tokens, the DB")
    s.set_defaults(func=cmd_doctor)

    s = sub.add_parser("schedule", parents=[common], help="scheduled runs")
    ss = s.add_subparsers(dest="schedule_cmd", metavar="list|pause|resume")
    ss.required = True
    sl = ss.add_parser("list", parents=[common], help="each job with its next fire time")
    sl.add_argument("--json", action="store_true")
    sl.set_defaults(func=cmd_schedule)
    for verb, text in (("pause", "stop NAME from firing (kept across restarts) until resumed"),
                       ("resume", "let a paused schedule fire again")):
        sp = ss.add_parser(verb, parents=[common], help=text)
        sp.add_argument("name", metavar="NAME")
        sp.set_defaults(func=cmd_schedule_pause)

    s = sub.add_parser("baseline", parents=[common], help="reference runs for regression checks")
    bs = s.add_subparsers(dest="baseline_cmd", metavar="set")
    bs.required = True
    b = bs.add_parser("set", parents=[common], help="make RUN_ID the baseline of its playbook + host")
    b.add_argument("run_id", type=int)
    b.set_defaults(func=cmd_baseline)

    s = sub.add_parser("trend", parents=[common], help="plot a metric over recent runs")
    s.add_argument("playbook")
    s.add_argument("host")
    s.add_argument("metric")
    s.add_argument("--out", help="PNG file to write")
    s.add_argument("--limit", type=int, default=30)
    s.set_defaults(func=cmd_trend)

    s = sub.add_parser("prune", parents=[common], help="delete old runs (baselines are kept)")
    s.add_argument("--older-than", required=True, metavar="AGE", help="e.g. 90d, 12w, 48h, 30min")
    s.add_argument("--dry-run", action="store_true", help="say how many runs would be deleted; delete nothing")
    s.add_argument("--yes", action="store_true", help="no question on a terminal (it asks before deleting more than 100 runs)")
    s.set_defaults(func=cmd_prune)

    s = sub.add_parser("completion", parents=[common], help="print a shell completion script (bash or zsh)")
    s.add_argument("shell", nargs="?", choices=["bash", "zsh"])
    s.add_argument("--list", choices=["playbooks", "hosts", "schedules"],
                   help="print the names the script completes (it calls this), one a line")
    s.set_defaults(func=cmd_completion)

    from eaglebot.frontends.cli.tuning_cmds import register as register_tuning

    register_tuning(sub, common)   # diff, bisect, sweep, ack

    from eaglebot.frontends.cli import audit
    audit.add_parser(sub, common)

    s = sub.add_parser("demo", parents=[common], help="the whole relaunch flow on a simulated GPU host")
    s.add_argument("--dir", default=None, help="sandbox folder (default: a new temporary folder)")
    s.add_argument("--keep", action="store_true", help="keep the sandbox folder")
    s.set_defaults(func=cmd_demo)
    return p


def _not_dumpable() -> None:
    """Close this process's /proc entries to processes of the same user (PR_SET_DUMPABLE 0).

    A step on the host `local` runs as the bot's user and would otherwise read the bot's
    Slack tokens from /proc/$PPID/environ, or type into its stdin through /proc/$PPID/fd/0
    (`eagle console` fed by a pipe). The commands the bot starts are dumpable again after
    their exec, so nothing else changes. Linux only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):  # no libc prctl: nothing to harden
        pass


def main(argv: Sequence[str] | None = None) -> int:
    _not_dumpable()
    parser = build_parser()
    args = parser.parse_args(argv)
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        # A host's invalid UTF-8 (kept as surrogate escapes) prints as `\xff`, as on stderr,
        # never as a UnicodeEncodeError; `show --output` writes raw bytes to sys.stdout.buffer.
        reconfigure(errors="backslashreplace")
    try:
        return int(args.func(args))
    except EagleError as e:
        _err(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        # `eagle ... | head`: the reader left; say nothing (Python would complain at exit
        # flushing stdout, so point it at /dev/null), exit as a shell does on SIGPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as e:  # a bug still gets one line; EAGLE_DEBUG=1 shows the traceback
        if os.environ.get("EAGLE_DEBUG"):
            raise
        first = (str(e).strip().splitlines() or [""])[0]
        _err(f"internal error: {type(e).__name__}: {first} (EAGLE_DEBUG=1 shows the traceback)")
        return 1


if __name__ == "__main__":
    sys.exit(main())
