"""A run on a terminal: progress lines on stderr, approvals asked there, the result as text.

Shared by `eagle run` and the runs `eagle chat` / `eagle console` start.
"""
from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import TextIO

from eaglebot.engine.runner import Observer, RunOutcome, RunRequest, StepRecord
from eaglebot.engine.playbook import Playbook
from eaglebot.frontends.cli.safe import terminal_safe
from eaglebot.frontends.format import display_metrics, fmt_duration, fmt_value, metric_text
from eaglebot.frontends.recap_text import recap_table, recap_total
from eaglebot.history.reasons import clip_items, reason_items
from eaglebot.history.view import RunView
from eaglebot.sdk import ApprovalRequest, StepResult


_COLOURS = {"ok": "32", "changed": "32", "succeeded": "32", "skipped": "2", "failed": "31", "cancelled": "33",
            "interrupted": "33", "warning": "33", "REGRESSION": "1;31", "unreachable": "35"}
FLEET = 8  # more hosts than this: one status line per host, not one per step


def use_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    try:
        return stream.isatty() and not os.environ.get("NO_COLOR")
    except (AttributeError, ValueError):
        return False


def paint(word: str, colour: bool, key: str | None = None) -> str:
    code = _COLOURS.get(key or word)
    return f"\x1b[{code}m{word}\x1b[0m" if colour and code else word


class TerminalObserver(Observer):
    """A line per step on stderr, with status and elapsed time; a heartbeat line while a
    step runs long (the engine's `heartbeat_s`); colour on a terminal unless NO_COLOR. For a
    fleet (more than FLEET hosts) a line per host when it is done (failed steps still get
    their line) and a count of hosts done at most every COUNT_EVERY_S."""

    COUNT_EVERY_S = 2.0

    def __init__(self, stream: TextIO | None = None, verbose: bool = False):
        self.stream = stream or sys.stderr
        self.verbose = verbose
        self.total: dict[str, int] = {}
        self.t0 = time.monotonic()
        self.colour = use_colour(self.stream)
        self.fleet = 0
        self.per_host: dict[str, dict[str, int]] = {}
        self.hosts_done = 0
        self.hosts_failed = 0
        self.last_count = 0.0

    def _p(self, s: str) -> None:
        print(s, file=self.stream, flush=True)

    async def run_started(self, run_id: int, playbook: Playbook, hosts: list[str], req: RunRequest) -> None:
        self.start(run_id, playbook.name, hosts, len(playbook.steps) + len(playbook.always), req.dry_run)

    def start(self, run_id: int, name: str, hosts: list[str], steps: int | None, dry_run: bool = False,
              by: str = "") -> None:
        """The first line (`eagle run`, and `eagle watch` from the store, which adds who started it)."""
        self.total = {"steps": steps} if steps else {}
        mode = (" (dry-run)" if dry_run else "") + by
        if len(hosts) > FLEET:
            self.fleet = len(hosts)
            self._p(f"run #{run_id}: {name} on {len(hosts)} hosts ({', '.join(hosts[:3])}, …){mode}")
        else:
            self._p(f"run #{run_id}: {name} on {', '.join(hosts)}{mode}")

    async def step_started(self, run_id: int, rec: StepRecord) -> None:
        if self.verbose:
            self._p(f"[{rec.host}] {rec.idx + 1}/{self.total.get('steps', '?')} {rec.name} ...")

    def step_output(self, run_id: int, rec: StepRecord, line: str) -> None:
        if self.verbose:
            self._p(f"[{rec.host}]   | {terminal_safe(line)}")

    async def step_heartbeat(self, run_id: int, rec: StepRecord, elapsed_s: float, last_line: str) -> None:
        last = f" — {terminal_safe(last_line.strip()[:120])}" if last_line.strip() else ""
        self._p(f"[{rec.host}] {rec.idx + 1}/{self.total.get('steps', '?')} {rec.name}: "
                f"still running ({fmt_duration(elapsed_s)}){last}")

    async def step_finished(self, run_id: int, rec: StepRecord, result: StepResult) -> None:
        if self.fleet and not self.verbose:
            self._fleet_step(run_id, rec)
            if rec.status not in ("failed", "unreachable"):
                return
        summary = f"  {terminal_safe(rec.summary)}" if rec.summary else ""
        self._p(f"[{rec.host}] {rec.idx + 1}/{self.total.get('steps', '?')} {terminal_safe(rec.name)}: "
                f"{paint(rec.status, self.colour)} ({rec.duration_ms / 1000:.2f}s){summary}")
        for w in result.warnings:
            self._p(f"[{rec.host}]   {paint('warning', self.colour)}: {terminal_safe(w)}")

    def _fleet_step(self, run_id: int, rec: StepRecord) -> None:
        counts = self.per_host.setdefault(rec.host, {})
        counts[rec.status] = counts.get(rec.status, 0) + 1
        if sum(counts.values()) < self.total.get("steps", 0):
            return
        self.hosts_done += 1
        self.hosts_failed += 1 if counts.get("failed") or counts.get("unreachable") else 0
        self._p(f"[{rec.host}] done: " + ", ".join(f"{n} {st}" for st, n in sorted(counts.items())))
        now = time.monotonic()
        if now - self.last_count >= self.COUNT_EVERY_S and self.hosts_done < self.fleet:
            self.last_count = now
            self._p(f"run #{run_id}: {self.hosts_done}/{self.fleet} hosts done, {self.hosts_failed} failed")

    async def run_finished(self, outcome: RunOutcome) -> None:
        """For a fleet, the hosts' last lines and counts; the result block (`result_text`)
        says how the run ended, once."""
        if self.fleet and not self.verbose:
            # Hosts that stopped early (a failed step; the rest not run) still get their line.
            total = self.total.get("steps", 0)
            for host in outcome.hosts:
                counts = self.per_host.get(host, {})
                if host in outcome.untouched:
                    continue  # the recap lists them
                if sum(counts.values()) < total:
                    self.hosts_done += 1
                    self.hosts_failed += 1 if counts.get("failed") or outcome.status != "succeeded" else 0
                    parts = [f"{n} {st}" for st, n in sorted(counts.items())]
                    self._p(f"[{host}] done: " + ", ".join([*parts, f"{total - sum(counts.values())} not run"]))
            self._p(f"run #{outcome.run_id}: {self.hosts_done}/{self.fleet} hosts done, {self.hosts_failed} failed")


