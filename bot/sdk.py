"""The skill SDK: what a skill gets (`SkillContext`, its `Host`) and returns (`StepResult`).

A skill is a module in `skills/` with `NAME` (its YAML name), a pydantic `Params`
model (`extra="forbid"`, every field described), a docstring with a YAML example and
`async def run(ctx, params) -> StepResult`: the `Skill` protocol, which mypy checks for
every shipped skill (`eaglebot.engine.shipped`) and the registry checks for plugins at load.
Skills talk to the host only through `ctx.host` (a `Host`) and never import a transport,
asyncssh or slack; this module is all they import from eaglebot besides `eaglebot.errors`
(the import-linter contract says so).
A skill that changes nothing on the host may say `READ_ONLY = True`: a run whose steps are
all read-only takes no host lock (server.logs works while a relaunch holds the host).

A step fails one way: `raise StepFailed(summary, data=..., output=..., warnings=...)` (the
keywords are `StepResult.failed`'s), from the skill or from any helper it calls; a shipped
skill never returns `StepResult.failed` (tests/test_skill_style.py). The engine records the
failure as `StepResult.failed(summary, **keywords)`, so nothing is lost that a returned
result would keep, and a helper deep in `skills/lib` fails the step without every caller
passing a result up. `StepResult.failed` stays for the engine and for plugins.
"""
from __future__ import annotations

import asyncio
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict

Status = Literal["ok", "changed", "skipped", "failed"]
Better = Literal["higher", "lower"]


