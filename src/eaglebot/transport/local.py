"""The host `local`: subprocesses of this process, each in its own session."""
from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any, Sequence


from eaglebot.errors import TransportError
from eaglebot.sdk import CommandResult, OutputCallback
from eaglebot.transport.base import (CURRENT, TAG_VAR, LineSplitter, StepProcs, command_line,
                                     current_tag, detach_script, hashes, login_files, note_kept, note_pgid,
                                     DRAIN_S)
from eaglebot.transport.leftovers import kill_note, kill_script, leftover_note, parse_kill


# The bot's own credentials: a command the bot runs has no business with them.
BOT_SECRETS = ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET")


def command_env() -> dict[str, str]:
    """This process's environment without the bot's secrets, for every local command."""
    return {k: v for k, v in os.environ.items() if k not in BOT_SECRETS}


class LocalTransport:
    """The host `local`: `sh -c` per command, a subprocess of this process in its own session."""

    def __init__(self, name: str = "local"):
        self.name = name

    async def run(self, cmd: str | Sequence[str], *, timeout: float | None = None,
                  on_output: OutputCallback | None = None, env: dict[str, str] | None = None,
                  cwd: str | None = None, stdin: str | None = None) -> CommandResult:
        line = command_line(cmd, env, cwd)
        t0 = time.monotonic()
        since = time.clock_gettime(time.CLOCK_BOOTTIME)   # the host's boot clock: /proc's start times
        tag = current_tag()
        penv = {**command_env(), TAG_VAR: tag} if tag else command_env()
        sp = CURRENT.get()
        if sp is not None and sp.login is None:   # the step's first command: the login files as it finds them
            sp.login = hashes(await asyncio.to_thread(login_files, os.path.expanduser("~")))
        creating = asyncio.ensure_future(asyncio.create_subprocess_exec(
            "/bin/sh", "-c", line,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, env=penv,
        ))
        try:
            proc = await asyncio.shield(creating)
        except asyncio.CancelledError:
            # Cancelled while starting: the process exists (or will); stop it, then give up.
            proc = await creating
            note_pgid(proc.pid, since)
            await self._kill([proc.pid])
            raise
        note_pgid(proc.pid, since)
        out: list[str] = []
        err: list[str] = []

        async def pump(reader: asyncio.StreamReader | None, splitter: LineSplitter) -> None:
            assert reader is not None  # both pipes were asked for
            while chunk := await reader.read(65536):
                splitter.feed(chunk.decode(errors="surrogateescape"))
            splitter.close()

        so, se = LineSplitter("stdout", on_output, out), LineSplitter("stderr", on_output, err)
        if stdin is not None and proc.stdin is not None:
            proc.stdin.write(stdin.encode())
            proc.stdin.close()
        pumps = asyncio.gather(pump(proc.stdout, so), pump(proc.stderr, se))
        timed_out = False
        try:
            # The command ends when its process exits: a background child that keeps its
            # stdout open does not hold the step (it is stopped at the step's end).
            await asyncio.wait_for(_exited(proc, pumps), timeout)
        except asyncio.TimeoutError:
            timed_out = True
            await self._kill([proc.pid])
        except asyncio.CancelledError:
            await asyncio.shield(self._kill([proc.pid]))
            raise
        finally:
            if proc.returncode is None:
                await self._kill([proc.pid])
                try:
                    await asyncio.wait_for(proc.wait(), 5)
                except asyncio.TimeoutError:
                    pass
            try:
                await asyncio.wait_for(asyncio.shield(pumps), DRAIN_S)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                # A background child holds the pipes: stop reading them (the child is stopped
                # at the end of the step; what it writes meanwhile goes nowhere).
                pumps.cancel()
                pumps.add_done_callback(_retrieved)
                proc._transport.close()  # type: ignore[attr-defined]  # asyncio.subprocess has no public close
                so.close()
                se.close()
        rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        sig = signal.Signals(-rc).name if rc < 0 else None
        return CommandResult(None if timed_out else (128 - rc if rc < 0 else rc), "".join(out), "".join(err),
                             timed_out=timed_out, duration_s=time.monotonic() - t0, signal=sig,
                             cut_bytes=so.cut_bytes + se.cut_bytes)

    async def read_file(self, path: str) -> bytes:
        p = os.path.expanduser(path)
        return await asyncio.to_thread(_read, p)

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        await asyncio.to_thread(atomic_write_local, os.path.expanduser(path), data, mode)

    async def spawn_detached(self, argv: Sequence[str], *, log_path: str, pid_path: str,
                             env: dict[str, str] | None = None, cwd: str | None = None) -> int:
        log_path, pid_path = os.path.expanduser(log_path), os.path.expanduser(pid_path)
        res = await self.run(detach_script(argv, log_path, pid_path, env, cwd), timeout=30)
        if not res.ok:
            raise TransportError(f"could not start {argv[0]}: {res.stderr.strip() or res.exit_status}")
        pid = int(res.stdout.split()[-1])
        note_kept(pid)
        return pid

    async def _kill(self, pgids: list[int], now: list[int] | None = None) -> str:
        return await self.cleanup(current_tag(), pgids, record=True, now=now)

    async def _killed(self, script: str) -> tuple[int, int] | None:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", script, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=command_env())
        out, _ = await proc.communicate()
        return parse_kill(out.decode(errors="replace"))

    async def cleanup(self, tag: str | None, pgids: list[int] | None = None, *, record: bool = False,
                      since_wall: float | None = None, now: list[int] | None = None) -> str:
        """Kill what `tag` (and `pgids`) name (transport/leftovers.py: setsid descendants and orphans too)."""
        what = "the command's processes" if pgids else f"processes tagged {tag}"
        if not tag and not pgids and not now:
            return "its processes were not known"
        sp = CURRENT.get() if record else None
        ok, note = kill_note(await self._killed(kill_script(
            tag, pgids or [], now or [], since=sp.since if sp else None, since_wall=since_wall,
            keep=sp.keep if sp else ())), what)
        if sp is not None:
            (sp.stopped if ok else sp.pending)(note)
        return note

    async def leftovers(self, sp: StepProcs) -> tuple[int, str]:
        if sp.login is not None and sp.watch_login:
            # Found and refused, never moved: these are the files of the bot's own user (often
            # the operator's), whose own edits meanwhile must stand.
            now = await asyncio.to_thread(login_files, os.path.expanduser("~"))
            sp.login_changed = [rel for rel, h in hashes(now).items() if sp.login.get(rel) != h]
            if sp.login_changed:
                sp.login_note = "the bot's own user's files are left as they are: check them"
        # Read /proc in-process first: nothing that could be the step's, the usual case on a
        # bot's own user, then costs no fork.
        if not await asyncio.to_thread(_any_left, sp.tag, set(sp.pgids), sp.since, set(sp.keep)):
            return 0, ""
        return leftover_note(await self._killed(kill_script(sp.tag, sp.pgids, since=sp.since, keep=sp.keep)))

    async def close(self) -> None:
        """Nothing is kept open: each command's process ended with it."""


