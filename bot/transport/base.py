"""The transport protocol (the sdk's `Host` plus `close`) and the shell lines every transport sends.

Every command runs in its own session so a timeout or a cancellation can signal its
whole process group, TERM then KILL: closing an SSH channel without a PTY does not stop
the remote command.
"""
from __future__ import annotations

import shlex
from typing import Callable, Protocol, Sequence

from eaglebot.errors import TransportError
from eaglebot.sdk import Host, OutputCallback, path_for_shell

PGID_TAG = "\x1eEAGLE-PGID "
KILL_GRACE_S = 2.0


class Transport(Host, Protocol):
    """A host as the engine holds it: the sdk's `Host` (all a skill may do) plus `close`."""

    async def close(self) -> None: ...


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
    return 'printf "\\036EAGLE-PGID %s\\n" "$$" >&2; ' + command_line(cmd, env, cwd)


def detach_script(argv: Sequence[str], log_path: str, pid_path: str,
                  env: dict[str, str] | None, cwd: str | None) -> str:
    """Shell that starts argv in a new session, logs to log_path and writes its pid."""
    body = command_line(["exec", *argv], env, cwd)
    q = path_for_shell
    return (
        f"mkdir -p \"$(dirname {q(log_path)})\" \"$(dirname {q(pid_path)})\" || exit 1; "
        # Not a process-group leader in a non-interactive shell, so setsid does not fork:
        # $! is the new session's leader, the pid we record.
        f"setsid sh -c {q(body)} </dev/null >{q(log_path)} 2>&1 & "
        f"pid=$!; printf '%s\\n' \"$pid\" > {q(pid_path)}.tmp && mv {q(pid_path)}.tmp {q(pid_path)} && echo \"$pid\""
    )


class LineSplitter:
    def __init__(self, stream: str, cb: OutputCallback | None, sink: list[str],
                 on_pgid: Callable[[int], None] | None = None):
        self.stream, self.cb, self.sink, self.buf, self.on_pgid = stream, cb, sink, "", on_pgid

    def feed(self, chunk: str) -> None:
        self.buf += chunk
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            self._line(line + "\n")

    def close(self) -> None:
        if self.buf:
            self._line(self.buf)
            self.buf = ""

    def _line(self, line: str) -> None:
        if self.on_pgid and line.startswith(PGID_TAG):
            try:
                self.on_pgid(int(line[len(PGID_TAG):].strip()))
            except ValueError:
                pass
            return
        self.sink.append(line)
        if self.cb:
            self.cb(self.stream, line.rstrip("\n"))