class SkillParams(BaseModel):
    """Base for every skill's Params: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


LineCallback = Callable[[str, str], None]  # (stream "stdout"/"stderr", line without its newline)


class StreamCallback:
    """An `on_output` that gets each piece of output as the host sent it: a line with its
    newline, the last line without one when the output ended without it, and a line longer
    than the transport's line limit in pieces without one. Concatenated, the pieces are the
    output exactly (invalid UTF-8 kept as surrogate escapes); `ctx.stream()` is one."""

    def __init__(self, fn: Callable[[str, str], None]):
        self.fn = fn


# A plain callable (the original form, kept for third-party skills) or a StreamCallback.
OutputCallback = LineCallback | StreamCallback


@dataclass
class CommandResult:
    exit_status: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0
    signal: str | None = None
    # Bytes of stdout + stderr not kept in `stdout`/`stderr` (the transport keeps a head and
    # a tail of each, so a command that prints gigabytes cannot exhaust the bot's memory).
    cut_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.timed_out


class Host(Protocol):
    """What a skill may do on its host (`ctx.host`); `eaglebot.transport` implements it."""

    name: str

    async def run(self, cmd: str | Sequence[str], *, timeout: float | None = None,
                  on_output: OutputCallback | None = None, env: dict[str, str] | None = None,
                  cwd: str | None = None, stdin: str | None = None) -> CommandResult: ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None: ...

    async def spawn_detached(self, argv: Sequence[str], *, log_path: str, pid_path: str,
                             env: dict[str, str] | None = None, cwd: str | None = None) -> int: ...



_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def path_for_shell(path: str, expand_vars: bool = False) -> str:
    """Quote a path for sh so that the HOST expands a leading `~/` (and, with `expand_vars`, for paths
    the operator's config gives such as `state_dir`, `$NAME` / `${NAME}`), and nothing else: every
    other character stays literal, so a value from a chat message is never a shell fragment."""
    head = ""
    if path == "~" or path.startswith("~/"):
        head, path = '"$HOME"', path[1:]
    parts, pos = [head] if head else [], 0
    for m in (_VAR.finditer(path) if expand_vars else ()):
        if m.start() > pos:
            parts.append(shlex.quote(path[pos:m.start()]))
        parts.append('"${%s}"' % (m.group(1) or m.group(2)))
        pos = m.end()
    if pos < len(path) or not parts:
        parts.append(shlex.quote(path[pos:]))
    return "".join(parts)



@dataclass
class Metric:
    name: str
    value: float
    unit: str = ""
    better: Better = "higher"


@dataclass
class FileChange:
    path: str
    before_sha256: str | None
    after_sha256: str | None
    diff: str = ""
    backup_path: str | None = None


@dataclass
class Regression:
    """A metric judged worse (or better: kind="improvement") than its reference."""

    metric: str
    value: float
    reference: float
    delta_pct: float
    reason: str
    kind: Literal["regression", "improvement"] = "regression"
    host: str = ""


@dataclass
class StepResult:
    status: Status
    summary: str = ""
    metrics: list[Metric] = field(default_factory=list)
    changes: list[FileChange] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    regressions: list[Regression] = field(default_factory=list)
    output: str = ""  # evidence kept with the step (log tail, process table)
    # The step refused what it was asked before changing anything (SGLang's parser refuses a launch
    # argument): a failed run whose failures are all refusals exits 2, as invalid input does.
    usage: bool = False

    @classmethod
    def ok(cls, summary: str = "", **kw: Any) -> "StepResult":
        return cls("ok", summary, **kw)

    @classmethod
    def changed(cls, summary: str = "", **kw: Any) -> "StepResult":
        return cls("changed", summary, **kw)

    @classmethod
    def failed(cls, summary: str, **kw: Any) -> "StepResult":
        return cls("failed", summary, **kw)

    @classmethod
    def skipped(cls, summary: str = "", **kw: Any) -> "StepResult":
        return cls("skipped", summary, **kw)

    def registered(self) -> dict[str, Any]:
        """What `register: name` exposes to later steps' templates."""
        out: dict[str, Any] = dict(self.data)
        out.update(
            status=self.status,
            summary=self.summary,
            failed=self.status == "failed",
            changed=self.status == "changed",
            skipped=self.status == "skipped",
            metrics={m.name: m.value for m in self.metrics},
            warnings=list(self.warnings),
        )
        return out


@dataclass
class ApprovalRequest:
    """What a `confirm` step wants to do that the bot did not start."""

    run_id: int
    host: str
    step: str
    action: str            # one line: "kill 2 processes the bot did not start"
    details: list[str]     # one line per PID: pid, user, command
    step_idx: int = 0


class Approver(Protocol):
    async def __call__(self, request: ApprovalRequest) -> tuple[bool, str]:
        """Return (approved, who-or-why)."""


class AuditView(Protocol):
    """The slice of the audit store a skill may read."""

    async def last_backup(self, host: str, path: str, run_id: int | None = None) -> Mapping[str, Any] | None: ...

    async def last_step_data(self, host: str, skill: str, key: str) -> dict[str, Any] | None:
        """Registered data of the newest step of `skill` on host that recorded `key`."""


@dataclass
class SkillContext:
    host: Host
    host_name: str
    vars: dict[str, Any]
    run_id: int
    step_idx: int
    step_name: str
    dry_run: bool = False
    confirm: bool = False           # the step has `confirm: true`
    state_dir: str = "~/.eaglebot"
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    audit: AuditView | None = None
    _log: Callable[[str], None] = lambda line: None
    _log_text: Callable[[str], None] | None = None  # output as sent (see `stream`)
    _approve: Callable[[ApprovalRequest], Awaitable[tuple[bool, str]]] | None = None
    plan: list[str] = field(default_factory=list)

    def log(self, line: str) -> None:
        """Stream one line into the step's audit output (and the live view)."""
        self._log(line.rstrip("\n"))

    def stream(self) -> StreamCallback:
        """An `on_output` for `ctx.host.run` that streams the command's output into the step's
        audit output byte for byte (NUL, invalid UTF-8 and a last line without a newline too)."""
        text = self._log_text
        if text is None:
            return StreamCallback(lambda _stream, piece: self._log(piece.rstrip("\n")))
        return StreamCallback(lambda _stream, piece: text(piece))

    def would(self, action: str) -> None:
        """Dry-run: record what the step would do."""
        self.plan.append(action)
        self._log(f"[dry-run] would {action}")

    async def approve(self, action: str, details: list[str]) -> tuple[bool, str]:
        """Ask for approval of an action the bot did not start (only when `confirm`)."""
        if not self.confirm:
            return True, "no confirmation required"
        if self._approve is None:
            return False, "nobody to ask"
        req = ApprovalRequest(self.run_id, self.host_name, self.step_name, action, details, self.step_idx)
        return await self._approve(req)


P = TypeVar("P", bound=SkillParams)


@runtime_checkable
class Skill(Protocol[P]):
    """What the engine runs: a skill module (or any object) with these three members.

    `Skill[P]` ties `run`'s params to `Params`: the engine validates a step's `with:` with
    `Params` and hands the result to `run`, so a module whose `run` takes another type does
    not type-check. `READ_ONLY` is not a member (a protocol cannot make one optional): the
    registry reads it once, at load (`SkillRegistry.read_only`).
    """

    @property
    def NAME(self) -> str: ...

    @property
    def Params(self) -> type[P]: ...

    async def run(self, ctx: SkillContext, params: P, /) -> StepResult: ...


# The registry holds skills of many Params types; the engine only ever calls one with
# params its own `Params` validated (`eaglebot.engine.attempts.bind`).
AnySkill = Skill[Any]
