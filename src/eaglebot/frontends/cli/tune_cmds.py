"""`eagle tune PLAYBOOK -H HOST --batch-sizes 1,8,32 [--budget 30m] [--repeats N] [--apply] [--json]` and
`eagle tune apply RUN`: thin calls into tuning/tune.py, rendered by frontends/tuning/."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from eaglebot.errors import UsageError
from eaglebot.frontends.cli.common import no_store_text, run_interruptible, settings, whoami
from eaglebot.frontends.cli.tuning_cmds import _approver, _audited, _out


def _inputs(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in pairs or []:
        if "=" not in p:
            raise UsageError(f"-e takes key=value (got {p[:40]!r})")
        k, v = p.split("=", 1)
        if k in out:
            raise UsageError(f"input {k!r} is given twice")
        out[k] = v
    return out


def request(args: argparse.Namespace) -> Any:
    from eaglebot.tuning.tune import TuneRequest, parse_duration, parse_ints

    if not args.host:
        raise UsageError("eagle tune PLAYBOOK -H HOST --batch-sizes 1,8,32: give the host with -H")
    return TuneRequest(
        args.words[0], args.host, parse_ints(args.batch_sizes, "--batch-sizes"),
        budget_s=parse_duration(args.budget) if args.budget else None, repeats=args.repeats, apply=args.apply,
        fixed=_inputs(args.extra), steps=parse_ints(args.steps, "--steps", 1, 16), topk=parse_ints(args.topk, "--topk", 1, 64),
        draft_tokens=parse_ints(args.draft_tokens, "--draft-tokens", 2, 256), max_launches=args.max_launches,
        flap_trace=[p for p in args.flap_trace.split(",") if p], flap_settle_s=args.flap_settle,
        num_prompts=args.prompts, input_len=args.input_len, output_len=args.output_len)


@_audited
def cmd_tune(args: argparse.Namespace) -> int:
    from eaglebot.frontends.cli.terminal import TerminalObserver
    from eaglebot.frontends.services import Services
    from eaglebot.frontends.tuning.tune_plot import render_tune
    from eaglebot.frontends.tuning.tune_text import tune_text
    from eaglebot.tuning import tune

    words = list(args.words)
    if not words:
        raise UsageError("usage: eagle tune PLAYBOOK -H HOST --batch-sizes 1,8,32 [--budget 30m] [--apply] "
                         "| eagle tune apply RUN_ID")
    past = words[0] == "apply"
    if past:
        if len(words) != 2 or not words[1].lstrip("#").isdigit():
            raise UsageError("usage: eagle tune apply RUN_ID")
        if (missing := no_store_text(args)):
            raise UsageError(f"no run #{words[1].lstrip('#')}: {missing}")
    elif len(words) != 1:
        raise UsageError(f"eagle tune takes one playbook (got {' '.join(words)[:60]!r}); inputs go with -e key=value")
    req = None if past else request(args)

    async def go() -> dict[str, Any]:
        svc = await Services.open(settings(args))
        try:
            if past:
                return await tune.apply_past(svc.engine, int(words[1].lstrip("#")), actor=whoami(), origin="cli",
                                             observer=TerminalObserver(), approver=_approver(args), assume_yes=args.yes)
            assert req is not None
            print(f"tuning {req.playbook} on {req.host} at batch sizes {', '.join(map(str, req.batch_sizes))}",
                  file=sys.stderr)
            return await tune.run_tuning(svc.engine, req, actor=whoami(), origin="cli", observer=TerminalObserver(),
                                         approver=_approver(args), assume_yes=args.yes)
        finally:
            await svc.close()

    r = run_interruptible(go(), "stopping the tuning and relaunching the config found running")
    if past:
        if args.json:
            _out(r)
        else:
            print(f"applied: {args.words[1]} -> run #{r['run_id']}" if r.get("ok") else f"not applied: {r['why']}")
        return 0 if r.get("ok") else 1
    png = None
    if any(e.get("tok_s") is not None for e in r["batch_sizes"].values()):
        png = render_tune(r, Path(args.out) if args.out else Path.cwd() / f"tune-{r['run_id']}.png")
    r["plot"] = str(png) if png else None
    if args.json:
        _out(r)
    else:
        print(tune_text(r))
        if png:
            print(f"Pareto plot: {png}")
        if (p := r.get("proposal")) and p.get("beats_current") and not r.get("applied"):
            print(f"proposal: {p['gain_pct']:+.1f}% over the current config (noise {p['noise_pct']:.1f}%): "
                  f"apply with `eagle {p['apply']}` (asks for an approval)")
    return 0 if r["status"] == "succeeded" else 1


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("tune", parents=[common], help="profile, predict and verify speculative configs per batch "
                                                      "size; deploy the result after an approval (--apply)")
    s.add_argument("words", nargs="*", metavar="PLAYBOOK | apply RUN_ID")
    s.add_argument("-H", "--host")
    s.add_argument("--batch-sizes", default="1,8,32", help="concurrencies to tune for (default 1,8,32)")
    s.add_argument("--budget", help="time budget, e.g. 30m (default: the launch budget alone)")
    s.add_argument("--repeats", type=int, default=3, help="benchmark runs per batch size and cell (median, MAD)")
    s.add_argument("--apply", action="store_true", help="relaunch with the result after an approval")
    s.add_argument("--yes", action="store_true", help="approve up front (confirm steps and --apply)")
    s.add_argument("-e", "--extra", action="append", default=[], metavar="KEY=VALUE",
                   help="an input of the playbook for every launch (e.g. -e tp=2)")
    s.add_argument("--steps", default="1-8", help="candidate --speculative-num-steps (default 1-8)")
    s.add_argument("--topk", default="1,2,4,8", help="candidate --speculative-eagle-topk (default 1,2,4,8)")
    s.add_argument("--draft-tokens", default="4,8,16,32", help="candidate draft tokens of trees (default 4,8,16,32)")
    s.add_argument("--max-launches", type=int, help="launch budget (default: a fifth of the grid, at least enough to profile, verify a chain per batch size and run the flap test)")
    s.add_argument("--flap-trace", default="1:20,64:20,4:20", help="the flap test's phases, CONCURRENCY:SECONDS")
    s.add_argument("--flap-settle", type=float, default=5.0, help="seconds of each phase not counted")
    s.add_argument("--prompts", type=int, default=16, help="at least this many prompts per benchmark run")
    s.add_argument("--input-len", type=int, default=1024, help="input tokens per prompt")
    s.add_argument("--output-len", type=int, default=256, help="output tokens per prompt")
    s.add_argument("--out", help="the Pareto plot PNG (default ./tune-RUN.png)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_tune)

