"""The skill SDK: what a skill gets (`SkillContext`, its `Host`) and returns (`StepResult`).

A skill is a module in `eaglebot.skills` with `NAME` (its YAML name), a pydantic `Params`
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
result would keep, and a helper deep in `src/eaglebot/skills/lib` fails the step without every caller
passing a result up. `StepResult.failed` stays for the engine and for plugins.
"""
from __future__ import annotations

import asyncio
import difflib
import re
import shlex
from dataclasses import dataclass, field
from typing import (Any, Awaitable, Callable, Literal, Mapping, Protocol, Sequence, TypeVar, Unpack,
                    runtime_checkable)

from pydantic import BaseModel, ConfigDict

from eaglebot.errors import ResultKeywords, StepFailed

Status = Literal["ok", "changed", "skipped", "failed"]
Better = Literal["higher", "lower"]


class SkillParams(BaseModel):
    """Base for every skill's Params: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


# `Field(..., json_schema_extra=HOST_PATH)` marks a parameter that is a path on the host (or a list
# of them): before the skill runs, the engine turns a `~/...` in it into the host's absolute path
# (`SkillContext.host_path`), so it can go into any command line. tests/test_skill_style.py checks
# that every shipped skill's path-like parameter is marked.
HOST_PATH: dict[str, Any] = {"host_path": True}

# Host vars (eagle.yaml `vars:`, or `-e`) that name paths or programs on the host: once the run has
# reached the host, the engine turns a `~/...` in them into the host's absolute path, so a skill
# reading `ctx.vars["python"]` can put it into any command line.
PATH_VARS = frozenset({"python", "model", "draft", "nvidia_smi", "dmesg", "dcgmi", "fuser", "scontrol", "sinfo",
                       "kubectl", "server_log"})


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



def expand_home(path: str, home: str) -> str:
    """`~` and `~/...` against `home` (the host's $HOME); any other path unchanged (`~user` is not
    expanded: no shipped playbook or skill needs it)."""
    if not home or not (path == "~" or path.startswith("~/")):
        return path
    return home + path[1:] if home != "/" else "/" + path[2:]


@dataclass
class Metric:
    name: str
    value: float
    unit: str = ""
    better: Better = "higher"
    # The configuration class the value was measured under (docs/regressions.md): a value is
    # judged only against earlier values of the same class. "" when the skill does not say.
    config: str = ""


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


# The result keywords with the sdk's records in them (a skill's, and a plugin's, as mypy checks them).
Keywords = ResultKeywords[Metric, FileChange, Regression]


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
    # One sentence on the state the run leaves the host in, for a failed run's last line (relaunch:
    # `no server is running on gpu-01:30000; ...`): the run's error ends with it.
    final: str = ""

    # The keywords are declared once (`ResultKeywords`), so mypy strict catches a misspelt one in
    # a skill or a plugin; at run time an unknown one makes the step fail, naming it, with the
    # skill's own summary kept (`result_of`), instead of a TypeError inside the engine.
    @classmethod
    def ok(cls, summary: str = "", **kw: Unpack[Keywords]) -> StepResult:
        return result_of("ok", summary, kw, "StepResult.ok")

    @classmethod
    def changed(cls, summary: str = "", **kw: Unpack[Keywords]) -> StepResult:
        return result_of("changed", summary, kw, "StepResult.changed")

    @classmethod
    def failed(cls, summary: str, **kw: Unpack[Keywords]) -> StepResult:
        return result_of("failed", summary, kw, "StepResult.failed")

    @classmethod
    def skipped(cls, summary: str = "", **kw: Unpack[Keywords]) -> StepResult:
        return result_of("skipped", summary, kw, "StepResult.skipped")

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


# What a result may carry besides its status and summary, by name (eaglebot.errors.ResultKeywords).
RESULT_FIELDS = tuple(ResultKeywords.__annotations__)


def unknown_keywords(kw: Mapping[str, object], where: str) -> str:
    """'' when every keyword is a result field, else the one sentence that names the first unknown
    one (with the nearest field: `did you mean 'warnings'?`)."""
    bad = [k for k in kw if k not in RESULT_FIELDS]
    if not bad:
        return ""
    near = difflib.get_close_matches(bad[0], RESULT_FIELDS, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else f" (known: {', '.join(RESULT_FIELDS)})"
    return f"{where}() got an unknown keyword {bad[0]!r}{hint}"


def result_of(status: Status, summary: str, kw: Mapping[str, Any], where: str) -> StepResult:
    """A StepResult from keywords a skill gave; an unknown keyword fails the step, saying so."""
    wrong = unknown_keywords(kw, where)
    known = {k: v for k, v in kw.items() if k in RESULT_FIELDS}
    if wrong:
        return StepResult("failed", f"{summary} [the skill's result is invalid: {wrong}]" if summary
                          else f"the skill's result is invalid: {wrong}", **known)
    return StepResult(status, summary, **known)


@dataclass
class Approval:
    """What a plan asks before `apply` runs, when the step has `confirm: true` (an approver, or
    --yes on a terminal, decides; without `confirm` the plan goes ahead, approved by "no
    confirmation required"). `refused(who)` is the failure a refusal raises (default: "<action>:
    not approved (<who>)"): gpu.cleanup's names the processes left holding the GPUs. `log`:
    say "approved by <who>" in the step's output once approved."""

    action: str
    details: list[str]
    refused: Callable[[str], StepFailed] | None = None
    log: bool = False
    by: str = ""        # who approved, once `carry_out` has asked (for `apply`'s summary)
    if_refused: str = ""   # what a deny or no answer leaves as it is: the card says it once decided


@dataclass
class Plan:
    """What a skill decided to do, once it has probed (pyinfra: an operation yields its
    commands, and the engine learns from them whether anything would change): `actions` are
    what a dry-run shows, one `would` line each; `summary` the dry-run's result ("would drain
    gpu-01 in Slurm (idle now)"); `apply` does it. `approve`: an `Approval`, asked first. `data`, `output` and `warnings` go with the dry-run's result too (the
    diff a patch would make). `preview`: the result a dry-run gives instead of `skipped`, for a
    plan whose only change is housekeeping no user asked for (server.stop's stale pid file: the
    step is `ok`, "no server running", either way). `SkillContext.carry_out` previews or applies
    it: the one dry-run branch.

    A read-only skill that a dry-run must not run (a benchmark of the server the dry-run did not
    start, a probe that loads it) plans its measurement the same way: `apply` measures."""

    actions: list[str]
    summary: str
    apply: Callable[[], Awaitable[StepResult]]
    approve: Approval | None = None
    data: dict[str, Any] = field(default_factory=dict)
    output: str = ""
    warnings: list[str] = field(default_factory=list)
    preview: StepResult | None = None


@dataclass
class ApprovalRequest:
    """What a `confirm` step wants to do that the bot did not start."""

    run_id: int
    host: str
    step: str
    action: str            # one line: "kill 2 processes the bot did not start"
    details: list[str]     # one line per PID: pid, user, command
    step_idx: int = 0
    if_refused: str = ""   # what a deny or no answer leaves as it is ("nothing was touched: ...")


class Approver(Protocol):
    async def __call__(self, request: ApprovalRequest) -> tuple[bool, str]:
        """Return (approved, who-or-why)."""


class AuditView(Protocol):
    """The slice of the audit store a skill may read."""

    async def last_backup(self, host: str, path: str, run_id: int | None = None) -> Mapping[str, Any] | None: ...

    async def last_step_data(self, host: str, skill: str, key: str) -> dict[str, Any] | None:
        """Registered data of the newest step of `skill` on host that recorded `key`."""

    async def step_data_history(self, host: str, skills: list[str], contains: str, limit: int = 200,
                                newest_first: bool = False) -> Sequence[Mapping[str, Any]]:
        """Finished steps of `skills` on host whose registered data mentions `contains`, oldest first
        (or newest first): {run_id, skill, status, data (JSON text)}."""

    async def changes(self, run_id: int) -> Sequence[Mapping[str, Any]]:
        """A run's file changes in the order made."""


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
    # The bot's state folder on this host, absolute: resolved by the host itself, once per run,
    # from eagle.yaml's `state_dir` (`~` and $VARS are the host's). "" when the host could not make it.
    state_dir: str = ""
    home: str = ""                  # the host's $HOME (the SSH user's), for `host_path`
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    audit: AuditView | None = None
    _log: Callable[[str], None] = lambda line: None
    _log_text: Callable[[str], None] | None = None  # output as sent (see `stream`)
    _approve: Callable[[ApprovalRequest], Awaitable[tuple[bool, str]]] | None = None
    plan: list[str] = field(default_factory=list)

    def host_path(self, path: str) -> str:
        """A path a user gave (a host var such as `model`, an input) as the host means it: `~/...`
        made absolute against the host's home, any other path unchanged. Use it for every path
        that goes into a command line as an argument: a program does not expand `~` (the engine
        already does it for Params fields marked `host_path`, see `HOST_PATH`)."""
        return expand_home(path, self.home)

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

    def may_run_host_code(self, what: str) -> bool:
        """May the step run code of the host's own (a package's import, a method compiled from
        its files) to learn something? Not in a dry run, which executes nothing of the host's:
        then it logs that `what` was not run, and the step uses what it has without it."""
        if self.dry_run:
            self._log(f"[dry-run] not run: {what} (it executes the host's code)")
            return False
        return True

    def would(self, action: str) -> None:
        """Dry-run: record what the step would do."""
        self.plan.append(action)
        self._log(f"[dry-run] would {action}")

    async def carry_out(self, plan: Plan) -> StepResult:
        """Preview `plan` (a dry-run: its actions logged, the step `skipped`, nothing but the
        probes run) or apply it (after its approval, where it needs one). Skills never read
        `dry_run` themselves (tests/test_skill_style.py): this is where a dry-run differs."""
        if self.dry_run:
            for action in plan.actions:
                self.would(action)
            if plan.preview is not None:
                return plan.preview
            return StepResult.skipped(f"dry-run: {plan.summary}", data=plan.data, output=plan.output,
                                      warnings=list(plan.warnings))
        ask = plan.approve
        if ask is not None:
            ok, who = await self.approve(ask.action, ask.details, ask.if_refused)
            if not ok:
                raise ask.refused(who) if ask.refused is not None else StepFailed(f"{ask.action}: not approved ({who})")
            ask.by = who
            if ask.log:
                self.log(f"approved by {who}")
        return await plan.apply()

    async def approve(self, action: str, details: list[str], if_refused: str = "") -> tuple[bool, str]:
        """Ask for approval of an action the bot did not start (only when `confirm`); `if_refused`:
        what a refusal leaves as it is, for the card once decided."""
        if not self.confirm:
            return True, "no confirmation required"
        if self._approve is None:
            return False, "nobody to ask"
        req = ApprovalRequest(self.run_id, self.host_name, self.step_name, action, details, self.step_idx, if_refused)
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
