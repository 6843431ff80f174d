"""A scripted `Host` to unit-test a skill without a host (as httpx ships `MockTransport` beside
its transports): a team's plugin is tested in milliseconds, on any machine, with the output
its commands really print.

    from eaglebot.testing import Host, Reply, run_skill

    host = Host("gpu-01")
    host.on("nvidia-smi -L", stdout="GPU 0: NVIDIA H200 (UUID: GPU-1)\\n")
    host.on(re.compile(r"^kill "), Reply(exit_status=1, stderr="No such process\\n"))
    host.files["/etc/eagle.json"] = b"{}"
    result = await run_skill(my_skill, host, {"path": "/etc/eagle.json"})
    assert result.status == "changed" and host.commands[0] == "nvidia-smi -L"

What it promises is the real transports' protocol (`eaglebot.sdk.Host`), checked against the
local transport by tests/test_testing_host.py:
- `run` returns a `CommandResult`: `exit_status` is the command's code, 128+N when a signal N
  ended it (`signal` names it); a command still running at `timeout` is `timed_out`, its
  `exit_status` None and `signal` SIGTERM (the transport stops it), with what it printed
  before; `on_output` gets the output line by line (or piece by piece, `StreamCallback`) as
  the transport hands it on, and `stdout`/`stderr` keep the same bounded head and tail.
  No time passes: a hanging command times out at once, `duration_s` says how long it "took".
- `read_file` of a missing file raises FileNotFoundError; `write_file` stores the bytes (the
  mode too, in `modes`); every folder exists.
- `spawn_detached` returns a pid and writes the pid file and an empty log, as the detach
  script does on a real host.
A command nothing scripted raises `Unscripted` (an AssertionError: the test fails, naming it
and what was scripted), so a skill never runs something its test did not expect.
"""
from __future__ import annotations

import errno
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from eaglebot.engine.attempts import bind, checked, failed_result
from eaglebot.errors import EagleError, StepFailed
from eaglebot.sdk import (AnySkill, ApprovalRequest, AuditView, CommandResult, OutputCallback, SkillContext,
                          StepResult)
from eaglebot.sdk import Host as AnyHost
from eaglebot.transport.base import LineSplitter, command_line

__all__ = ["Call", "Host", "Reply", "Spawn", "Unscripted", "context", "run_skill"]

_SIGNALS = {"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGABRT": 6, "SIGKILL": 9, "SIGSEGV": 11, "SIGPIPE": 13,
            "SIGTERM": 15}

Matcher = str | re.Pattern[str] | Callable[[str], bool]


class Unscripted(AssertionError):
    """The skill ran a command (or read a file) its test did not script."""


@dataclass(frozen=True)
class Reply:
    """What a scripted command does: prints `stdout`/`stderr`, then exits with `exit_status`
    (or is killed by `signal`, e.g. "SIGKILL"); `hang`: it never ends (it times out, and a
    call without a timeout is an error: a real one would wait forever); `duration_s`: how
    long it takes (over the call's timeout, it times out)."""

    stdout: str = ""
    stderr: str = ""
    exit_status: int = 0
    signal: str | None = None
    hang: bool = False
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        if self.signal is not None and self.signal not in _SIGNALS:
            raise ValueError(f"unknown signal {self.signal!r} (known: {', '.join(_SIGNALS)})")


@dataclass(frozen=True)
class Call:
    """One `run` the skill made: `cmd` as the skill wrote it (a list joined as the transport
    quotes it), `line` the shell line the transport would send (cd, env, command)."""

    cmd: str
    line: str
    env: dict[str, str] | None
    cwd: str | None
    stdin: str | None
    timeout: float | None


@dataclass(frozen=True)
class Spawn:
    argv: list[str]
    log_path: str
    pid_path: str
    env: dict[str, str] | None
    cwd: str | None
    pid: int


@dataclass
class _Script:
    match: Matcher
    replies: list[Reply]
    used: int = 0

    def matches(self, cmd: str) -> bool:
        if isinstance(self.match, str):
            return cmd == self.match
        if isinstance(self.match, re.Pattern):
            return self.match.search(cmd) is not None
        return bool(self.match(cmd))

    def next(self) -> Reply:
        reply = self.replies[min(self.used, len(self.replies) - 1)]
        self.used += 1
        return reply


