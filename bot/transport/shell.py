"""The persistent shell: one long-lived POSIX `sh` per host (per channel), many commands.

Opening an SSH channel costs ~1.9 ms a command on loopback and a login shell that runs
`conda init` costs far more; a shell kept open pays both once. Each command is sent as
one line to the shell's stdin:

    (set +m; export EAGLE_PROC_TAG=<tag>; exec /bin/sh -c '<command>') </dev/null 2>&3 &  # bash -m: own group
    # or, where the host has no bash:  EAGLE_PROC_TAG=<tag> setsid sh -c '<command>' ... &
    printf '\\036<nonce> P %s\\n' $!;  wait $!;  kill -KILL -$!    # leftovers of its group
    printf '\\036<nonce> E %s\\n' <status>;  printf '\\036<nonce> E\\n' >&3

The command writes straight into the shell's stdout and stderr; the frames are found by
a random nonce per command (no output can predict it) wherever it appears, not only at a
line start, so output without a trailing newline, binary output or a line equal to any
fixed sentinel comes back exactly, and a finished line streams at once. The command runs
in its own process group: under bash (opened when the host has it) job control gives each
background job its own group (a fork and one exec of sh, against two execs with setsid); under plain sh, `setsid` makes it
a session (the shell's background children are not group leaders, so setsid does not
fork and `$!` is the leader). A timeout or cancel kills the whole group and every process
carrying the step's tag. `cd`, `export` and `umask` happen in the command's own subshell,
so nothing leaks into the next step. When the shell dies, the command fails with one sentence and the
next command opens a new shell.
"""
from __future__ import annotations

import asyncio
import codecs
import os
import shlex
import time
from typing import Awaitable, Callable, Protocol, Sequence

from eaglebot.errors import TransportError
from eaglebot.sdk import CommandResult, OutputCallback
from eaglebot.transport.base import TAG_VAR, LineSplitter, command_line, current_tag, note_pgid, valid_tag


class ShellProcess(Protocol):
    """The byte streams of a running `sh` (an SSH channel or a local subprocess)."""

    def write(self, data: bytes) -> None: ...

    async def read_stdout(self) -> bytes: ...

    async def read_stderr(self) -> bytes: ...

    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


class _Framer:
    """Splits one stream into the command's bytes and the frames `\\x1e<nonce> X ...\\n`."""

    def __init__(self, nonce: bytes, data: Callable[[bytes], None], frame: Callable[[list[str]], None]):
        self.mark = b"\x1e" + nonce + b" "
        self.buf = b""
        self.data, self.frame = data, frame

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        while True:
            i = self.buf.find(self.mark)
            if i < 0:
                keep = len(self.mark) - 1
                # Hold back what could be the start of a frame split across reads.
                cut = len(self.buf) - keep
                for k in range(min(keep, len(self.buf)), 0, -1):
                    if self.mark.startswith(self.buf[-k:]):
                        cut = len(self.buf) - k
                        break
                else:
                    cut = len(self.buf)
                if cut > 0:
                    self.data(self.buf[:cut])
                    self.buf = self.buf[cut:]
                return
            j = self.buf.find(b"\n", i + len(self.mark))
            if j < 0:
                if i:
                    self.data(self.buf[:i])
                    self.buf = self.buf[i:]
                return
            if i:
                self.data(self.buf[:i])
            words = self.buf[i + len(self.mark):j].decode(errors="replace").split()
            self.buf = self.buf[j + 1:]
            self.frame(words)


class _Command:
    """One command in flight on a shell: its decoders, splitters and completion."""

    def __init__(self, nonce: bytes, on_output: OutputCallback | None):
        self.out: list[str] = []
        self.err: list[str] = []
        self.so = LineSplitter("stdout", on_output, self.out)
        self.se = LineSplitter("stderr", on_output, self.err)
        self.dec_o = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.dec_e = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.pid: int | None = None
        self.status: int | None = None
        self.started = asyncio.Event()
        self.out_done = asyncio.Event()
        self.err_done = asyncio.Event()
        self.f_out = _Framer(nonce, lambda b: self.so.feed(self.dec_o.decode(b)), self._frame_out)
        self.f_err = _Framer(nonce, lambda b: self.se.feed(self.dec_e.decode(b)), self._frame_err)

    def _frame_out(self, words: list[str]) -> None:
        if len(words) == 2 and words[0] == "P" and words[1].isdigit():
            self.pid = int(words[1])
            note_pgid(self.pid)
            self.started.set()
        elif words and words[0] == "E":
            self.status = int(words[1]) if len(words) > 1 and words[1].lstrip("-").isdigit() else None
            self.so.feed(self.dec_o.decode(b"", final=True))
            self.so.close()
            self.out_done.set()

    def _frame_err(self, words: list[str]) -> None:
        if words and words[0] == "E":
            self.se.feed(self.dec_e.decode(b"", final=True))
            self.se.close()
            self.err_done.set()


