"""`eagle serve`'s log for operators: one INFO line per action on the `eaglebot.audit` logger.

A command, a run's start and end, an approval asked and decided, a reload and a rejection
each write exactly one line that says who, what, where (hosts), the outcome and the run id:

    eaglebot.audit: command user=U123 text="hello sim" run=#12 playbook=hello hosts=sim outcome=succeeded exit_code=0 duration_s=3.2
    eaglebot.audit: run #12 started playbook=bench hosts=gpu-01 by=schedule:nightly origin=schedule
    eaglebot.audit: run #12 finished succeeded playbook=bench hosts=gpu-01 by=schedule:nightly exit_code=0 duration_s=412.0

A command that starts a run is ONE line, written when the run ends: who typed what, the run
id, its hosts and outcome (so one `/eagle hello` is one line). A command that starts no run
is its line when its answer comes. A run started otherwise (a schedule, the health watch, a
sweep's later points) gets a start line and an end line. Libraries (asyncssh, Bolt, slack_sdk, APScheduler, aiohttp's access log) log at WARNING
unless `eagle serve --verbose`. `log_format: json` writes one JSON object per line with
`ts`, `level`, `logger`, `msg` and the line's fields, for journald or Loki.
"""
from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import sys
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from eaglebot.engine.playbook import Playbook
from eaglebot.engine.records import Observer, RunOutcome, RunRequest

log = logging.getLogger("eaglebot.audit")

LIBRARIES = ("asyncssh", "slack_bolt", "slack_sdk", "apscheduler", "aiohttp.access", "aiohttp.server")
Field = str | int | float | bool | list[str] | None
_FIELDS = "eagle_fields"   # the LogRecord attribute that carries a line's structured fields


def _value(v: Field) -> str:
    if isinstance(v, list):
        return ",".join(v) or "-"
    if isinstance(v, str) and (not v or any(c in v for c in ' "=\\\n')):
        return json.dumps(v)
    return str(v)


def line(event: str, head: str = "", *, run_id: int | None = None, level: int = logging.INFO,
         **fields: Field) -> None:
    """One line (INFO unless `level`: a refusal an operator must see is a WARNING): `head`
    (e.g. "run #12 finished succeeded"), else `event`, then key=value. The fields also go,
    typed, into the JSON form; `run_id` (named in `head`) only there, as `run`."""
    if run_id is not None:
        fields = {"run": run_id, **fields}
    # (a run id reads `run=#12` in text, as Slack shows it; it stays a number in JSON)
    parts = [head or event, *(f"{k}={'#' if k == 'run' else ''}{_value(v)}" for k, v in fields.items()
                              if v is not None and not (k == "run" and run_id is not None))]
    log.log(level, " ".join(parts), extra={_FIELDS: {"event": event, **{k: v for k, v in fields.items() if v is not None}}})


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        extra = getattr(record, _FIELDS, None)
        if isinstance(extra, dict):
            out.update({k: v for k, v in extra.items() if k not in out})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(fmt: str = "text", *, verbose: bool = False, level: str = "INFO") -> logging.Handler:
    """The root handler on stderr in `fmt`; libraries at WARNING unless verbose. Called at
    start and again on a reload (a changed log_format takes effect)."""
    root = logging.getLogger()
    handler = next((h for h in root.handlers if getattr(h, "eagle", False)), None)
    if handler is None:
        handler = logging.StreamHandler(sys.stderr)
        setattr(handler, "eagle", True)
        root.addHandler(handler)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root.setLevel(level)
    for name in LIBRARIES:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.WARNING)
    return handler


# -- commands ----------------------------------------------------------------------------
@dataclass
class CommandLine:
    """The one line of a command, written once: when the run it started ends, or when its
    answer came for a command that started none."""
    user: str
    text: str
    emitted: bool = False

    def emit(self, *, run: int | None = None, playbook: str | None = None, hosts: list[str] | None = None,
             outcome: str | None = None, error: str | None = None) -> None:
        if self.emitted:
            return
        self.emitted = True
        line("command", user=self.user, text=self.text, run=run,
             playbook=playbook, hosts=hosts, outcome=outcome, error=error)

    def defer(self, run: asyncio.Task[Any]) -> None:
        """This command started the run that the task `run` runs: its one line is written when
        that run ends (by the `RunLog` watching the engine, inside that task)."""
        if not self.emitted:
            self.emitted = True
            _AT_RUN_END[run] = self

    def reject(self, why: str) -> None:
        if not self.emitted:
            self.emitted = True
            rejected(self.user, self.text, why)


# A run's task -> the command whose one line the run's end writes. Keyed by the task (weakly),
# not the run id: ids repeat across stores, and a task that ends unwatched leaves nothing behind.
_AT_RUN_END: weakref.WeakKeyDictionary[asyncio.Task[Any], CommandLine] = weakref.WeakKeyDictionary()
_CURRENT: contextvars.ContextVar[CommandLine | None] = contextvars.ContextVar("eagle_command", default=None)


@contextmanager
def command(user: str, text: str) -> Iterator[CommandLine]:
    """The scope of one command: runs it starts (their tasks copy this context) know whose they are."""
    cl = CommandLine(user, text)
    token = _CURRENT.set(cl)
    try:
        yield cl
    finally:
        _CURRENT.reset(token)


@contextmanager
def outside_command() -> Iterator[None]:
    """Work a command sets going that is not its own (a reload's new scheduler and health
    watch): the tasks it starts copy a context with no command, so their runs are not its."""
    token = _CURRENT.set(None)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def rejected(user: str, text: str, why: str) -> None:
    line("rejected", user=user, text=text, why=why)


# -- runs --------------------------------------------------------------------------------
class RunLog(Observer):
    """Every run of the engine (a watcher): its start and its end, or, for a run a command
    started, that command's one line at its end."""

    def __init__(self, redact: Callable[[str], str]):
        self.redact = redact
        self._started: dict[int, tuple[float, str]] = {}   # run id -> (monotonic start, who)

    async def run_started(self, run_id: int, playbook: Playbook, hosts: list[str], req: RunRequest) -> None:
        self._started[run_id] = (time.monotonic(), req.actor)
        cl = _CURRENT.get()
        task = asyncio.current_task()
        if cl is not None and not cl.emitted and task is not None:
            cl.defer(task)            # its one line is written when the run ends
            return
        if task is not None and task in _AT_RUN_END:   # its command's line, at its end
            return
        line("run_started", f"run #{run_id} started", run_id=run_id, playbook=playbook.name, hosts=hosts, by=req.actor,
             origin=req.origin, schedule=req.schedule, dry_run=req.dry_run or None)

    async def run_finished(self, outcome: RunOutcome) -> None:
        t0, who = self._started.pop(outcome.run_id, (None, None))
        took = round(time.monotonic() - t0, 1) if t0 is not None else None
        error = self.redact(outcome.error)[:300] if outcome.error and outcome.status != "succeeded" else None
        task = asyncio.current_task()
        cl = _AT_RUN_END.pop(task, None) if task is not None else None
        if cl is not None:
            line("command", user=cl.user, text=cl.text, run=outcome.run_id, playbook=outcome.playbook,
                 hosts=outcome.hosts, outcome=outcome.status, exit_code=outcome.exit_code, error=error, duration_s=took)
            return
        line("run_finished", f"run #{outcome.run_id} finished {outcome.status}", run_id=outcome.run_id,
             playbook=outcome.playbook,
             hosts=outcome.hosts, by=who, exit_code=outcome.exit_code,
             error=error, duration_s=took)