class Host:
    """A scripted host (`eaglebot.sdk.Host`): see the module docstring."""

    def __init__(self, name: str = "test-host", *, files: Mapping[str, bytes] | None = None, first_pid: int = 4242):
        self.name = name
        self.files: dict[str, bytes] = dict(files or {})
        self.modes: dict[str, int | None] = {}
        self.calls: list[Call] = []
        self.spawned: list[Spawn] = []
        self._scripts: list[_Script] = []
        self._next_pid = first_pid

    def on(self, match: Matcher, *replies: Reply, stdout: str = "", stderr: str = "", exit_status: int = 0,
           signal: str | None = None, hang: bool = False, duration_s: float = 0.0) -> Host:
        """Script the commands `match` names (the exact text, a regex searched for, or a
        predicate): each call gets the next of `replies`, the last one again and again; with no
        `replies`, the one the keywords describe. The first script that matches answers."""
        chosen = list(replies) or [Reply(stdout, stderr, exit_status, signal, hang, duration_s)]
        self._scripts.append(_Script(match, chosen))
        return self

    @property
    def commands(self) -> list[str]:
        """The commands run so far, in order."""
        return [c.cmd for c in self.calls]

    async def run(self, cmd: str | Sequence[str], *, timeout: float | None = None,
                  on_output: OutputCallback | None = None, env: dict[str, str] | None = None,
                  cwd: str | None = None, stdin: str | None = None) -> CommandResult:
        text = cmd if isinstance(cmd, str) else shlex.join(cmd)
        line = command_line(cmd, env, cwd)   # (raises TransportError where the transport would)
        self.calls.append(Call(text, line, dict(env) if env else None, cwd, stdin, timeout))
        script = next((s for s in self._scripts if s.matches(text)), None)
        if script is None:
            scripted = ", ".join(repr(s.match) for s in self._scripts) or "nothing"
            raise Unscripted(f"{self.name}: unscripted command {text!r} (scripted: {scripted})")
        reply = script.next()
        timed_out = reply.hang or (timeout is not None and reply.duration_s > timeout)
        if timed_out and timeout is None:
            raise Unscripted(f"{self.name}: {text!r} never ends and was run without a timeout")
        out: list[str] = []
        err: list[str] = []
        so, se = LineSplitter("stdout", on_output, out), LineSplitter("stderr", on_output, err)
        so.feed(reply.stdout)
        se.feed(reply.stderr)
        so.close()
        se.close()
        if timed_out:
            assert timeout is not None
            status, sig, took = None, "SIGTERM", timeout
        elif reply.signal is not None:
            status, sig, took = 128 + _SIGNALS[reply.signal], reply.signal, reply.duration_s
        else:
            status, sig, took = reply.exit_status, None, reply.duration_s
        return CommandResult(status, "".join(out), "".join(err), timed_out=timed_out, duration_s=took, signal=sig,
                             cut_bytes=so.cut_bytes + se.cut_bytes)

    async def read_file(self, path: str) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return self.files[path]

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        self.files[path] = bytes(data)
        self.modes[path] = mode

    async def spawn_detached(self, argv: Sequence[str], *, log_path: str, pid_path: str,
                             env: dict[str, str] | None = None, cwd: str | None = None) -> int:
        pid, self._next_pid = self._next_pid, self._next_pid + 1
        self.spawned.append(Spawn(list(argv), log_path, pid_path, dict(env) if env else None, cwd, pid))
        self.files[pid_path] = f"{pid}\n".encode()
        self.files.setdefault(log_path, b"")
        return pid


def context(host: AnyHost, *, vars: Mapping[str, Any] | None = None, dry_run: bool = False, confirm: bool = False,
            approve: Callable[[ApprovalRequest], tuple[bool, str]] | None = None,
            state_dir: str = "/home/eagle/.eaglebot", home: str = "/home/eagle", run_id: int = 1,
            step_name: str = "test", audit: AuditView | None = None, log: list[str] | None = None) -> SkillContext:
    """A `SkillContext` on `host` (the double, or a real transport) as the engine builds one: the state folder and home already
    resolved (absolute), `log` (if given) collecting the lines the skill logs, `approve`
    answering a `confirm: true` step's approval requests (none: nobody to ask)."""
    lines = log if log is not None else []

    async def asked(req: ApprovalRequest) -> tuple[bool, str]:
        assert approve is not None
        return approve(req)

    return SkillContext(host=host, host_name=host.name, vars=dict(vars or {}), run_id=run_id, step_idx=0,
                        step_name=step_name, dry_run=dry_run, confirm=confirm, state_dir=state_dir, home=home,
                        audit=audit, _log=lines.append, _approve=asked if approve is not None else None)


async def run_skill(skill: AnySkill, host: AnyHost, with_: Mapping[str, object] | None = None, *,
                    ctx: SkillContext | None = None, **context_kw: Any) -> StepResult:
    """One step of `skill` on `host` as the engine runs it: `with_` validated by its Params (a
    pydantic ValidationError for a bad one, as `eagle lint` reports), a `~/...` in a HOST_PATH
    field made the host's, a raised StepFailed (or transport error) recorded as the failed
    result, a malformed result failed naming what is wrong. Any other exception propagates, so
    the test shows its traceback. `context_kw` go to `context()` when no `ctx` is given."""
    sctx = ctx if ctx is not None else context(host, **context_kw)
    bound = bind(skill, dict(with_ or {}), host_path=sctx.host_path)
    try:
        res = await bound.run(sctx)
    except StepFailed as e:
        return failed_result(e)
    except EagleError as e:
        return StepResult.failed(str(e))
    return checked(res, str(getattr(skill, "NAME", "skill")))
