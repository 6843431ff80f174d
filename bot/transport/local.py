"""The host `local`: subprocesses of this process, each in its own session."""
from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Sequence


from eaglebot.errors import TransportError
from eaglebot.sdk import CommandResult, OutputCallback
from eaglebot.transport.base import KILL_GRACE_S, LineSplitter, command_line, detach_script


# The bot's own credentials: a command the bot runs has no business with them.
BOT_SECRETS = ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET")


def command_env() -> dict[str, str]:
    """This process's environment without the bot's secrets, for every local command."""
    return {k: v for k, v in os.environ.items() if k not in BOT_SECRETS}


class LocalTransport:
    """The host `local`: subprocesses of this process, each in its own session."""

    def __init__(self, name: str = "local"):
        self.name = name

    async def run(self, cmd: str | Sequence[str], *, timeout: float | None = None,
                  on_output: OutputCallback | None = None, env: dict[str, str] | None = None,
                  cwd: str | None = None, stdin: str | None = None) -> CommandResult:
        line = command_line(cmd, env, cwd)
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", line,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, env=command_env(),
        )
        out: list[str] = []
        err: list[str] = []

        async def pump(reader: asyncio.StreamReader | None, splitter: LineSplitter) -> None:
            assert reader is not None  # both pipes were asked for
            while chunk := await reader.read(65536):
                splitter.feed(chunk.decode(errors="replace"))
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
            await _kill_local_group(proc)
        except asyncio.CancelledError:
            await _kill_local_group(proc)
            raise
        finally:
            if proc.returncode is None:
                await _kill_local_group(proc)
            try:
                await asyncio.wait_for(pumps, 1.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pumps.cancel()
        rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        sig = signal.Signals(-rc).name if rc < 0 else None
        return CommandResult(None if timed_out else (128 - rc if rc < 0 else rc), "".join(out), "".join(err),
                             timed_out=timed_out, duration_s=time.monotonic() - t0, signal=sig)

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

    async def close(self) -> None:
        return None


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


async def _kill_local_group(proc: asyncio.subprocess.Process) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
            # The leader is gone; make sure no member of its group lingers.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return
        except asyncio.TimeoutError:
            continue
