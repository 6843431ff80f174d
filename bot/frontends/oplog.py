"""`eagle serve`'s log for operators: one INFO line per action on the `eaglebot.audit` logger.

A command, a run's start and end, an approval asked and decided, a reload and a rejection
each write exactly one line that says who, what, where (hosts), the outcome and the run id:

    eaglebot.audit: command user=U123 text="hello sim" run=#12 playbook=hello hosts=sim
    eaglebot.audit: run #12 finished succeeded playbook=hello hosts=sim by=U123 in 3.2s

A run started by a command is announced by the command's line (it names the run); a run
started otherwise (a schedule, the health watch, a sweep's later points) gets its own start
line. Libraries (asyncssh, Bolt, slack_sdk, APScheduler, aiohttp's access log) log at WARNING
unless `eagle serve --verbose`. `log_format: json` writes one JSON object per line with
`ts`, `level`, `logger`, `msg` and the line's fields, for journald or Loki.
"""
from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterator

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


def line(event: str, head: str = "", *, run_id: int | None = None, **fields: Field) -> None:
    """One INFO line: `head` (e.g. "run #12 finished succeeded"), else `event`, then key=value.
    The fields also go, typed, into the JSON form; `run_id` (named in `head`) only there, as `run`."""
    if run_id is not None:
        fields = {"run": run_id, **fields}
    # (a run id reads `run=#12` in text, as Slack shows it; it stays a number in JSON)
    parts = [head or event, *(f"{k}={'#' if k == 'run' else ''}{_value(v)}" for k, v in fields.items()
                              if v is not None and not (k == "run" and run_id is not None))]
    log.info(" ".join(parts), extra={_FIELDS: {"event": event, **{k: v for k, v in fields.items() if v is not None}}})


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
    """The one line of a command, written once: when it started a run (naming it), or when
    its answer came, whichever is first."""
    user: str
    text: str
    emitted: bool = False
    runs: set[int] = field(default_factory=set)

    def emit(self, *, run: int | None = None, playbook: str | None = None, hosts: list[str] | None = None,
             outcome: str | None = None, error: str | None = None) -> None:
        if self.emitted:
            return
        self.emitted = True
        if run is not None:
            self.runs.add(run)
        line("command", user=self.user, text=self.text, run=run,
             playbook=playbook, hosts=hosts, outcome=outcome, error=error)

    def reject(self, why: str) -> None:
        if not self.emitted:
            self.emitted = True
            rejected(self.user, self.text, why)


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


def rejected(user: str, text: str, why: str) -> None:
    line("rejected", user=user, text=text, why=why)


# -- runs --------------------------------------------------------------------------------
class RunLog(Observer):
    """Every run of the engine (a watcher): its start (unless its command's line named it)
    and its end."""

    def __init__(self, redact: Callable[[str], str]):
        self.redact = redact
        self._started: dict[int, tuple[float, str]] = {}   # run id -> (monotonic start, who)

    async def run_started(self, run_id: int, playbook: Playbook, hosts: list[str], req: RunRequest) -> None:
        self._started[run_id] = (time.monotonic(), req.actor)
        cl = _CURRENT.get()
        if cl is not None and not cl.emitted:
            cl.emit(run=run_id, playbook=playbook.name, hosts=hosts)
            return
        if cl is not None and run_id in cl.runs:
            return
        line("run_started", f"run #{run_id} started", run_id=run_id, playbook=playbook.name, hosts=hosts, by=req.actor,
             origin=req.origin, schedule=req.schedule, dry_run=req.dry_run or None)

    async def run_finished(self, outcome: RunOutcome) -> None:
        t0, who = self._started.pop(outcome.run_id, (None, None))
        took = round(time.monotonic() - t0, 1) if t0 is not None else None
        line("run_finished", f"run #{outcome.run_id} finished {outcome.status}", run_id=outcome.run_id,
             playbook=outcome.playbook,
             hosts=outcome.hosts, by=who, exit_code=outcome.exit_code,
             error=self.redact(outcome.error)[:300] if outcome.error and outcome.status != "succeeded" else None,
             duration_s=took)