def _any_left(tag: str, groups: set[int], since: float | None, keep: set[int]) -> bool:
    """Could any live process be the step's (transport/leftovers.py)? In one of `groups` (or a
    session one of them leads), or started since `since` (its start unknown: carrying `tag`),
    other than this process and the kept servers' sessions: more than the sweep takes (it also
    walks the ancestors and checks orphans' user and cgroup), never less, read from /proc here.
    Pids allocated after the listing are looked at first, as the sweep does: a process that
    forks and exits faster than one pass is found in its newest generation."""
    mark = f"{TAG_VAR}={tag}".encode()
    t0 = since * os.sysconf("SC_CLK_TCK") - 5 if since is not None else None
    me = os.getpid()

    def could_be(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z" or int(fields[3]) in keep:
                return False
            if int(fields[2]) in groups or int(fields[3]) in groups:
                return True
            if t0 is not None:   # (the tag counts only when the start is unknown, as in the sweep)
                return int(fields[19]) >= t0   # any user's: the step's descendants may be another's
            with open(f"/proc/{pid}/environ", "rb") as f:
                return mark in f.read().split(b"\0")
        except (OSError, IndexError, ValueError):  # gone meanwhile, or not ours to read
            return False

    lo = _last_pid()
    listed = [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) != me]

    def born() -> bool:
        """Any pid allocated since `lo` (down from the last, wrapping at pid_max)?"""
        nonlocal lo
        for _ in range(64):
            hi = _last_pid()
            if hi == lo:
                return False
            p, n = hi, 0
            while p != lo and n < 4096:
                if p != me and could_be(p):
                    return True
                p, n = (p - 1 if p > 1 else _PID_MAX - 1), n + 1
            lo = hi
        return False

    return born() or any(could_be(p) for p in listed) or born()


