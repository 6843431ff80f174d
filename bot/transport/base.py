"""The transport protocol (the sdk's `Host` plus `close`) and the shell lines every transport sends.

Every command runs in its own session so a timeout or a cancellation can signal its
whole process group, TERM then KILL: closing an SSH channel without a PTY does not stop
the remote command.
"""
from __future__ import annotations

import contextvars
import shlex
from dataclasses import dataclass, field
from typing import Callable, Literal, Protocol, Sequence

from eaglebot.errors import TransportError
from eaglebot.sdk import Host, OutputCallback, StreamCallback, path_for_shell

PGID_TAG = "\x1eEAGLE-PGID "
KILL_GRACE_S = 2.0
# Exec mode: once a command's process has exited, how long its output may still take to drain.
# A background child that holds the output open past this is cut off (and stopped at the end
# of the step), so it neither holds the step nor writes into another one.
DRAIN_S = 0.5
# Every process a step starts carries this variable (value: the step's tag) in its
# environment, so descendants that left the process group (setsid, double forks) are
# still found and stopped. Detached servers (spawn_detached) drop it: they are meant to live.
TAG_VAR = "EAGLE_PROC_TAG"


@dataclass
class StepProcs:
    """What one step started on its host, as the transport reports it to the engine.

    The engine sets `CURRENT` (a context variable, so concurrent steps never mix) before a
    step runs; the transport tags every command with `tag`, records each process group it
    learns in `pgids`, and says in `notes` what a kill did.
    """

    tag: str
    pgids: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # The host's boot-clock seconds when the step's first command started (transport/leftovers.py
    # finds the step's processes by it), and the sessions of servers it started on purpose.
    since: float | None = None
    keep: list[int] = field(default_factory=list)
    # none: nothing had to be killed; stopped: killed and verified gone;
    # pending: not stopped (the host was unreachable or something survived KILL)
    state: Literal["none", "stopped", "pending"] = "none"

    def stopped(self, note: str) -> None:
        self.notes.append(note)
        if self.state == "none":
            self.state = "stopped"

    def pending(self, note: str) -> None:
        self.notes.append(note)
        self.state = "pending"


CURRENT: contextvars.ContextVar[StepProcs | None] = contextvars.ContextVar("eagle_step_procs", default=None)


def current_tag() -> str | None:
    sp = CURRENT.get()
    return sp.tag if sp is not None else None


def note_pgid(pgid: int, since: float | None = None) -> None:
    """A command of the running step leads process group `pgid`; it started at `since` (the
    host's boot clock, seconds), when known."""
    sp = CURRENT.get()
    if sp is None:
        return
    if pgid not in sp.pgids:
        sp.pgids.append(pgid)
    if since is not None and (sp.since is None or since < sp.since):
        sp.since = since


def note_kept(pid: int) -> None:
    """The running step started a server meant to outlive it (its session is spared)."""
    sp = CURRENT.get()
    if sp is not None and pid not in sp.keep:
        sp.keep.append(pid)


def parse_pgid(text: str) -> tuple[int, float | None] | None:
    """`<pgid> [<uptime seconds>]` of a PGID line or frame."""
    words = text.split()
    if not words or not words[0].isdigit():
        return None
    since = None
    if len(words) > 1:
        try:
            since = float(words[1])
        except ValueError:
            since = None
    return int(words[0]), since


def valid_tag(tag: str) -> str:
    if not tag or not all(c.isalnum() or c in "-_." for c in tag):
        raise TransportError(f"invalid process tag {tag!r}")
    return tag


class Transport(Host, Protocol):
    """A host as the engine holds it: the sdk's `Host` (all a skill may do) plus `close`."""

    async def close(self) -> None: ...

    async def cleanup(self, tag: str | None, pgids: list[int] | None = None, *, record: bool = False,
                      since_wall: float | None = None) -> str:
        """Stop process groups `pgids` and every process of the step tagged `tag`
        (transport/leftovers.py); `record`: of the running step (`CURRENT`, whose start and kept
        servers the sweep uses, and which records what the kill did); `since_wall`: of an
        earlier run's step, by its start (unix time). One sentence back."""
        ...

    async def leftovers(self, sp: StepProcs) -> tuple[int, str]:
        """At the end of a step: stop what it left running (transport/leftovers.py: its groups,
        whatever descends from its commands, their orphans, its tag). (how many were found,
        one sentence); (0, "") when none was left."""
        ...



def command_line(cmd: str | Sequence[str], env: dict[str, str] | None, cwd: str | None) -> str:
    """One `sh` command line: cd, env assignments, then the command, all quoted."""
    body = cmd if isinstance(cmd, str) else shlex.join(cmd)
    prefix = ""
    if env:
        for k in env:
            if not k.replace("_", "a").isalnum() or k[0].isdigit():
                raise TransportError(f"invalid environment variable name {k!r}")
        prefix = "export " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items()) + "; "
    if cwd:
        prefix = f"cd {shlex.quote(cwd)} && " + prefix
    line = prefix + body
    if "\x00" in line:  # it would cut the command short, and over SSH break the channel
        raise TransportError("a command cannot contain a NUL byte")
    return line


