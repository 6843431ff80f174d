"""The slash grammar's tuning words: `/eagle diff A B`, `/eagle bisect GOOD BAD HOST`,
`/eagle sweep PLAYBOOK HOST key=v1,v2 ... [repeats=N]`, `/eagle tune PLAYBOOK HOST [batch_sizes=1,8,32]
[budget=30m] [repeats=N] [apply] [key=value ...]` (or `--batch-sizes 1,8,32 --budget 30m --apply`, as
on the CLI) and `/eagle tune apply RUN`, `/eagle ack ID METRIC reason`.

`parse_tuning` is pure (`parse` calls it through `chat/args.py`); the handlers (`on_*`, named by
their entries in `chat/words.py`) do the work through the same code as the CLI (history/diff.py,
history/recorder.py, tuning/, frontends/tuning/).
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from eaglebot.engine.runner import Approver, Observer, RunRequest
from eaglebot.frontends.chat.caller import Caller
from eaglebot.frontends.chat.command import Command
from eaglebot.frontends.chat.reply import Note, Reply, SweepDone, TuneDone, listing
from eaglebot.frontends.services import Services

if TYPE_CHECKING:
    from eaglebot.tuning.tune import TuneRequest


_ID = re.compile(r"^#?\d{1,12}$")
_HOST = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_METRIC = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,99}$")
_SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")   # output_throughput, not a reason's first word
USAGE = {
    "diff": "usage: /eagle diff A B (two run numbers, e.g. `/eagle diff 41 45`)",
    "bisect": "usage: /eagle bisect GOOD BAD HOST [leave=good|bad] [repeats=N] (e.g. `/eagle bisect 41 45 gpu-01`)",
    "sweep": "usage: /eagle sweep PLAYBOOK HOST key=v1,v2 ... [repeats=N] "
             "(e.g. `/eagle sweep relaunch gpu-01 spec_steps=3,5,7 spec_topk=1,4`) or /eagle sweep resume ID",
    "tune": "usage: /eagle tune PLAYBOOK HOST [batch_sizes=1,8,32] [budget=30m] [repeats=N] [apply] "
            "(e.g. `/eagle tune relaunch gpu-01 batch_sizes=1,8,32 budget=30m`) or /eagle tune apply RUN",
    "ack": "usage: /eagle ack INCIDENT reason, /eagle ack RUN all reason or /eagle ack RUN METRIC reason "
           "(e.g. `/eagle ack 3 new capture layers, slower by design`)",
}


def parse_tuning(word: str, args: list[str]) -> tuple[tuple[str, ...], str | None]:
    """(the command's arguments, None) or ((), the usage sentence). Pure."""
    bad: tuple[tuple[str, ...], str | None] = ((), USAGE.get(word, f"unknown command {word!r}"))
    if word == "diff":
        if len(args) != 2 or not all(_ID.match(a) for a in args):
            return bad
        return tuple(a.lstrip("#") for a in args), None
    if word == "bisect":
        if len(args) < 3 or not _ID.match(args[0]) or not _ID.match(args[1]) or not _HOST.match(args[2]):
            return bad
        opts = args[3:]
        for o in opts:
            k, _, v = o.partition("=")
            if not ((k == "leave" and v in ("good", "bad")) or (k == "repeats" and v.isdigit() and 1 <= int(v) <= 20)):
                return bad
        return (args[0].lstrip("#"), args[1].lstrip("#"), args[2], *opts), None
    if word == "sweep":
        if len(args) == 2 and args[0] == "resume" and _ID.match(args[1]):
            return ("resume", args[1].lstrip("#")), None
        if len(args) < 3 or not _NAME.match(args[0]) or not _HOST.match(args[1]) or any("=" not in a for a in args[2:]):
            return bad
        return tuple(args), None
    if word == "tune":
        return _parse_tune(args, bad)
    if word == "ack":
        # INCIDENT reason... | RUN all reason... | RUN METRIC reason... (a metric name has an underscore)
        if len(args) < 2 or not _ID.match(args[0]) or (len(args) == 2 and (args[1] == "all" or _SNAKE.match(args[1]))):
            return bad
        if args[1] == "all" or (_SNAKE.match(args[1]) and _METRIC.match(args[1])):
            return (args[0].lstrip("#"), args[1], " ".join(args[2:])), None
        return (args[0].lstrip("#"), "", " ".join(args[1:])), None
    return bad


_TUNE_FLAGS = {"--batch-sizes": "batch_sizes", "--budget": "budget", "--repeats": "repeats", "--steps": "steps",
               "--topk": "topk", "--draft-tokens": "draft_tokens", "--max-launches": "max_launches",
               "--flap-trace": "flap_trace", "--flap-settle": "flap_settle"}


def _parse_tune(args: list[str], bad: tuple[tuple[str, ...], str | None]) -> tuple[tuple[str, ...], str | None]:
    if len(args) == 2 and args[0] == "apply" and _ID.match(args[1]):
        return ("apply", args[1].lstrip("#")), None
    if len(args) < 2 or not _NAME.match(args[0]) or not _HOST.match(args[1]) or "," in args[1]:
        return bad
    opts: list[str] = []
    rest = iter(args[2:])
    for a in rest:
        if a in ("apply", "--apply"):
            opts.append("apply=1")
        elif a in _TUNE_FLAGS:
            value = next(rest, None)
            if value is None or value.startswith("-"):
                return bad
            opts.append(f"{_TUNE_FLAGS[a]}={value}")
        elif a.startswith("-") or "=" not in a:
            return bad
        else:
            opts.append(a)
    return (args[0], args[1], *opts), None


async def on_diff(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.frontends.tuning.render import diff_text
    from eaglebot.history.diff import compare
    from eaglebot.history.loader import diff_rows

    a, b = int(cmd.args[0]), int(cmd.args[1])
    d = compare(await services.store.call(lambda s: diff_rows(s, a, b, os.path.expanduser("~"))))
    return listing(diff_text(d), f"Diff #{a} → #{b}", public=True)


async def on_ack(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.history.recorder import ack, ack_incident, ack_run

    num, what, reason = int(cmd.args[0]), cmd.args[1], cmd.args[2]
    if what == "all":
        text = await services.store.call(lambda s: ack_run(s, num, reason, caller.user))
    elif what:
        text = await services.store.call(lambda s: ack(s, num, what, reason, caller.user))
    else:
        text = await services.store.call(lambda s: ack_incident(s, num, reason, caller.user))
    return Reply(text, Note(text, mark="ack"), public=True, run_id=num if what else None)


async def on_bisect(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.frontends.tuning.render import bisect_text
    from eaglebot.tuning.bisect import BisectRequest, bisect

    good, bad, host = int(cmd.args[0]), int(cmd.args[1]), cmd.args[2]
    opts = dict(o.split("=", 1) for o in cmd.args[3:])
    observer, approver = _progress(caller, "bisect-point", host)
    req = BisectRequest(good, bad, host, actor=caller.user, origin=caller.origin, leave=opts.get("leave", "good"),
                        repeats=int(opts.get("repeats", "3")), channel=caller.channel)
    r = await bisect(services.engine, req, observer=observer, approver=approver)
    text = bisect_text(r)
    return listing(text, f"Bisect #{r['bisect_id']}", public=True)


async def on_sweep(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.frontends.tuning.plot import render_sweep
    from eaglebot.frontends.tuning.render import sweep_text
    from eaglebot.tuning import sweep as sw

    if cmd.args[0] == "resume":
        sid = int(cmd.args[1])
    else:
        axes, fixed, repeats = sw.parse_assignments(list(cmd.args[2:]))
        req = sw.SweepRequest(cmd.args[0], cmd.args[1], axes, fixed, repeats)
        sid = await sw.create(services.engine, req, actor=caller.user, origin=caller.origin)
    sweep = await services.store.call(lambda s: s.get_sweep(sid))
    observer, approver = _progress(caller, sweep["playbook"] if sweep else "relaunch", sweep["host"] if sweep else "")
    r = await sw.run_points(services.engine, sid, actor=caller.user, origin=caller.origin, observer=observer,
                         approver=approver, channel=caller.channel)
    text = sweep_text(r)
    best = sw.apply_best_command(r)
    if best:
        text += f"\napply the best (operators): /eagle {best}"
    png: Path | None = None
    axes2 = sw.plot_axes(r)
    if axes2 and r["ranked"]:
        png = render_sweep(r, axes2[0], axes2[1],
                           Path(tempfile.mkdtemp(prefix="eagle-sweep-")) / f"sweep-{sid}.png")
    return Reply(text, SweepDone(text, sid, best), public=True, file=png)


async def on_tune(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.frontends.tuning.tune_plot import render_tune
    from eaglebot.frontends.tuning.tune_text import tune_text
    from eaglebot.tuning import tune

    if cmd.args[0] == "apply":
        rid = int(cmd.args[1])
        run = await services.store.call(lambda s: s.get_run(rid))
        inputs = dict(run["inputs"] or {}) if run else {}
        observer, approver = _progress(caller, str(inputs.get("playbook") or "relaunch"),
                                       ",".join(run["hosts"] or []) if run else "")
        a = await tune.apply_past(services.engine, rid, actor=caller.user, origin=caller.origin, observer=observer,
                                  approver=approver, channel=caller.channel)
        text = (f"tuning run #{rid} applied (approved by {a['approved_by']}): run #{a['run_id']}" if a.get("ok")
                else f"tuning run #{rid} not applied: {a['why']}")
        return Reply(text, Note(text), public=True, run_id=a.get("run_id"), exit_code=0 if a.get("ok") else 1)
    req = tune_request(cmd.args)
    observer, approver = _progress(caller, req.playbook, req.host)
    r = await tune.run_tuning(services.engine, req, actor=caller.user, origin=caller.origin, observer=observer,
                              approver=approver, channel=caller.channel)
    text = tune_text(r)
    p = r.get("proposal") or {}
    offer = f"tune apply {r['run_id']}" if p.get("beats_current") and not r.get("applied") else None
    if offer:
        text += f"\nproposal: {p['gain_pct']:+.1f}% over the current config: /eagle {offer} (asks for an approval)"
    png = render_tune(r, Path(tempfile.mkdtemp(prefix="eagle-tune-")) / f"tune-{r['run_id']}.png") \
        if any(e.get("tok_s") is not None for e in r["batch_sizes"].values()) else None
    return Reply(text, TuneDone(text, r["run_id"], offer), public=True, file=png, run_id=r["run_id"],
                 exit_code=0 if r["status"] == "succeeded" else 1)


def tune_request(args: tuple[str, ...]) -> TuneRequest:
    """`/eagle tune` words (parsed by `_parse_tune`) -> the request; bad values are UsageError."""
    from eaglebot.tuning import tune

    opts = dict(o.split("=", 1) for o in args[2:])
    take = opts.pop
    req = tune.TuneRequest(args[0], args[1], tune.parse_ints(take("batch_sizes", "1,8,32"), "batch_sizes"))
    if "budget" in opts:
        req.budget_s = tune.parse_duration(take("budget"))
    if "repeats" in opts:
        req.repeats = tune.parse_ints(take("repeats"), "repeats", 1, 20)[0]
    req.apply = bool(take("apply", ""))
    if "steps" in opts:
        req.steps = tune.parse_ints(take("steps"), "steps", 1, 16)
    if "topk" in opts:
        req.topk = tune.parse_ints(take("topk"), "topk", 1, 64)
    if "draft_tokens" in opts:
        req.draft_tokens = tune.parse_ints(take("draft_tokens"), "draft_tokens", 2, 256)
    if "max_launches" in opts:
        req.max_launches = tune.parse_ints(take("max_launches"), "max_launches", 1, 1000)[0]
    for key, attr, hi in (("prompts", "num_prompts", 100000), ("input_len", "input_len", 1 << 20),
                          ("output_len", "output_len", 1 << 20)):
        if key in opts:
            setattr(req, attr, tune.parse_ints(take(key), key, 1, hi)[0])
    if "flap_trace" in opts:
        req.flap_trace = [p for p in take("flap_trace").split(",") if p]
    if "flap_settle" in opts:
        req.flap_settle_s = tune.parse_seconds(take("flap_settle"), "flap_settle")
    req.fixed = opts
    return req


def _progress(caller: Caller, playbook: str, host: str) -> tuple[Observer | None, Approver | None]:
    """The front end's progress view and approver, asked once for the whole bisect/sweep."""
    req = RunRequest(playbook, [host], {}, actor=caller.user, origin=caller.origin, channel=caller.channel)
    observer = caller.frontend.observer(req)
    return observer, caller.frontend.approver(req, observer)