# How a shell is opened: bash when the host has it (job control gives each command its own
# process group for the price of one fork, no exec), else POSIX sh (setsid per command).
OPEN_SHELL = "command -v bash >/dev/null 2>&1 && exec bash --norc --noprofile; exec /bin/sh"
# Sent once: the shell's own messages (bash's job notices) go to /dev/null; fd 3 is the
# channel's stderr, which commands and frames write to.
INIT = b'exec 3>&2 2>/dev/null; [ -n "$BASH_VERSION" ] && set -m\n'


def command_script(nonce: str, cmd: str | Sequence[str], env: dict[str, str] | None, cwd: str | None,
                   tag: str | None) -> bytes:
    """The line the shell gets for one command (see the module docstring)."""
    line = shlex.quote(command_line(cmd, env, cwd))
    t = shlex.quote(valid_tag(tag)) if tag else ""
    # `exec /bin/sh -c`: the command is read by sh, as in exec mode, and `$$` is its own pid.
    bash = f"(set +m; export {TAG_VAR}={t}; exec /bin/sh -c {line})" if tag else f"(set +m; exec /bin/sh -c {line})"
    posix = f"{TAG_VAR}={t} setsid sh -c {line}" if tag else f"setsid sh -c {line}"
    return (f'if [ -n "$BASH_VERSION" ]; then {bash} </dev/null 2>&3 3>&- & '
            f'else {posix} </dev/null 2>&3 3>&- & fi; eagle_p=$!; '
            f"printf '\\036{nonce} P %s\\n' \"$eagle_p\"; wait \"$eagle_p\"; eagle_s=$?; "
            f"kill -KILL -\"$eagle_p\" 2>/dev/null; "
            f"printf '\\036{nonce} E %s\\n' \"$eagle_s\"; printf '\\036{nonce} E\\n' >&3\n").encode()


