"""The host `local`: subprocesses of this process, each in its own session."""
from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Sequence


from eaglebot.errors import TransportError
from eaglebot.sdk import CommandResult, OutputCallback
from eaglebot.transport.base import (CURRENT, TAG_VAR, LineSplitter, command_line, current_tag, detach_script,
                                     kill_note, kill_script, note_pgid, parse_kill)
from eaglebot.transport.shell import OPEN_SHELL, ShellPool


_closing: set["asyncio.Future[None]"] = set()  # shells being reaped (keeps their tasks alive)


class _LocalShell:
    """A persistent local `sh` (its own session), as the shell pool reads and writes it."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.p = proc

    def write(self, data: bytes) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(data)

    async def read_stdout(self) -> bytes:
        assert self.p.stdout is not None
        return await self.p.stdout.read(65536)

    async def read_stderr(self) -> bytes:
        assert self.p.stderr is not None
        return await self.p.stderr.read(65536)

    def close(self) -> None:
        if self.p.stdin is not None:
            self.p.stdin.close()  # EOF: the shell exits after its command
        if self.p.returncode is None:
            try:
                self.p.kill()
            except ProcessLookupError:
                pass
        _closing.add(asyncio.ensure_future(self.wait_closed()))

    async def wait_closed(self) -> None:
        await self.p.wait()
        _closing.discard(asyncio.current_task())  # type: ignore[arg-type,unused-ignore]


# The bot's own credentials: a command the bot runs has no business with them.
BOT_SECRETS = ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET")


def command_env() -> dict[str, str]:
    """This process's environment without the bot's secrets, for every local command."""
    return {k: v for k, v in os.environ.items() if k not in BOT_SECRETS}


class LocalTransport:
    """The host `local`: subprocesses of this process, each in its own session.

    `shell="persistent"` (the default) keeps local `sh` processes open and frames commands
    through them (eaglebot.transport.shell); `"exec"` starts `sh -c` per command.
    """

    def __init__(self, name: str = "local", shell: str = "persistent", max_shells: int = 8):
        self.name = name
        self._shells = ShellPool(name, max_shells, self._open_shell) if shell == "persistent" else None

    async def _open_shell(self) -> _LocalShell:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", OPEN_SHELL, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True, env=command_env())
        return _LocalShell(proc)

    async def run(self, cmd: str | Sequence[str], *, timeout: float | None = None,
                  on_output: OutputCallback | None = None, env: dict[str, str] | None = None,
                  cwd: str | None = None, stdin: str | None = None) -> CommandResult:
        if self._shells is not None and stdin is None:
            return await self._shells.run(cmd, timeout=timeout, on_output=on_output, env=env, cwd=cwd,
                                          kill=self._kill)
        line = command_line(cmd, env, cwd)
        t0 = time.monotonic()
        tag = current_tag()
        penv = {**command_env(), TAG_VAR: tag} if tag else command_env()
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
            await self._kill([proc.pid])
            raise
        note_pgid(proc.pid)
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
            await asyncio.wait_for(asyncio.shield(pumps), timeout)
            await proc.wait()
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
                await asyncio.wait_for(pumps, 1.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pumps.cancel()
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
        return int(res.stdout.split()[-1])

    async def _kill(self, pgids: list[int]) -> str:
        return await self.cleanup(current_tag(), pgids, record=True)

    async def cleanup(self, tag: str | None, pgids: list[int] | None = None, *, record: bool = False) -> str:
        """Kill process groups `pgids` and every process carrying `tag` (setsid descendants too)."""
        what = "the command's processes" if pgids else f"processes tagged {tag}"
        if not tag and not pgids:
            return "its processes were not known"
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", kill_script(tag, pgids or []), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        out, _ = await proc.communicate()
        ok, note = kill_note(parse_kill(out.decode(errors="replace")), what)
        sp = CURRENT.get() if record else None
        if sp is not None:
            (sp.stopped if ok else sp.pending)(note)
        return note

    async def close(self) -> None:
        if self._shells is not None:
            await self._shells.aclose()


def _read(p: str) -> bytes:
    with open(p, "rb") as f:
        return f.read()


def atomic_write_local(path: str, data: bytes, mode: int | None) -> None:
    """Write via a temp file + rename; keep the mode; a symlink is replaced, not followed."""
    d = os.path.dirname(path) or "."
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    tmp = os.path.join(d, f".{os.path.basename(path)}.eagle-tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)
