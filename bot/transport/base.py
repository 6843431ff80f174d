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
# The run a command belongs to (set by the engine for the run's task and everything it starts):
# a persistent shell is owned by one run and closed when it ends (transport.shell).
RUN: contextvars.ContextVar[int | None] = contextvars.ContextVar("eagle_run", default=None)


def current_tag() -> str | None:
    sp = CURRENT.get()
    return sp.tag if sp is not None else None


def note_pgid(pgid: int) -> None:
    sp = CURRENT.get()
    if sp is not None and pgid not in sp.pgids:
        sp.pgids.append(pgid)


def valid_tag(tag: str) -> str:
    if not tag or not all(c.isalnum() or c in "-_." for c in tag):
        raise TransportError(f"invalid process tag {tag!r}")
    return tag


def kill_script(tag: str | None, pgids: Sequence[int] = (), now: Sequence[int] = (),
                cont: Sequence[int] = ()) -> str:
    """sh that stops process groups `pgids`, the sessions they lead, and every process whose
    environment carries `TAG_VAR=tag` (setsid descendants too): TERM, up to KILL_GRACE_S, then
    KILL; `now` (a wedged shell) gets KILL at once; `cont` (a stopped sshd) gets CONT. It prints `EAGLE-KILL <found> <left>`: how
    many processes it found and how many are left. The usual case, nothing to stop, costs one
    `grep` (it runs at the end of every step)."""
    groups = " ".join(str(int(g)) for g in pgids)
    mark = shlex.quote(TAG_VAR + "=" + valid_tag(tag)) if tag else ""
    find = ""
    if tag:
        find = (f'grep -lzx {mark} /proc/[0-9]*/environ 2>/dev/null '
                '| while IFS=/ read -r _ _ p _; do [ "$p" = "$$" ] || echo "$p"; done; ')
    if groups:
        find += ('ps -e -o pid= -o pgid= -o sid= -o stat= 2>/dev/null | while read -r p g s st; do '
                 f'case "$st" in Z*) continue;; esac; for x in {groups}; do '
                 'if [ "$g" = "$x" ] || [ "$s" = "$x" ]; then echo "$p"; break; fi; done; done; ')
    # The usual case, nothing left, is answered without `ps`: a group has a member (`kill -0`,
    # a builtin) or a process carries the tag (one grep). Only then is every process listed.
    probe = "".join(f'kill -0 -{int(g)} 2>/dev/null || ' for g in pgids)
    if tag:
        probe += f'grep -qlzx {mark} /proc/[0-9]*/environ 2>/dev/null || '
    ticks = int(KILL_GRACE_S * 10)
    first = "".join(f"kill -KILL {int(p)} 2>/dev/null; " for p in now)
    first += "".join(f"kill -CONT {int(p)} 2>/dev/null; " for p in cont)
    return (
        f'{first}if ! {{ {probe}false; }}; then echo "EAGLE-KILL 0 0"; exit 0; fi; '
        f'eagle_pids() {{ {{ {find}true; }} | sort -u; }}; '
        'l=$(eagle_pids); if [ -z "$l" ]; then echo "EAGLE-KILL 0 0"; exit 0; fi; '
        'found=$(echo "$l" | wc -l); '
        'eagle_sig() { for p in $(eagle_pids); do kill -"$1" "$p" 2>/dev/null; done; true; }; '
        # A stopped process only acts on TERM once continued (as systemd sends CONT after TERM).
        'eagle_sig TERM; eagle_sig CONT; i=0; '
        f'while [ -n "$(eagle_pids)" ] && [ $i -lt {ticks} ]; do sleep 0.1; i=$((i+1)); done; '
        'eagle_sig KILL; i=0; while [ -n "$(eagle_pids)" ] && [ $i -lt 10 ]; do sleep 0.1; i=$((i+1)); done; '
        'echo "EAGLE-KILL $found $(eagle_pids | wc -l)"'
    )


def parse_kill(out: str) -> tuple[int, int] | None:
    for line in out.splitlines():
        if line.startswith("EAGLE-KILL "):
            parts = line.split()
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                return int(parts[1]), int(parts[2])
    return None


def kill_note(found_left: tuple[int, int] | None, what: str) -> tuple[bool, str]:
    """(all gone, one sentence) for a kill's result."""
    if found_left is None:
        return False, f"could not confirm that {what} stopped"
    found, left = found_left
    if left:
        return False, f"{left} of {found} processes of {what} survived SIGKILL"
    if found == 0:
        return True, f"{what}: nothing was left running"
    return True, f"{what}: {found} process{'es' if found != 1 else ''} stopped (SIGTERM, then SIGKILL)"


def leftover_note(found_left: tuple[int, int] | None) -> tuple[int, str]:
    """(found, one sentence) for the end-of-step clean-up; (0, "") when nothing was left."""
    if found_left is None:
        return 0, "could not check for processes it left running"
    found, left = found_left
    if not found:
        return 0, ""
    s = "es" if found != 1 else ""
    if left:
        return found, f"left {found} process{s} running; {left} survived SIGKILL"
    return found, f"left {found} process{s} running in the background; stopped at the end of the step"


class Transport(Host, Protocol):
    """A host as the engine holds it: the sdk's `Host` (all a skill may do) plus `close`."""

    async def close(self) -> None: ...

    async def cleanup(self, tag: str | None, pgids: list[int] | None = None, *, record: bool = False) -> str:
        """Stop process groups `pgids` and every process carrying `tag`; one sentence back."""
        ...

    async def leftovers(self, tag: str, pgids: list[int]) -> tuple[int, str]:
        """At the end of a step: stop what it left running (its groups, the sessions they
        lead, its tag). (how many were found, one sentence); (0, "") when none was left."""
        ...

    async def release(self, run_id: int) -> None:
        """The run ended: close what this transport kept open for it (its persistent shells)."""
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
    return mark + 'printf "\\036EAGLE-PGID %s\\n" "$$" >&2; ' + command_line(cmd, env, cwd)


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
        # Wait until it leads its own session: a persistent shell kills what is left of a
        # command's process group when the command ends, and it must not catch this one.
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
                 on_pgid: Callable[[int], None] | None = None):
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
        if self.on_pgid and line.startswith(PGID_TAG):
            pgid = line[len(PGID_TAG):].strip()
            if pgid.isdigit():
                self.on_pgid(int(pgid))
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