class PersistentShell:
    """One `sh` kept open; runs one command at a time."""

    def __init__(self, proc: ShellProcess, host: str):
        self.proc, self.host = proc, host
        self.cmd: _Command | None = None
        self.dead = False
        self.busy = False
        # Whatever the login shell prints before our shell starts (a banner, an rc file's
        # output) is read and dropped up to a hello frame on each stream (`ready`).
        self._hello = b"\x1e" + os.urandom(8).hex().encode() + b" H\n"
        self._greeted = [asyncio.Event(), asyncio.Event()]
        proc.write(INIT + b"printf '\\036%s H\\n' " + self._hello[1:-3] + b"; printf '\\036%s H\\n' "
                   + self._hello[1:-3] + b" >&3\n")
        self._readers = [asyncio.create_task(self._pump(proc.read_stdout, True)),
                         asyncio.create_task(self._pump(proc.read_stderr, False))]

    async def ready(self, timeout: float) -> None:
        """Wait for the hello frames; a shell that does not answer is a TransportError."""
        try:
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self._greeted)), timeout)
        except asyncio.TimeoutError:
            self.close()
            raise TransportError(f"host {self.host}: the shell did not start within {timeout:g}s") from None
        if self.dead:
            raise TransportError(f"host {self.host}: the shell exited at start-up (is /bin/sh there?)")

    async def _pump(self, read: Callable[[], Awaitable[bytes]], is_out: bool) -> None:
        greeted = self._greeted[0 if is_out else 1]
        early = b""
        try:
            while True:
                chunk = await read()
                if not chunk:
                    break
                if not greeted.is_set():
                    early += chunk
                    i = early.find(self._hello)
                    if i < 0:
                        early = early[-len(self._hello):]
                        continue
                    chunk = early[i + len(self._hello):]
                    greeted.set()
                    if not chunk:
                        continue
                c = self.cmd
                if c is not None:  # output between commands (a killed leftover) is dropped
                    (c.f_out if is_out else c.f_err).feed(chunk)
        except Exception:  # the channel broke: same as EOF
            pass
        self.dead = True
        for e in self._greeted:
            e.set()
        c = self.cmd
        if c is not None:
            c.started.set()
            c.out_done.set()
            c.err_done.set()

    async def run(self, cmd: str | Sequence[str], *, timeout: float | None,
                  on_output: OutputCallback | None, env: dict[str, str] | None, cwd: str | None,
                  kill: Callable[[list[int]], Awaitable[str]]) -> CommandResult:
        """Run one command; `kill(pgids)` stops its group and tagged processes (another channel)."""
        nonce = os.urandom(8).hex()
        c = _Command(nonce.encode(), on_output)
        self.cmd = c
        t0 = time.monotonic()
        try:
            self.proc.write(command_script(nonce, cmd, env, cwd, current_tag()))
        except Exception as e:
            self.dead = True
            raise TransportError(f"host {self.host}: the persistent shell is gone ({e}); "
                                 f"the next command opens a new one") from None
        both = asyncio.gather(c.out_done.wait(), c.err_done.wait())
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(both), timeout)
        except asyncio.TimeoutError:
            timed_out = True
            await self._stop(c, kill)
        except asyncio.CancelledError:
            await asyncio.shield(self._stop(c, kill))
            both.cancel()
            raise
        finally:
            if not both.done():
                both.cancel()
            self.cmd = None
        if self.dead and c.status is None and not timed_out:
            note = await self._stop(c, kill)
            raise TransportError(f"host {self.host}: the persistent shell died during the command; {note}; "
                                 f"the next command opens a new shell")
        c.so.close()
        c.se.close()
        return CommandResult(None if timed_out else c.status, "".join(c.out), "".join(c.err),
                             timed_out=timed_out, duration_s=time.monotonic() - t0,
                             cut_bytes=c.so.cut_bytes + c.se.cut_bytes)

    async def _stop(self, c: _Command, kill: Callable[[list[int]], Awaitable[str]]) -> str:
        """Kill the command's group and tagged processes, then wait for its frames so the
        shell is clean for the next command; a shell that does not answer is closed."""
        note = await kill([c.pid] if c.pid is not None else [])
        if self.dead:
            return note
        try:
            await asyncio.wait_for(asyncio.gather(c.out_done.wait(), c.err_done.wait()), 5)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            self.close()
        return note

    def close(self) -> None:
        self.dead = True
        try:
            self.proc.close()
        except Exception:
            pass
        for t in self._readers:
            t.cancel()


class ShellPool:
    """Up to `size` persistent shells of one host; a command takes a free one or opens one."""

    def __init__(self, host: str, size: int, opener: Callable[[], Awaitable[ShellProcess]]):
        self.host, self.size, self.opener = host, size, opener
        self.free: list[PersistentShell] = []
        self.count = 0
        self.sem = asyncio.Semaphore(size)

    async def run(self, cmd: str | Sequence[str], *, timeout: float | None, on_output: OutputCallback | None,
                  env: dict[str, str] | None, cwd: str | None,
                  kill: Callable[[list[int]], Awaitable[str]]) -> CommandResult:
        async with self.sem:
            sh = None
            while self.free:
                cand = self.free.pop()
                if not cand.dead:
                    sh = cand
                    break
                self.count -= 1
            if sh is None:
                proc = await self.opener()
                sh = PersistentShell(proc, self.host)
                self.count += 1
                try:
                    await sh.ready(30)
                except BaseException:
                    sh.close()
                    self.count -= 1
                    raise
            try:
                return await sh.run(cmd, timeout=timeout, on_output=on_output, env=env, cwd=cwd, kill=kill)
            finally:
                if sh.dead:
                    sh.close()
                    self.count -= 1
                else:
                    self.free.append(sh)

    async def aclose(self) -> None:
        shells, self.free = self.free, []
        self.count = 0
        for sh in shells:
            sh.close()
        for sh in shells:
            try:
                await asyncio.wait_for(sh.proc.wait_closed(), 2)
            except Exception:  # closing is best effort
                pass
