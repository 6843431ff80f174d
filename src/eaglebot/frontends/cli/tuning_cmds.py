"""`eagle diff`, `eagle bisect`, `eagle sweep` (and `sweep resume`), `eagle ack`: thin calls
into history/ and tuning/ (rendered by frontends/tuning/), registered on the main parser by
`register`."""
from __future__ import annotations

import os

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eaglebot.errors import UsageError
from eaglebot.frontends.cli.common import no_store_text, read_store, run_interruptible, settings, whoami

# Only argparse wiring at import time: `eagle --help` and the other commands must not pay
# for the engine, numpy or matplotlib (they load inside each command).

if TYPE_CHECKING:
    from eaglebot.store import Store


def _store(args: argparse.Namespace) -> Store:
    from eaglebot.store import open_store

    cfg = settings(args)
    return open_store(cfg.audit_store, key_file=cfg.audit_key_path)


def _audited(fn: Any) -> Any:
    """Bad input to a tuning command is one sentence, exit 2, and an audit record (an
    `events` row of kind `rejected`: who, the command, why)."""
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except UsageError as e:
            try:
                # a refused read of records (a diff, an ack, a sweep resumed) leaves no DB behind
                needs_records = args.cmd in ("diff", "ack") or list(getattr(args, "words", None) or [])[:1] in (
                    ["resume"], ["apply"])
                if not needs_records or not no_store_text(args):
                    store = _store(args)
                    store.add_rejection("rejected", whoami(), f"eagle {args.cmd}", str(e))
                    store.close()
            except Exception:   # the refusal is still shown when the DB cannot be opened
                pass
            raise

    wrapper.__name__ = fn.__name__
    return wrapper


