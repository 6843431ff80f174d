"""What one run is made of, as the engine sees it: the request, each step's record, the
outcome, who watches (`Observer`) and the state every step of a run shares (`RunState`).

Plain data and small pure helpers; the run lifecycle is `runner`, one step is `steps`.
"""
from __future__ import annotations

import asyncio
import getpass
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from eaglebot.engine import templating
from eaglebot.engine.playbook import Playbook, Step
from eaglebot.errors import StoreError
from eaglebot.facts.host.paths import HostPaths
from eaglebot.sdk import ApprovalRequest, Metric, Regression, StepResult

log = logging.getLogger("eaglebot.engine")

# The origins of runs asked for by a chat user: `access` (a playbook's allowlist) applies to them.
# The CLI's runs (`eagle run`, `eagle chat`) are the login's, not subject to `access`.
CHAT_ORIGINS = frozenset({"slack"})


@dataclass
class RunRequest:
    playbook: str | Playbook
    hosts: list[str] | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    actor: str = field(default_factory=getpass.getuser)
    origin: str = "cli"              # cli | slack | schedule | watch (health_watch.auto_drain)
    dry_run: bool = False
    assume_yes: bool = False
    rerun_of: int | None = None
    parent_run_id: int | None = None  # the tune/sweep/bisect run that started this one (a child)
    schedule: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    text: str | None = None          # what the person typed (audited when the request is refused)
    batch: str | None = None         # hosts per batch, N or P% (default: the playbook's `batch`)
    max_fail: str | None = None      # hosts that may fail before no new batch starts, N or P%
    force: bool = False              # run on a quarantined host (an approver's call; audited)


@dataclass
class StepRecord:
    host: str
    idx: int
    section: str
    name: str
    skill: str
    status: str
    summary: str = ""
    duration_ms: int = 0
    attempts: int = 0
    output_tail: str = ""
    step_id: int | None = None
    tolerated: bool = False  # failed under continue_on_error: a warning, not a failure
    usage: bool = False      # failed refusing its input before changing anything (StepResult.usage)


