"""The persistent shell (`shell: persistent`): one long-lived POSIX `sh` per run and host, many commands.

A shell belongs to ONE run: it is opened by the run's first command on the host and closed
when the run ends (`ShellPool.release`), so nothing a step does (environment, directory,
background processes, writes to the shell's descriptors) reaches another run. Commands
outside a run (doctor, logs) never use a persistent shell.

The command stream is authenticated. The shell runs a read loop that executes only lines
carrying a per-shell secret (sent once at start-up, kept in an unexported variable, never in
any argv or environment):

    SECRET C <one line of the script>      # appended to the script being received
    SECRET X                               # run it
    anything else                          # ignored

so a step that writes to the shell's stdin (`/proc/$PPID/fd/0`) cannot steer it: without the
secret its lines are dropped, and a partial line it leaves in the pipe is cut off at the next
secret. Each command is then:

    (set +m; export EAGLE_PROC_TAG=<tag>; exec /bin/sh -c '<command>') </dev/null 2>&3 3>&- &  # bash -m: own group
    # or, where the host has no bash:  EAGLE_PROC_TAG=<tag> setsid sh -c '<command>' ... &
    printf '\\036<nonce> P %s\\n' $!;  wait $!;  kill -KILL -$!    # leftovers of its group
    printf '\\036<nonce> E %s\\n' <status>;  printf '\\036<nonce> E\\n' >&3

The command's stdin is /dev/null and it does not inherit fd 3. Its exit status comes back in
a frame marked with a random nonce per command, which the command never sees (it is in the
shell's memory only), so it cannot forge its own or another command's status. Frames are
found wherever they appear, not only at a line start, so output without a trailing newline,
binary output or a line equal to any fixed sentinel comes back exactly. A timeout or cancel
kills the command's group and every process carrying the step's tag; a shell that then does
not answer (stopped with SIGSTOP, wedged) is killed on the host by its pid, learned at
start-up, and the next command opens a new shell.

The shell runs from an unreadable copy of itself (`OPEN_SHELL`): the kernel makes it
undumpable, so another process of the SSH user cannot open its /proc/PID/fd (its stdin with
the secret, its stdout for frames); what a step leaves behind is stopped at the step's end
anyway (transport/sweep.py). Why `exec` is still the default: there a command's exit status
comes from sshd, which no process of the user can forge, and to root (a root SSH user)
nothing of a shell is closed.
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
from eaglebot.transport.base import (TAG_VAR, LineSplitter, command_line, current_tag, note_pgid, parse_pgid,
                                     valid_tag)


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
        self.since: float | None = None   # the host's boot clock when it started
        self.status: int | None = None
        self.started = asyncio.Event()
        self.out_done = asyncio.Event()
        self.err_done = asyncio.Event()
        self.f_out = _Framer(nonce, lambda b: self.so.feed(self.dec_o.decode(b)), self._frame_out)
        self.f_err = _Framer(nonce, lambda b: self.se.feed(self.dec_e.decode(b)), self._frame_err)

    def _frame_out(self, words: list[str]) -> None:
        found = parse_pgid(" ".join(words[1:])) if words and words[0] == "P" else None
        if found is not None:
            # Noted by `run`, in the step's own context: this runs in the shell's reader task,
            # whose context is the step that opened the shell.
            self.pid, self.since = found
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
# process group for the price of one fork, no exec), else POSIX sh (setsid per command); run
# from a copy only its owner may execute and nobody may read (mode 0111), because the kernel
# makes a process that executes an unreadable program undumpable: its /proc/PID/fd is then
# closed to the user's other processes, so none can read the commands from its stdin (secret
# and nonces included) or write frames into its stdout. The copy is removed once the shell
# runs (`INIT`). Where no temporary folder allows it (noexec, full), the shell runs as it is.
OPEN_SHELL = (
    'eagle_b=$(command -v bash 2>/dev/null) && eagle_a="--norc --noprofile" || { eagle_b=/bin/sh; eagle_a=; }; '
    'for eagle_t in "${TMPDIR:-/tmp}" "$HOME"; do '
    'EAGLE_SHELL_DIR=$(mktemp -d "$eagle_t/.eagle-shell.XXXXXX" 2>/dev/null) || continue; '
    'eagle_c="$EAGLE_SHELL_DIR/${eagle_b##*/}"; '
    'if cp "$eagle_b" "$eagle_c" 2>/dev/null && chmod 0111 "$eagle_c" && "$eagle_c" -c : 2>/dev/null; then '
    'export EAGLE_SHELL_DIR; exec "$eagle_c" $eagle_a; fi; rm -rf "$EAGLE_SHELL_DIR"; done; '
    'unset EAGLE_SHELL_DIR; exec "$eagle_b" $eagle_a')
# Sent once: the shell's own messages (bash's job notices) go to /dev/null; fd 3 is the
# channel's stderr, which commands and frames write to; the shell's unreadable copy goes.
INIT = (b'exec 3>&2 2>/dev/null; [ -n "$BASH_VERSION" ] && set -m; '
        b'[ -n "$EAGLE_SHELL_DIR" ] && rm -rf "$EAGLE_SHELL_DIR"; unset EAGLE_SHELL_DIR\n')


def read_loop(secret: str, hello: str) -> bytes:
    """The line that turns the shell into the authenticated read loop (module docstring).

    The shell parses this whole line before it runs it, so every later line on its stdin is
    read by `read`, never parsed as a command. The hello frames carry the shell's pid: a
    wedged shell is killed by it."""
    return (f"eagle_k={secret}; eagle_b=; printf '\\036%s H %s\\n' {hello} \"$$\"; "
            f"printf '\\036%s H %s\\n' {hello} \"$$\" >&3; "
            'while IFS= read -r eagle_l; do case $eagle_l in '
            '*"$eagle_k C "*) eagle_b="$eagle_b${eagle_l#*"$eagle_k C "}\n";; '
            '*"$eagle_k X"*) eval "$eagle_b"; eagle_b=;; esac; done; exit 0\n').encode()


def signed(secret: str, script: str) -> bytes:
    """`script` as the read loop takes it: each line carries the secret, then the run line."""
    # surrogateescape: a value that came from a command's output (a registered `stdout`) may
    # hold bytes that are not UTF-8; they go back to the host as they came.
    body = "".join(f"{secret} C {line}\n" for line in script.split("\n"))
    return body.encode("utf-8", "surrogateescape") + f"{secret} X\n".encode()


def command_script(nonce: str, cmd: str | Sequence[str], env: dict[str, str] | None, cwd: str | None,
                   tag: str | None) -> str:
    """The script the shell runs for one command (see the module docstring)."""
    line = shlex.quote(command_line(cmd, env, cwd))
    t = shlex.quote(valid_tag(tag)) if tag else ""
    # `exec /bin/sh -c`: the command is read by sh, as in exec mode, and `$$` is its own pid.
    bash = f"(set +m; export {TAG_VAR}={t}; exec /bin/sh -c {line})" if tag else f"(set +m; exec /bin/sh -c {line})"
    posix = f"{TAG_VAR}={t} setsid sh -c {line}" if tag else f"setsid sh -c {line}"
    return (f'read -r eagle_up _ </proc/uptime 2>/dev/null; '
            f'if [ -n "$BASH_VERSION" ]; then {bash} </dev/null 2>&3 3>&- & '
            f'else {posix} </dev/null 2>&3 3>&- & fi; eagle_p=$!; '
            f"printf '\\036{nonce} P %s %s\\n' \"$eagle_p\" \"$eagle_up\"; wait \"$eagle_p\"; eagle_s=$?; "
            f"kill -KILL -\"$eagle_p\" 2>/dev/null; "
            f"printf '\\036{nonce} E %s\\n' \"$eagle_s\"; printf '\\036{nonce} E\\n' >&3")


# After a timeout or cancel has killed the command, how long its frames may take before the
# shell counts as wedged (stopped, or steered into a loop) and is killed by its pid.
WEDGED_AFTER_S = 0.5
Kill = Callable[[list[int], list[int]], Awaitable[str]]  # (groups to stop, pids to KILL at once)


class PersistentShell:
    """One `sh` kept open for one run; runs one command at a time."""

    def __init__(self, proc: ShellProcess, host: str):
        self.proc, self.host = proc, host
        self.cmd: _Command | None = None
        self.dead = False
        self.pid: int | None = None
        self._secret = os.urandom(16).hex()
        # Whatever the login shell prints before our shell starts (a banner, an rc file's
        # output) is read and dropped up to a hello frame on each stream (`ready`).
        hello = os.urandom(8).hex()
        self._hello = b"\x1e" + hello.encode() + b" H "
        self._greeted = [asyncio.Event(), asyncio.Event()]
        proc.write(INIT + read_loop(self._secret, hello))
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

    def _greet(self, early: bytes) -> bytes | None:
        """The bytes after the hello frame (its pid noted), or None while it has not come."""
        i = early.find(self._hello)
        j = early.find(b"\n", i + len(self._hello)) if i >= 0 else -1
        if j < 0:
            return None
        pid = early[i + len(self._hello):j].strip()
        if pid.isdigit():
            self.pid = int(pid)
        return early[j + 1:]

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
                    rest = self._greet(early)
                    if rest is None:
                        early = early[-4096:]
                        continue
                    chunk, early = rest, b""
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
                  kill: Kill) -> CommandResult:
        """Run one command; `kill(pgids, pids)` stops its group and tagged processes (another channel)."""
        nonce = os.urandom(8).hex()
        c = _Command(nonce.encode(), on_output)
        self.cmd = c
        t0 = time.monotonic()
        try:
            self.proc.write(signed(self._secret, command_script(nonce, cmd, env, cwd, current_tag())))
        except Exception as e:
            self.dead = True
            raise TransportError(f"host {self.host}: the persistent shell is gone ({e}); "
                                 f"the next command opens a new one") from None
        both = asyncio.gather(c.out_done.wait(), c.err_done.wait())
        timed_out = False
        wedged = ""
        try:
            await asyncio.wait_for(asyncio.shield(both), timeout)
        except asyncio.TimeoutError:
            timed_out = True
            _, wedged = await self._stop(c, kill)
        except asyncio.CancelledError:
            await asyncio.shield(self._stop(c, kill))
            both.cancel()
            raise
        finally:
            if not both.done():
                both.cancel()
                try:
                    await both
                except BaseException:  # cancelled: nothing to report, only to collect
                    pass
            self.cmd = None
            if c.pid is not None:
                note_pgid(c.pid, c.since)
        if self.dead and c.status is None and not timed_out:
            note, _ = await self._stop(c, kill)
            raise TransportError(f"host {self.host}: the persistent shell died during the command; {note}; "
                                 f"the next command opens a new shell")
        c.so.close()
        c.se.close()
        if wedged:
            raise TransportError(f"host {self.host}: timed out after {timeout:g}s and {wedged}")
        return CommandResult(None if timed_out else c.status, "".join(c.out), "".join(c.err),
                             timed_out=timed_out, duration_s=time.monotonic() - t0,
                             cut_bytes=c.so.cut_bytes + c.se.cut_bytes)

    async def _stop(self, c: _Command, kill: Kill) -> tuple[str, str]:
        """Kill the command's group and tagged processes, then wait briefly for its frames so
        the shell is clean for the next command. A shell that does not answer is wedged
        (stopped, or steered): it is killed on the host by its pid and closed. Returns (what
        the kill did, a sentence when the shell had to be killed or "")."""
        if c.pid is not None:
            note_pgid(c.pid, c.since)   # (the sweep needs the command's start)
        note = await kill([c.pid] if c.pid is not None else [], [])
        if self.dead:
            return note, ""
        try:
            await asyncio.wait_for(asyncio.gather(c.out_done.wait(), c.err_done.wait()), WEDGED_AFTER_S)
            return note, ""
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass
        wedged = "the shell did not answer (stopped or wedged)"
        if self.pid is not None:
            await kill([], [self.pid])
            wedged += f"; its shell (pid {self.pid}) was killed on the host"
        self.close()
        return note, wedged

    def close(self) -> None:
        self.dead = True
        try:
            self.proc.close()
        except Exception:
            pass
        for t in self._readers:
            t.cancel()


class ShellPool:
    """The persistent shells of one host, each owned by one run (`key`: the run's id).

    A run keeps up to `size` shells of its own; the pool as a whole holds at most `size`
    (each is an SSH channel, and sshd allows ~10 per connection). When none can be opened the
    command is refused here (`None`) and the transport runs it in exec mode, still isolated.
    """

    def __init__(self, host: str, size: int, opener: Callable[[], Awaitable[ShellProcess]]):
        self.host, self.size, self.opener = host, size, opener
        self.free: dict[int, list[PersistentShell]] = {}
        self.count = 0

    async def run(self, key: int, cmd: str | Sequence[str], *, timeout: float | None,
                  on_output: OutputCallback | None, env: dict[str, str] | None, cwd: str | None,
                  kill: Kill) -> CommandResult | None:
        sh = None
        mine = self.free.setdefault(key, [])
        while mine:
            cand = mine.pop()
            if not cand.dead:
                sh = cand
                break
            self.count -= 1
        if sh is None:
            if self.count >= self.size:
                return None
            self.count += 1
            try:
                sh = PersistentShell(await self.opener(), self.host)
                await sh.ready(30)
            except BaseException:
                if sh is not None:
                    sh.close()
                self.count -= 1
                raise
        try:
            return await sh.run(cmd, timeout=timeout, on_output=on_output, env=env, cwd=cwd, kill=kill)
        finally:
            if sh.dead:
                sh.close()
                self.count -= 1
            elif key in self.free:
                self.free[key].append(sh)
            else:  # the run was released while this command ran
                sh.close()
                self.count -= 1

    async def release(self, key: int) -> None:
        """Close every shell of run `key` (the run ended)."""
        await self._close(self.free.pop(key, []))

    async def aclose(self) -> None:
        shells = [sh for group in self.free.values() for sh in group]
        self.free = {}
        await self._close(shells)

    async def _close(self, shells: list[PersistentShell]) -> None:
        self.count -= len(shells)
        for sh in shells:
            sh.close()
        for sh in shells:
            try:
                await asyncio.wait_for(sh.proc.wait_closed(), 2)
            except Exception:  # closing is best effort
                pass