def _out(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


@_audited
def cmd_diff(args: argparse.Namespace) -> int:
    from eaglebot.frontends.tuning.render import diff_text
    from eaglebot.history.diff import compare, diff_json
    from eaglebot.history.loader import diff_rows

    store = read_store(args, f"no run #{args.run_a}")
    try:
        d = compare(diff_rows(store, args.run_a, args.run_b, os.path.expanduser("~")))
    finally:
        store.close()
    if args.json:
        _out(diff_json(d))
    else:
        print(diff_text(d))
    return 0


@_audited
def cmd_ack(args: argparse.Namespace) -> int:
    from eaglebot.history.recorder import ack, ack_incident, ack_run

    if args.all and args.metric:
        raise UsageError("eagle ack RUN_ID --all closes every incident of the run; leave out the metric")
    store = read_store(args, f"no run #{args.id}" if args.metric or args.all else f"no incident #{args.id}")
    try:
        if args.metric:
            print(ack(store, args.id, args.metric, args.reason, whoami()))
        elif args.all:
            print(ack_run(store, args.id, args.reason, whoami()))
        else:
            print(ack_incident(store, args.id, args.reason, whoami()))
    finally:
        store.close()
    return 0


def _approver(args: argparse.Namespace) -> Any:
    from eaglebot.frontends.cli.terminal import terminal_approver

    return terminal_approver if (sys.stdin.isatty() and not args.yes) else None


@_audited
def cmd_bisect(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.terminal import TerminalObserver
    from eaglebot.frontends.services import Services
    from eaglebot.frontends.tuning.render import bisect_text
    from eaglebot.tuning.bisect import BisectRequest, bisect

    async def go() -> dict[str, Any]:
        svc = await Services.open(settings(args))
        try:
            req = BisectRequest(args.good, args.bad, args.host, actor=whoami(), origin="cli", leave=args.leave,
                                repeats=args.repeats, num_prompts=args.prompts, assume_yes=args.yes)
            return await bisect(svc.engine, req, observer=TerminalObserver(), approver=_approver(args))
        finally:
            await svc.close()

    r = run_interruptible(go(), f"stopping the bisect and leaving {args.host} in {args.leave.upper()}'s configuration")
    if args.json:
        _out(r)
    else:
        print(bisect_text(r))
    return 0


@_audited
def cmd_sweep(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.terminal import TerminalObserver
    from eaglebot.frontends.services import Services
    from eaglebot.frontends.tuning.plot import render_sweep
    from eaglebot.frontends.tuning.render import sweep_text
    from eaglebot.tuning import sweep as sw

    _merge_trailing_options(args)
    words: list[str] = list(args.words)
    heat = None
    if args.heatmap:
        parts = args.heatmap.split(",")
        if len(parts) != 2:
            raise UsageError("--heatmap takes two swept inputs, e.g. --heatmap spec_steps,spec_topk")
        heat = (parts[0], parts[1])

    if words and words[0] == "resume" and (missing := no_store_text(args)):
        raise UsageError(f"no sweep #{words[1].lstrip('#') if len(words) > 1 else '?'}: {missing}")

    async def go() -> dict[str, Any]:
        svc = await Services.open(settings(args))
        try:
            if words and words[0] == "resume":
                if len(words) != 2 or not words[1].lstrip("#").isdigit():
                    raise UsageError("usage: eagle sweep resume ID")
                sid = int(words[1].lstrip("#"))
            else:
                if not args.host:
                    raise UsageError("eagle sweep PLAYBOOK -H HOST key=v1,v2 ...: give the host with -H")
                if len(words) < 2:
                    raise UsageError("usage: eagle sweep PLAYBOOK -H HOST key=v1,v2 ... [--repeats N]")
                axes, fixed, repeats = sw.parse_assignments(words[1:])
                req = sw.SweepRequest(words[0], args.host, axes, fixed, args.repeats or repeats, heat)
                sid = await sw.create(svc.engine, req, actor=whoami(), origin="cli")
                print(f"sweep #{sid}: {len(sw.grid(axes))} points", file=sys.stderr)
            return await sw.run_points(svc.engine, sid, actor=whoami(), origin="cli", observer=TerminalObserver(),
                                    approver=_approver(args), assume_yes=args.yes)
        finally:
            await svc.close()

    r = run_interruptible(go(), "stopping the sweep (`eagle sweep resume` finishes it)")
    axes = sw.plot_axes(r)
    png = None
    if axes and r["ranked"]:
        png = render_sweep(r, axes[0], axes[1], Path(args.out) if args.out else sw.default_png(r))
    elif args.out:   # asked for a plot that cannot be drawn: say why, rather than nothing
        print(f"no plot written to {args.out}: " + ("no point was measured" if axes else
                                                     "the sweep varies no input (one point)"), file=sys.stderr)
    if args.json:
        _out({**r, "heatmap": str(png) if png else None, "apply_best": sw.apply_best_command(r)})
    else:
        print(sweep_text(r))
        if png:
            print(f"{'heatmap' if axes and axes[1] else 'line plot'} and Pareto front: {png}")
        if (cmd := sw.apply_best_command(r)):
            print(f"apply the best: eagle chat {json.dumps(cmd)}")
    return 1 if r["failed"] else 0


def _sweep_options(p: argparse.ArgumentParser, defaults: bool = True) -> None:
    d: dict[str, Any] = {} if defaults else {"default": argparse.SUPPRESS}
    p.add_argument("-H", "--host", **d)
    p.add_argument("--repeats", type=int, help="benchmark runs per point", **d)
    p.add_argument("--heatmap", help="two swept inputs for the heatmap's axes (default: the first two)", **d)
    p.add_argument("--out", help="heatmap PNG (default ./sweep-ID.png)", **d)
    p.add_argument("--yes", action="store_true", help="approve confirm steps up front", **d)
    p.add_argument("--json", action="store_true", **d)


def _merge_trailing_options(args: argparse.Namespace) -> None:
    """`eagle sweep relaunch -H gpu-01 spec_steps=3,5`: options may sit between the words
    (argparse takes one run of positionals only), so the words are read a second time."""
    aux = argparse.ArgumentParser(prog="eagle sweep", add_help=False)
    _sweep_options(aux, defaults=False)
    aux.add_argument("--config", default=argparse.SUPPRESS)
    ns, rest = aux.parse_known_args(list(args.words))
    bad = [w for w in rest if w.startswith("-")]
    if bad:
        raise UsageError(f"eagle sweep: unknown option {bad[0]!r}")
    for k, v in vars(ns).items():
        setattr(args, k, v)
    args.words = rest


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("diff", parents=[common], help="two runs side by side: inputs, launch args, config patch, "
                                                      "versions, env, health, metrics")
    s.add_argument("run_a", type=int)
    s.add_argument("run_b", type=int)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_diff)

    s = sub.add_parser("bisect", parents=[common], help="name the change(s) between two runs that cost the metric")
    s.add_argument("good", type=int, metavar="GOOD_RUN")
    s.add_argument("bad", type=int, metavar="BAD_RUN")
    s.add_argument("-H", "--host", required=True)
    s.add_argument("--leave", choices=["good", "bad"], default="good", help="the state to leave the host in")
    s.add_argument("--repeats", type=int, default=3, help="benchmark runs per point (median)")
    s.add_argument("--prompts", type=int, default=32, help="prompts per benchmark")
    s.add_argument("--yes", action="store_true", help="approve confirm steps up front")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_bisect)

    s = sub.add_parser("sweep", parents=[common], help="a grid of playbook inputs, relaunch + bench each; "
                                                       "`eagle sweep resume ID` finishes an interrupted one")
    _sweep_options(s)
    s.add_argument("words", nargs=argparse.REMAINDER, metavar="PLAYBOOK key=v1,v2 ... | resume ID")
    s.set_defaults(func=cmd_sweep)

    s = sub.add_parser("ack", parents=[common], help="close an open regression incident, with a reason: "
                                                     "INCIDENT_ID, RUN_ID --all, or RUN_ID METRIC")
    s.add_argument("id", type=int, metavar="INCIDENT_ID|RUN_ID")
    s.add_argument("metric", nargs="?", help="with a RUN_ID: the metric whose incident to close")
    s.add_argument("--all", action="store_true", help="the id is a run: close every open incident it belongs to")
    s.add_argument("--reason", required=True)
    s.set_defaults(func=cmd_ack)
