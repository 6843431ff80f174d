"""The transport protocol (the sdk's `Host` plus `close`) and the shell lines every transport sends.

Every command runs in its own session so a timeout or a cancellation can signal its
whole process group, TERM then KILL: closing an SSH channel without a PTY does not stop
the remote command.
"""
from __future__ import annotations

import contextvars
import os
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
# What sshd or a shell runs before a later session's command, relative to the login's home:
# sshd's ~/.ssh/rc, the options in authorized_keys (`command=`, `environment=`) and
# ~/.ssh/environment; bash started by sshd reads ~/.bashrc, zsh always ~/.zshenv, login shells
# their profiles. A step that writes one would start code before every later command on that
# login (issue 46): each step's end compares them with its start and refuses a change.
LOGIN_FILES = (".ssh/rc", ".ssh/environment", ".ssh/authorized_keys", ".ssh/authorized_keys2",
               ".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshenv", ".zprofile", ".zshrc",
               ".zlogin", ".shrc", ".kshrc", ".cshrc", ".tcshrc", ".login", ".pam_environment")
REFUSED_SUFFIX = ".eagle-refused"


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
    # The login files (LOGIN_FILES) that existed when the step's first command started, by
    # their SHA-256 (None: not known yet); what the step changed of them; what was done about it.
    login: dict[str, str] | None = None
    watch_login: bool = True
    login_changed: list[str] = field(default_factory=list)
    login_note: str = ""

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


def note_login(hashes: dict[str, str]) -> None:
    """The login files as the running step's first command found them."""
    sp = CURRENT.get()
    if sp is not None and sp.login is None:
        sp.login = hashes


def parse_pgid(text: str) -> tuple[int, float | None, dict[str, str] | None] | None:
    """`<pgid> [<uptime seconds> [<sha256>=<path>,...]]` of a PGID line."""
    words = text.split()
    if not words or not words[0].isdigit():
        return None
    since = None
    if len(words) > 1:
        try:
            since = float(words[1])
        except ValueError:
            since = None
    login = None
    if len(words) > 2:
        login = {}
        for item in words[2].split(","):
            h, _, path = item.partition("=")
            if path in LOGIN_FILES and len(h) == 64:
                login[path] = h
    return int(words[0]), since, login


def login_files(home: str) -> dict[str, bytes]:
    """The login files under `home` that can be read (symlinks followed), by their path under it."""
    out: dict[str, bytes] = {}
    for rel in LOGIN_FILES:
        try:
            with open(os.path.join(home, rel), "rb") as f:
                out[rel] = f.read()
        except OSError:
            continue
    return out


def hashes(files: dict[str, bytes]) -> dict[str, str]:
    import hashlib

    return {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}


def login_check_script(before: dict[str, str]) -> str:
    """sh that moves aside (`<file>.eagle-refused`) every login file that is not as the step
    found it (new, or changed: a deleted one starts nothing), and prints `EAGLE-LOGIN <file>`
    for each. It runs first in the end-of-step script, whose own session already ran
    ~/.ssh/rc: what that started, the sweep after it stops. The usual case, nothing changed,
    costs one `sha256sum`, compared with what the step's start said."""
    want = "\n".join(f"{before[p]}  {p}" for p in LOGIN_FILES if p in before)
    files = " ".join(LOGIN_FILES)
    pairs = ",".join(f"{p}={h}" for p, h in before.items())
    return ("eagle_h=$(cd && sha256sum -- " + files + " 2>/dev/null); [ \"$eagle_h\" = " + shlex.quote(want)
            + " ] || printf '%s\\n' \"$eagle_h\" | awk -v want=" + shlex.quote(pairs) + " "
            + shlex.quote('BEGIN { n = split(want, a, ","); for (i = 1; i <= n; i++) { split(a[i], kv, "="); w[kv[1]] = kv[2] } } '
                          '{ if (w[$2] != $1) print $2 }')
            + " | while read -r f; do mv -f -- \"$HOME/$f\" \"$HOME/$f" + REFUSED_SUFFIX
            + "\" && echo \"EAGLE-LOGIN $f\"; done; ")


async def put_back(host: Host, sp: StepProcs, had: dict[str, bytes]) -> str:
    """Write back the login files the step changed (`sp.login_changed`, moved aside) from
    `had`, where that is what the step found (its hash); a file the step made stays moved
    aside. One sentence on what was done."""
    import hashlib

    before = sp.login or {}
    back, kept = [], []
    for rel in sp.login_changed:
        data = had.get(rel)
        if rel not in before:
            continue   # the step made it: moved aside is gone
        if data is None or hashlib.sha256(data).hexdigest() != before[rel]:
            kept.append(rel)
            continue
        try:
            await host.write_file("~/" + rel, data, 0o600 if rel.startswith(".ssh/") else 0o644)
            back.append(rel)
        except OSError:
            kept.append(rel)
    words = [f"moved aside as ~/<file>{REFUSED_SUFFIX}"]
    if back:
        words.append("put back as it was: " + ", ".join(f"~/{r}" for r in back))
    if kept:
        words.append("could not be put back (check it by hand): " + ", ".join(f"~/{r}" for r in kept))
    return "; ".join(words)


def parse_login(out: str) -> list[str]:
    return [line[len("EAGLE-LOGIN "):] for line in out.splitlines()
            if line.startswith("EAGLE-LOGIN ") and line[len("EAGLE-LOGIN "):] in LOGIN_FILES]


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
    sp = CURRENT.get()
    tag = sp.tag if sp is not None else None
    mark = f"export {TAG_VAR}={shlex.quote(valid_tag(tag))}; " if tag else ""
    # With its start on the host's boot clock (a builtin read, no fork): the step's processes
    # are those started since its first command (transport/leftovers.py). The step's first
    # command also reports the login files as it found them (one sha256sum: `<hash>=<path>,`).
    login = ""
    if sp is not None and sp.login is None and not sp.pgids:
        login = ('eagle_h=$(cd && sha256sum -- ' + " ".join(LOGIN_FILES) + ' 2>/dev/null); '
                 'printf "%s=%s," $eagle_h >&2; unset eagle_h; ')
    return (mark + 'read -r eagle_up _ </proc/uptime 2>/dev/null; '
            'printf "\\036EAGLE-PGID %s %s " "$$" "$eagle_up" >&2; unset eagle_up; ' + login
            + 'echo >&2; ' + command_line(cmd, env, cwd))


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
                 on_pgid: Callable[[int, float | None, dict[str, str] | None], None] | None = None):
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