@dataclass
class RunOutcome:
    """What a run did, as the engine saw it live; the front ends show a run from the audit
    store (`eaglebot.history.view.RunView`), the one view every front end shares."""

    run_id: int
    playbook: str
    hosts: list[str]
    status: str
    exit_code: int
    steps: list[StepRecord] = field(default_factory=list)
    metrics: list[tuple[str, Metric]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    regressions: list[Regression] = field(default_factory=list)
    error: str | None = None
    dry_run: bool = False
    plan: list[str] = field(default_factory=list)
    untouched: list[str] = field(default_factory=list)  # never started: the failure budget was spent
    finals: list[str] = field(default_factory=list)     # the state steps say a run leaves its hosts in

    def bad_hosts(self) -> list[str]:
        """Hosts with a failed step (not under continue_on_error) or that were unreachable."""
        out: list[str] = []
        for s in self.steps:
            if (s.status == "unreachable" or (s.status == "failed" and not s.tolerated)) and s.host not in out:
                out.append(s.host)
        return out


class Observer:
    """Receives progress. Every method is optional and must not raise into the engine."""

    async def run_started(self, run_id: int, playbook: Playbook, hosts: list[str], req: RunRequest) -> None: ...

    async def step_started(self, run_id: int, rec: StepRecord) -> None: ...

    def step_output(self, run_id: int, rec: StepRecord, line: str) -> None: ...

    async def step_finished(self, run_id: int, rec: StepRecord, result: StepResult) -> None: ...

    async def step_heartbeat(self, run_id: int, rec: StepRecord, elapsed_s: float, last_line: str) -> None: ...

    async def run_finished(self, outcome: RunOutcome) -> None: ...


class Tee(Observer):
    """The run's own observer, then each watcher; one that raises does not stop the others."""

    def __init__(self, first: Observer, watchers: list[Observer]):
        self.all = [first, *watchers]

    async def run_started(self, run_id: int, playbook: Playbook, hosts: list[str], req: RunRequest) -> None:
        for o in self.all:
            await safe(o.run_started(run_id, playbook, hosts, req))

    async def step_started(self, run_id: int, rec: StepRecord) -> None:
        for o in self.all:
            await safe(o.step_started(run_id, rec))

    def step_output(self, run_id: int, rec: StepRecord, line: str) -> None:
        for o in self.all:
            try:
                o.step_output(run_id, rec, line)
            except Exception:
                log.exception("observer failed")

    async def step_finished(self, run_id: int, rec: StepRecord, result: StepResult) -> None:
        for o in self.all:
            await safe(o.step_finished(run_id, rec, result))

    async def step_heartbeat(self, run_id: int, rec: StepRecord, elapsed_s: float, last_line: str) -> None:
        for o in self.all:
            await safe(o.step_heartbeat(run_id, rec, elapsed_s, last_line))

    async def run_finished(self, outcome: RunOutcome) -> None:
        for o in self.all:
            await safe(o.run_finished(outcome))


Approver = Callable[[ApprovalRequest], Awaitable[tuple[bool, str]]]


async def safe(coro_or_none: Awaitable[None] | None) -> None:
    if coro_or_none is None:
        return
    try:
        await coro_or_none
    except Exception:  # an observer (Slack, terminal) never fails a run
        log.exception("observer failed")


@dataclass
class Prepared:
    playbook: Playbook
    hosts: list[str]
    inputs: dict[str, Any]
    batch: str | None = None
    max_fail: str | None = None
    warnings: list[str] = field(default_factory=list)   # the pre-flight's, recorded with the run


@dataclass
class RunState:
    """What every step of one run shares: the request, who watches, who approves, the
    run's cancellation and the outcome being built."""

    run_id: int
    req: RunRequest
    playbook: Playbook
    observer: Observer
    approver: Approver | None
    cancel: asyncio.Event
    outcome: RunOutcome
    store_error: str | None = None  # the audit store failed mid-run: the run fails, `always` still runs
    # Per host: its home and state folder as the host resolved them when the run reached it.
    paths: dict[str, HostPaths] = field(default_factory=dict)
    warned: set[str] = field(default_factory=set)   # "host: text" of each step warning raised so far

    def new_warnings(self, host: str, warnings: list[str]) -> list[str]:
        """The step warnings not raised on `host` earlier in this run: one that several steps predict
        (the launch check and the launch both foresee SGLang's draft-token rewrite) is said once."""
        out = []
        for w in warnings:
            if f"{host}: {w}" not in self.warned:
                self.warned.add(f"{host}: {w}")
                out.append(w)
        return out

    def store_failed(self, e: StoreError) -> None:
        if self.store_error is None:
            self.store_error = str(e)
            log.error("run #%s: %s; the run stops here, its always-steps still run (they may not be recorded)",
                      self.run_id, e)

    def conclude(self) -> None:
        """The run's status and exit code from its steps (docs/cli.md, "Exit codes and output": 1 wins over 3)."""
        o = self.outcome
        failed = [s for s in o.steps if s.status == "failed" and not s.tolerated]
        unreachable = list(dict.fromkeys(s.host for s in o.steps if s.status == "unreachable"))
        spent = (f"; the failure budget was spent: {len(o.untouched)} host(s) untouched" if o.untouched else "")
        if self.store_error is not None:
            o.status, o.exit_code = "failed", 1
            o.error = o.error or f"the audit store failed: {self.store_error}"
        elif self.cancel.is_set():
            o.status, o.exit_code = "cancelled", 1
        elif failed:
            o.status, o.exit_code = "failed", (2 if all(s.usage for s in failed) else 1)
            o.error = o.error or f"{failed[0].host}: {failed[0].name}: {failed[0].summary}{spent}"
            # the state the hosts are left in ends the run's last line (a relaunch that left no server)
            o.error += "".join(f"; {f}" for f in o.finals if f not in o.error)
        elif unreachable:
            # exit 4: nothing failed, but not every host was reached (docs/cli.md, "Exit codes and output")
            o.status, o.exit_code = "unreachable", 4
            o.error = o.error or (f"{len(unreachable)} host(s) unreachable: {', '.join(unreachable[:10])}"
                                  f"{' …' if len(unreachable) > 10 else ''}{spent}")
        else:
            o.status = "succeeded"
            o.exit_code = 3 if any(r.kind == "regression" for r in o.regressions) else 0


@dataclass(frozen=True)
class StepSlot:
    """Where a step runs: its host, its index in the run (`steps.idx`) and its section."""

    host: str
    idx: int
    section: str
    step: Step


_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.,/-]{0,127}$")


def plain_name(name: str) -> str:
    """A run, host or input name as stored or echoed: as given when it is a plain name, else
    a placeholder (a name is never a vehicle for control characters, markup or a bomb)."""
    return name if _PLAIN.match(name) else "(invalid name)"


def jsonable(v: object) -> object:
    """A value as the audit store keeps it: JSON types only, unresolved variables left out."""
    if templating.is_unresolved(v):
        return None
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items() if not templating.is_unresolved(x)}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)  # a Path, a datetime, …