class LogFollower(TerminalObserver):
    """`eagle logs -f`: the log's lines on stdout as they come (a pipe gets the log alone), the
    run's own lines on stderr."""

    stopped = False   # the follow ended as asked (Ctrl-C): the run is `cancelled`, the command fine

    def step_output(self, run_id: int, rec: StepRecord, line: str) -> None:
        print(terminal_safe(line), flush=True)

    async def run_finished(self, outcome: RunOutcome) -> None:
        self.stopped = outcome.status == "cancelled"
        await super().run_finished(outcome)


async def terminal_approver(req: ApprovalRequest) -> tuple[bool, str]:
    """Ask on the terminal; without one the engine denies (and says to pass --yes)."""
    lines = [f"[{req.host}] step {req.step!r} wants to {req.action}:"] + [f"    {d}" for d in req.details]
    print("\n".join(lines), file=sys.stderr, flush=True)
    answer = await asyncio.to_thread(_ask, "approve? [y/N] ")
    who = os.environ.get("USER") or "terminal"
    return answer.strip().lower() in ("y", "yes"), who


def _ask(prompt: str) -> str:
    try:
        sys.stderr.write(prompt)
        sys.stderr.flush()
        return sys.stdin.readline()
    except (EOFError, OSError):
        return ""


REASON_CHARS = 160   # the full attribution is in `eagle show`


def _new_in_reason(metric: str, reason: str) -> str:
    """What a regression's reason adds to the line's own before → after: its parts that do
    not restate the metric and its numbers (e.g. the attribution `changed since run #41: …`)."""
    parts = [p.strip() for p in reason_items(reason)]
    keep = [p for p in parts if p and not p.startswith(metric) and p not in ("regression", "improvement")]
    return "; ".join(keep)


def result_text(view: RunView, plan: list[str] | None = None, *, with_error: bool = True,
                colour: bool = False) -> str:
    """A finished run as one block: status and duration, error, the dry-run plan, each
    metric once (its unit once, three significant digits), warnings, and one line per
    regression or improvement with before → after. `plan` is the engine's (the store keeps
    no plan); `with_error=False` when the error already went to stderr."""
    dry = " (dry-run)" if view.dry_run else ""
    lines = [f"run #{view.run_id} {view.playbook}{dry} on {', '.join(view.hosts)}: "
             f"{paint(view.status, colour)} in {fmt_duration(view.duration_s)}"]
    if with_error and view.error and view.status != "succeeded":
        lines.append(f"error: {terminal_safe(view.error)}")
    if view.dry_run and plan:
        lines.append("plan (dry-run, nothing was changed):")
        lines += [f"  {terminal_safe(p)}" for p in plan]
    metrics = display_metrics(list(view.metrics))
    multi = len({m["host"] for m in metrics}) > 1
    for m in metrics:
        lines.append(f"  {m['host'] + ': ' if multi else ''}{metric_text(m['name'], m['value'], m['unit'] or '')}")
    for w in view.warning_lines:
        lines.append(f"{paint('warning', colour)}: {terminal_safe(w)}")
    if len(view.hosts) > 1:
        recap = view.recap()
        lines.append(f"recap, {recap_total(recap)}:")
        lines += [f"  {ln}" for ln in recap_table(recap).splitlines()]
    for group in view.regression_groups():   # one line per incident, however many metrics it moved
        r = group[0]
        regression = (r.get("kind") or "regression") == "regression"
        word = paint("REGRESSION", colour) if regression else "improvement"
        reason = _new_in_reason(r["metric"], r.get("reason") or "")
        reason = clip_items(reason, REASON_CHARS)   # whole items, then "and N more": never inside a value
        iid = view.incident_of(r) if len(group) > 1 else None
        moved = ", ".join(f"{g['metric']} {fmt_value(g['reference'])} → {fmt_value(g['value'])} ({g['delta_pct']:+.1f}%)"
                          for g in group)
        lines.append(f"{'▼' if regression else '▲'} {word} {r['host']}{f' (incident #{iid})' if iid else ''}: {moved}"
                     + (f"  {terminal_safe(reason)}" if reason else ""))
    lines.append(f"details: eagle show {view.run_id}")
    return "\n".join(lines)
