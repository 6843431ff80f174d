"""The `eagle` command: its grammar, and the entry point that calls the command's handler and
turns every error into one line on stderr and an exit code. The handlers live in the
`*_cmds` modules by group; only argparse and they (which import nothing heavy at import time)
load here, so `eagle --help` stays fast. `completion` and `demo` are here because they use
the grammar and `main` themselves.

Exit codes: 0 success, 1 the run failed, 2 bad usage / invalid playbook / invalid input /
unknown host / busy host, 3 completed with a regression flagged, 4 a host was unreachable
and no step failed.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from eaglebot import __version__
from eaglebot.errors import EagleError, UsageError
from eaglebot.frontends.cli.catalog_cmds import cmd_hosts, cmd_lint, cmd_playbooks, cmd_skills
from eaglebot.frontends.cli.common import add_run_options, err
from eaglebot.frontends.cli.common import settings as _settings
from eaglebot.frontends.cli.history_cmds import (cmd_baseline, cmd_history, cmd_prune, cmd_show, cmd_trend,
                                                 run_ref)
from eaglebot.frontends.cli.run_cmds import cmd_cancel, cmd_chat, cmd_console, cmd_logs, cmd_rollback, cmd_run, cmd_status
from eaglebot.frontends.cli.service_cmds import cmd_doctor, cmd_schedule, cmd_schedule_pause, cmd_serve


def cmd_completion(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.completion import completion_main, names

    if args.list:
        print("\n".join(names(_settings(args), args.list, getattr(args, "playbook", None))))
        return 0
    if not args.shell:
        raise UsageError("completion needs a shell: eagle completion bash|zsh")
    return completion_main(build_parser(), args.shell)


def cmd_demo(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.demo import demo_main

    return demo_main(main, workdir=args.dir, keep=args.keep)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """`eagle`'s parser. With `command` (the command word of the line to parse: `command_word`),
    only that command's parser is added under the main one: it parses that line exactly as the
    whole parser does, and building the other twenty-nine was ~40 M instructions of every fresh
    command (tests/test_startup_budget.py). A word no section adds gets the whole parser, whose
    error lists every command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help="config file (default: $EAGLE_CONFIG, else ./eagle.yaml or the nearest eagle.yaml "
                             "in a parent folder, else ~/.config/eaglebot/eagle.yaml, else "
                             "/etc/eaglebot/eagle.yaml; none: built-in defaults)")
    p = argparse.ArgumentParser(prog="eagle", parents=[common],
                                description="Chat-ops for SGLang / EAGLE-3 inference servers on GPU nodes.")
    p.add_argument("--version", action="version", version=f"eaglebot {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True

    def want(*names: str) -> bool:
        return command is None or command in names

    if want("run"):
        s = sub.add_parser("run", parents=[common], help="run a playbook on hosts")
        s.add_argument("playbook", help="a playbook name or a path to a .yaml file")
        s.add_argument("-H", "--host", dest="hosts", action="append", default=[],
                       help="host, group, range (gpu-[01:08]), all, or pattern ('gpu-0*', h200:!gpu-03); "
                            "repeatable (default: default_hosts or local)")
        s.add_argument("-e", "--extra", action="append", default=[], metavar="KEY=VALUE", help="a playbook input")
        add_run_options(s)
        s.set_defaults(func=cmd_run)

    if want("rollback"):
        s = sub.add_parser("rollback", parents=[common],
                           help="relaunch the previous good server on HOST from the audit trail's record of its launch")
        s.add_argument("host", help="the host (its server on the port given, default: the host var port or 30000)")
        s.add_argument("-e", "--extra", action="append", default=[], metavar="KEY=VALUE",
                       help="an input of the rollback playbook (port, grace_s, ready_timeout_s, stall_s)")
        add_run_options(s)
        s.set_defaults(func=cmd_rollback)

    if want("chat"):
        s = sub.add_parser("chat", parents=[common], help="do what `/eagle TEXT` does in Slack, as text")
        s.add_argument("text")
        s.set_defaults(func=cmd_chat)

    if want("console"):
        s = sub.add_parser("console", parents=[common], help="interactive: each line is `/eagle <line>`")
        s.set_defaults(func=cmd_console)

    if want("history"):
        s = sub.add_parser("history", parents=[common], help="past runs, newest first")
        s.add_argument("--playbook")
        s.add_argument("--host")
        s.add_argument("--limit", type=int, default=20)
        s.add_argument("--status", choices=["running", "succeeded", "failed", "unreachable", "cancelled", "interrupted"])
        s.add_argument("--since", metavar="AGE", help="only runs started within AGE, e.g. 7d, 12h, 30min")
        s.add_argument("--all", action="store_true", help="list the runs a tune, sweep or bisect started too")
        s.add_argument("--json", action="store_true")
        s.set_defaults(func=cmd_history)

    if want("show"):
        s = sub.add_parser("show", parents=[common], help="one run: steps, metrics, warnings, changes")
        s.add_argument("run_id", type=run_ref, metavar="RUN_ID", help="a run number, or `last`")
        s.add_argument("--json", action="store_true")
        s.add_argument("--output", action="store_true",
                       help="write each step's whole output, byte for byte, to stdout (a header per step on stderr)")
        s.set_defaults(func=cmd_show)

    if want("status"):
        s = sub.add_parser("status", parents=[common],
                           help="running runs, busy hosts, the `eagle serve` replicas and their leader (as `/eagle status`)")
        s.add_argument("--json", action="store_true")
        s.set_defaults(func=cmd_status)

    if want("logs"):
        s = sub.add_parser("logs", parents=[common], help="the tail of a host's server log (the server-logs playbook)")
        s.add_argument("host")
        s.add_argument("-n", "--lines", type=int, default=60, help="lines from the end (1-5000, default 60)")
        s.add_argument("-f", "--follow", action="store_true", help="keep printing what the server appends, until Ctrl-C")
        s.set_defaults(func=cmd_logs)

    if want("cancel"):
        s = sub.add_parser("cancel", parents=[common], help="cancel a running run (its always-steps still run)")
        s.add_argument("run_id", type=int)
        s.set_defaults(func=cmd_cancel)

    if want("lint"):
        s = sub.add_parser("lint", parents=[common], help="validate playbooks (default: all known)")
        s.add_argument("files", nargs="*")
        s.set_defaults(func=cmd_lint)

    if want("playbooks"):
        s = sub.add_parser("playbooks", parents=[common], help="list playbooks with descriptions and inputs")
        s.add_argument("--json", action="store_true")
        s.set_defaults(func=cmd_playbooks)

    if want("skills"):
        s = sub.add_parser("skills", parents=[common], help="list skills (shipped and plugins); `eagle chat 'help SKILL'` for one")
        s.add_argument("--json", action="store_true")
        s.set_defaults(func=cmd_skills)

    if want("hosts"):
        s = sub.add_parser("hosts", parents=[common], help="list configured hosts")
        s.add_argument("--json", action="store_true")
        s.set_defaults(func=cmd_hosts)
        from eaglebot.frontends.cli.hosts_pin import register as register_pin
        register_pin(s, common)   # hosts pin HOSTS

    if want("serve"):
        s = sub.add_parser("serve", parents=[common], help="run the Slack bot (Socket Mode; --http for HTTP mode)")
        s.add_argument("--http", type=int, metavar="PORT", help="serve Slack's HTTP requests on PORT")
        s.add_argument("--host", default="127.0.0.1", help="address to bind in HTTP mode (default 127.0.0.1)")
        s.add_argument("--env-file", metavar="PATH", help="KEY=VALUE lines (systemd EnvironmentFile syntax) that override "
                                                         "the environment, read at start and on each reload")
        s.add_argument("-v", "--verbose", action="store_true", help="the libraries' INFO lines too (asyncssh, Bolt...)")
        s.set_defaults(func=cmd_serve)

    if want("doctor"):
        s = sub.add_parser("doctor", parents=[common], help="check hosts, host keys, GPU tools, Slack tokens, the DB")
        s.add_argument("--service", action="store_true",
                       help="only what the bot itself needs (config, DB, tokens, playbooks); hosts are warnings")
        s.set_defaults(func=cmd_doctor)

    if want("schedule"):
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

    if want("baseline"):
        s = sub.add_parser("baseline", parents=[common], help="reference runs for regression checks")
        bs = s.add_subparsers(dest="baseline_cmd", metavar="set")
        bs.required = True
        b = bs.add_parser("set", parents=[common], help="make RUN_ID the baseline of its playbook + host")
        b.add_argument("run_id", type=int)
        b.set_defaults(func=cmd_baseline)

    if want("trend"):
        s = sub.add_parser("trend", parents=[common], help="plot a metric over recent runs")
        s.add_argument("playbook")
        s.add_argument("host")
        s.add_argument("metric")
        s.add_argument("--out", help="PNG file to write")
        s.add_argument("--limit", type=int, default=30)
        s.set_defaults(func=cmd_trend)

    if want("prune"):
        s = sub.add_parser("prune", parents=[common], help="delete old runs (baselines are kept)")
        s.add_argument("--older-than", required=True, metavar="AGE", help="e.g. 90d, 12w, 48h, 30min")
        s.add_argument("--dry-run", action="store_true", help="say how many runs would be deleted; delete nothing")
        s.add_argument("--yes", action="store_true", help="no question on a terminal (it asks before deleting more than 100 runs)")
        s.set_defaults(func=cmd_prune)

    if want("completion"):
        s = sub.add_parser("completion", parents=[common], help="print a shell completion script (bash or zsh)")
        s.add_argument("shell", nargs="?", choices=["bash", "zsh"])
        s.add_argument("--list", choices=["playbooks", "hosts", "targets", "schedules", "inputs"],
                       help="print the names the script completes (it calls this), one a line")
        s.add_argument("--playbook", help="with --list inputs: whose input names")
        s.set_defaults(func=cmd_completion)

    if want("diff", "bisect", "sweep", "ack"):
        from eaglebot.frontends.cli.tuning_cmds import register as register_tuning

        register_tuning(sub, common)   # diff, bisect, sweep, ack

    if want("tune"):
        from eaglebot.frontends.cli.tune_cmds import register as register_tune

        register_tune(sub, common)     # tune

    if want("audit"):
        from eaglebot.frontends.cli import audit
        audit.add_parser(sub, common)

    if want("rerun", "fleet", "watch"):
        from eaglebot.frontends.cli.fleet_cmds import register as register_fleet
        register_fleet(sub, common)   # rerun, watch

    if want("demo"):
        s = sub.add_parser("demo", parents=[common], help="the whole relaunch flow on a simulated GPU host")
        s.add_argument("--dir", default=None, help="sandbox folder (default: a new temporary folder)")
        s.add_argument("--keep", action="store_true", help="keep the sandbox folder")
        s.set_defaults(func=cmd_demo)

    if command is not None and command not in sub.choices:
        return build_parser()
    return p


def command_word(argv: Sequence[str]) -> str | None:
    """The command word of an `eagle` line (`run` in `eagle --config x.yaml run hello`); None where
    the main parser itself may answer (`-h`, `--version`, an option it does not know, no command)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-"):
            return a
        if a.startswith("--config="):
            i += 1
        elif len(a) >= 3 and "--config".startswith(a):   # argparse takes any unique prefix
            i += 2
        else:
            return None
    return None


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
    line = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(command_word(line)).parse_args(line)
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        # A host's invalid UTF-8 (kept as surrogate escapes) prints as `\xff`, as on stderr,
        # never as a UnicodeEncodeError; `show --output` writes raw bytes to sys.stdout.buffer.
        reconfigure(errors="backslashreplace")
    try:
        return int(args.func(args))
    except EagleError as e:
        err(str(e))
        return e.exit_code
    except KeyboardInterrupt:
        err("interrupted")
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
        err(f"internal error: {type(e).__name__}: {first} (EAGLE_DEBUG=1 shows the traceback)")
        return 1


if __name__ == "__main__":
    sys.exit(main())