def session_wrapped(cmd: str | Sequence[str], env: dict[str, str] | None = None,
                    cwd: str | None = None) -> str:
    """Announce the command's process group on stderr, then run it.

    OpenSSH starts every command as a session leader (sshd calls setsid() for it), so
    the shell's own pid is the process group to signal on timeout or cancel; this costs
    no extra process (an `exec setsid sh -c` wrapper cost ~1 ms a command). The login
    shell of the remote user must be POSIX (sh, dash, bash, zsh).
    """
    tag = current_tag()
    mark = f"export {TAG_VAR}={shlex.quote(valid_tag(tag))}; " if tag else ""
    # With its start on the host's boot clock (a builtin read, no fork): the step's processes
    # are those started since its first command (transport/leftovers.py).
    return (mark + 'read -r eagle_up _ </proc/uptime 2>/dev/null; '
            'printf "\\036EAGLE-PGID %s %s\\n" "$$" "$eagle_up" >&2; unset eagle_up; ' + command_line(cmd, env, cwd))


def detach_script(argv: Sequence[str], log_path: str, pid_path: str,
                  env: dict[str, str] | None, cwd: str | None) -> str:
    """Shell that starts argv in a new session, logs to log_path and writes its pid.

    The step's tag is unset before the fork, so the detached process never carries it, not
    even between its start and its exec (it outlives its step on purpose: a server)."""
    body = command_line(["exec", *argv], env, cwd)
    q = path_for_shell
    return (
        f"unset {TAG_VAR}; "
        f"mkdir -p \"$(dirname {q(log_path)})\" \"$(dirname {q(pid_path)})\" || exit 1; "
        # Not a process-group leader in a non-interactive shell, so setsid does not fork:
        # $! is the new session's leader, the pid we record.
        f"setsid sh -c {q(body)} </dev/null >{q(log_path)} 2>&1 & "
        # Wait until it leads its own session: the end of the step stops what is left of the
        # command's process group, and it must not catch this one.
        "pid=$!; i=0; while [ $i -lt 1000 ] && kill -0 \"$pid\" 2>/dev/null && "
        "[ \"$(ps -o sid= -p \"$pid\" | tr -d ' ')\" != \"$pid\" ]; do i=$((i+1)); sleep 0.01; done; "
        f"printf '%s\\n' \"$pid\" > {q(pid_path)}.tmp && mv {q(pid_path)}.tmp {q(pid_path)} && echo \"$pid\""
    )


# A "line" handed on is at most LINE_MAX characters: output without newlines is never
# buffered whole. What a command's `CommandResult.stdout`/`stderr` keeps: about the first
# SINK_HEAD and the last SINK_TAIL characters (up to twice that before a trim), the rest
# counted as cut; in pieces of one read each (a list of short lines costs ~60 bytes a line).
LINE_MAX = 64 * 1024
SINK_HEAD = 2 * 1024 * 1024
SINK_TAIL = 2 * 1024 * 1024


def _nbytes(s: str) -> int:
    return len(s.encode("utf-8", "surrogateescape"))


class LineSplitter:
    """Splits a decoded stream into lines for `cb` and keeps a bounded head and tail in `sink`.

    `sink` holds the head pieces, then the tail pieces; `cut_bytes` counts what was dropped
    between them."""

    def __init__(self, stream: str, cb: OutputCallback | None, sink: list[str],
                 on_pgid: Callable[[int, float | None], None] | None = None):
        self.stream, self.cb, self.sink, self.buf, self.on_pgid = stream, cb, sink, "", on_pgid
        self.head_n = 0          # pieces of sink that are the head
        self.head_chars = 0
        self.tail_chars = 0
        self.cut_bytes = 0

    def feed(self, chunk: str) -> None:
        buf = self.buf + chunk if self.buf else chunk
        start = 0
        kept: list[str] = []
        while True:
            j = buf.find("\n", start)
            if j < 0 or j - start >= LINE_MAX:
                if len(buf) - start < LINE_MAX:
                    break
                j = start + LINE_MAX - 1  # a piece without its newline
            self._line(buf[start:j + 1], kept)
            start = j + 1
        self.buf = buf[start:]
        if kept:
            self._keep("".join(kept))

    def close(self) -> None:
        if self.buf:
            kept: list[str] = []
            self._line(self.buf, kept)
            self.buf = ""
            if kept:
                self._keep(kept[0])
        self._trim(SINK_TAIL)

    def _line(self, line: str, kept: list[str]) -> None:
        if self.on_pgid is not None:
            # Only the first line can be the wrapper's announcement: it is printed before the
            # command runs, so a later one is the command's own (a forgery) and stays output.
            hook, self.on_pgid = self.on_pgid, None
            found = parse_pgid(line[len(PGID_TAG):]) if line.startswith(PGID_TAG) else None
            if found is not None:
                hook(*found)
                return
        kept.append(line)
        cb = self.cb
        if cb is None:
            return
        if isinstance(cb, StreamCallback):
            cb.fn(self.stream, line)
        else:
            cb(self.stream, line[:-1] if line.endswith("\n") else line)

    def _keep(self, piece: str) -> None:
        self.sink.append(piece)
        if self.head_n == len(self.sink) - 1 and self.head_chars + len(piece) <= SINK_HEAD:
            self.head_n += 1
            self.head_chars += len(piece)
            return
        self.tail_chars += len(piece)
        if self.tail_chars > 2 * SINK_TAIL:  # trimmed in batches: one slice delete, not one per piece
            self._trim(SINK_TAIL)

    def _trim(self, keep: int) -> None:
        if self.tail_chars <= keep:
            return
        i = self.head_n
        while i < len(self.sink) and self.tail_chars - len(self.sink[i]) >= keep:
            self.tail_chars -= len(self.sink[i])
            self.cut_bytes += _nbytes(self.sink[i])
            i += 1
        del self.sink[self.head_n:i]