def _read_int(path: str, field: int, default: int) -> int:
    try:
        with open(path) as f:
            return int(f.read().split()[field])
    except (OSError, IndexError, ValueError):
        return default


_PID_MAX = _read_int("/proc/sys/kernel/pid_max", 0, 32768)


def _last_pid() -> int:
    """The pid the kernel allocated last (/proc/loadavg's fifth field)."""
    return _read_int("/proc/loadavg", 4, 0)


def _retrieved(f: "asyncio.Future[Any]") -> None:
    if not f.cancelled():
        f.exception()


async def _exited(proc: asyncio.subprocess.Process, pumps: "asyncio.Future[Any]") -> None:
    """Until the process exited or its output ended (then until it exited).

    `Process.wait()` also waits for the pipes to close (Python 3.11), which a background child
    holding them delays; the return code is known as soon as the child watcher reaps the
    process, so that is polled while the output is still open."""
    while not pumps.done() and proc.returncode is None:
        await asyncio.wait({pumps}, timeout=0.05)
    if proc.returncode is None:
        await proc.wait()


def _read(p: str) -> bytes:
    with open(p, "rb") as f:
        return f.read()


def atomic_write_local(path: str, data: bytes, mode: int | None) -> None:
    """Write via a temp file + rename; keep the mode, owner and group of the file it replaces;
    a symlink is replaced, not followed.

    A rename needs only the folder's write permission, so without care it would hand another
    user's file (root's 0644 config in a folder we may write) to us. Where we may not give the
    new file its owner and group back (not root, and not its owner or not in its group), the
    write is refused before anything is written."""
    import errno
    import grp
    import pwd

    def name(uid: int) -> str:
        try:
            return pwd.getpwuid(uid).pw_name
        except KeyError:
            return str(uid)

    def group(gid: int) -> str:
        try:
            return grp.getgrgid(gid).gr_name
        except KeyError:
            return str(gid)

    d = os.path.dirname(path) or "."
    try:
        old: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        old = None
    if mode is None:
        mode = old.st_mode & 0o7777 if old is not None else 0o644
    euid = os.geteuid()
    if old is not None and euid != 0:
        if old.st_uid != euid:
            raise PermissionError(errno.EPERM, f"it belongs to {name(old.st_uid)} and would become "
                                               f"{name(euid)}'s; write it as its owner")
        if old.st_gid != os.getegid() and old.st_gid not in os.getgroups():
            raise PermissionError(errno.EPERM, f"its group is {group(old.st_gid)} and would become "
                                               f"{group(os.getegid())}'s; write it as a member of "
                                               f"{group(old.st_gid)}")
    tmp = os.path.join(d, f".{os.path.basename(path)}.eagle-tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            new = os.fstat(f.fileno())
            if old is not None and (old.st_uid, old.st_gid) != (new.st_uid, new.st_gid):
                os.fchown(f.fileno(), old.st_uid, old.st_gid)
        os.chmod(tmp, mode)   # after the chown, which clears set-id bits
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
