"""Transports: how a skill reaches a host. The only module that imports asyncssh.

Every command runs in its own session (setsid) so a timeout or a cancellation can
signal its whole process group, TERM then KILL: closing an SSH channel without a PTY
does not stop the remote command.
"""
from __future__ import annotations

import asyncio
import os
import shlex
import signal
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from .config import HostConfig, Settings
from .errors import TransportError

OutputCallback = Callable[[str, str], None]  # (stream "stdout"/"stderr", line)

_PGID_TAG = "\x1eEAGLE-PGID "
KILL_GRACE_S = 2.0


@dataclass
class CommandResult:
    exit_status: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    duration_s: float = 0.0
    signal: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.timed_out


class Transport(Protocol):
    name: str

    async def run(self, cmd: str | Sequence[str], *, timeout: float | None = None,
                  on_output: OutputCallback | None = None, env: dict[str, str] | None = None,
                  cwd: str | None = None, stdin: str | None = None) -> CommandResult: ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None: ...

    async def spawn_detached(self, argv: Sequence[str], *, log_path: str, pid_path: str,
                             env: dict[str, str] | None = None, cwd: str | None = None) -> int: ...

    async def close(self) -> None: ...


def _command_line(cmd: str | Sequence[str], env: dict[str, str] | None, cwd: str | None) -> str:
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
    return prefix + body


def session_wrapped(cmd: str | Sequence[str], env: dict[str, str] | None = None,
                    cwd: str | None = None) -> str:
    """Announce the command's process group on stderr, then run it.

    OpenSSH starts every command as a session leader (sshd calls setsid() for it), so
    the shell's own pid is the process group to signal on timeout or cancel; this costs
    no extra process (an `exec setsid sh -c` wrapper cost ~1 ms a command). The login
    shell of the remote user must be POSIX (sh, dash, bash, zsh).
    """
    return 'printf "\\036EAGLE-PGID %s\\n" "$$" >&2; ' + _command_line(cmd, env, cwd)


def detach_script(argv: Sequence[str], log_path: str, pid_path: str,
                  env: dict[str, str] | None, cwd: str | None) -> str:
    """Shell that starts argv in a new session, logs to log_path and writes its pid."""
    body = _command_line(["exec", *argv], env, cwd)
    q = path_for_shell
    return (
        f"mkdir -p \"$(dirname {q(log_path)})\" \"$(dirname {q(pid_path)})\" || exit 1; "
        # Not a process-group leader in a non-interactive shell, so setsid does not fork:
        # $! is the new session's leader, the pid we record.
        f"setsid sh -c {q(body)} </dev/null >{q(log_path)} 2>&1 & "
        f"pid=$!; printf '%s\\n' \"$pid\" > {q(pid_path)}.tmp && mv {q(pid_path)}.tmp {q(pid_path)} && echo \"$pid\""
    )


class _LineSplitter:
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
        if self.on_pgid and line.startswith(_PGID_TAG):
            try:
                self.on_pgid(int(line[len(_PGID_TAG):].strip()))
            except ValueError:
                pass
            return
        self.sink.append(line)
        if self.cb:
            self.cb(self.stream, line.rstrip("\n"))


# -- local -------------------------------------------------------------------------

class LocalTransport:
    """The host `local`: subprocesses of this process, each in its own session."""

    def __init__(self, name: str = "local"):
        self.name = name

    async def run(self, cmd, *, timeout=None, on_output=None, env=None, cwd=None, stdin=None) -> CommandResult:
        line = _command_line(cmd, env, cwd)
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", line,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        out: list[str] = []
        err: list[str] = []

        async def pump(reader, splitter):
            while chunk := await reader.read(65536):
                splitter.feed(chunk.decode(errors="replace"))
            splitter.close()

        so, se = _LineSplitter("stdout", on_output, out), _LineSplitter("stderr", on_output, err)
        if stdin is not None:
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
        rc = proc.returncode
        sig = signal.Signals(-rc).name if rc is not None and rc < 0 else None
        return CommandResult(None if timed_out else (128 - rc if rc < 0 else rc), "".join(out), "".join(err),
                             timed_out=timed_out, duration_s=time.monotonic() - t0, signal=sig)

    async def read_file(self, path: str) -> bytes:
        p = os.path.expanduser(path)
        return await asyncio.to_thread(_read, p)

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        await asyncio.to_thread(atomic_write_local, os.path.expanduser(path), data, mode)

    async def spawn_detached(self, argv, *, log_path, pid_path, env=None, cwd=None) -> int:
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


# -- ssh ---------------------------------------------------------------------------

class SSHTransport:
    """One asyncssh connection per host, reused by every step; bounded channels."""

    def __init__(self, name: str, cfg: HostConfig, *, tunnel: "SSHTransport | None" = None):
        self.name, self.cfg, self.tunnel = name, cfg, tunnel
        self._conn = None
        self._lock = asyncio.Lock()
        self._channels = asyncio.Semaphore(cfg.max_channels)

    async def _connect(self):
        import asyncssh

        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            cfg = self.cfg
            known = os.path.expanduser(cfg.known_hosts or "~/.ssh/known_hosts")
            kwargs = dict(
                host=cfg.address, port=cfg.port, known_hosts=known,
                connect_timeout=cfg.connect_timeout_s, login_timeout=cfg.connect_timeout_s,
                keepalive_interval=15, keepalive_count_max=3,
            )
            if cfg.user:
                kwargs["username"] = cfg.user
            if cfg.key:
                kwargs["client_keys"] = [os.path.expanduser(cfg.key)]
            if self.tunnel is not None:
                kwargs["tunnel"] = await self.tunnel._connect()
            if not os.path.exists(known):
                raise TransportError(
                    f"host {self.name}: known_hosts file {known} does not exist; "
                    f"pin the host key first (eagle doctor prints its fingerprint)")
            try:
                self._conn = await asyncssh.connect(**kwargs)
            except asyncssh.HostKeyNotVerifiable as e:
                raise TransportError(
                    f"host {self.name}: host key of {cfg.address}:{cfg.port} is unknown or changed "
                    f"({e.reason}); refusing to connect (check {known})") from None
            except asyncssh.PermissionDenied:
                raise TransportError(f"host {self.name}: SSH login as {cfg.user or 'the current user'} "
                                     f"to {cfg.address}:{cfg.port} was refused (check the key)") from None
            except (OSError, asyncio.TimeoutError, asyncssh.Error) as e:
                reason = getattr(e, "strerror", None) or getattr(e, "reason", None) or str(e) or type(e).__name__
                raise TransportError(f"host {self.name} is unreachable at {cfg.address}:{cfg.port}: {reason}") from None
            return self._conn

    async def connect(self) -> None:
        await self._connect()

    async def run(self, cmd, *, timeout=None, on_output=None, env=None, cwd=None, stdin=None) -> CommandResult:
        import asyncssh

        conn = await self._connect()
        pgid: list[int] = []
        out: list[str] = []
        err: list[str] = []
        so = _LineSplitter("stdout", on_output, out)
        se = _LineSplitter("stderr", on_output, err, on_pgid=pgid.append)
        t0 = time.monotonic()
        async with self._channels:
            try:
                proc = await conn.create_process(session_wrapped(cmd, env, cwd), encoding="utf-8",
                                                 errors="replace", stdin=asyncssh.DEVNULL if stdin is None else asyncssh.PIPE)
            except (asyncssh.Error, OSError) as e:
                self._conn = None
                raise TransportError(f"host {self.name}: could not start a command: {e}") from None
            if stdin is not None:
                proc.stdin.write(stdin)
                proc.stdin.write_eof()

            async def pump(reader, splitter):
                while chunk := await reader.read(65536):
                    splitter.feed(chunk)
                splitter.close()

            pumps = asyncio.gather(pump(proc.stdout, so), pump(proc.stderr, se))
            timed_out = False
            try:
                await asyncio.wait_for(asyncio.shield(pumps), timeout)
                await proc.wait_closed()
            except asyncio.TimeoutError:
                timed_out = True
                await self._kill_group(pgid)
            except asyncio.CancelledError:
                await asyncio.shield(self._kill_group(pgid))
                proc.close()
                raise
            except (asyncssh.Error, OSError, ConnectionError) as e:
                self._conn = None
                raise TransportError(f"host {self.name}: connection lost during the command: {e}") from None
            finally:
                if timed_out:
                    proc.close()
                try:
                    await asyncio.wait_for(pumps, 1.0)
                except (asyncio.TimeoutError, asyncio.CancelledError, asyncssh.Error, ConnectionError):
                    pumps.cancel()
        if proc.exit_status is None and not timed_out and conn.is_closed():
            self._conn = None
            raise TransportError(f"host {self.name}: connection lost during the command")
        return CommandResult(None if timed_out else proc.exit_status, "".join(out), "".join(err),
                             timed_out=timed_out, duration_s=time.monotonic() - t0,
                             signal=proc.exit_signal[0] if proc.exit_signal else None)

    async def _kill_group(self, pgid: list[int]) -> None:
        if not pgid:
            return
        g = pgid[0]
        # dash's kill takes no `--`; a negative number is the process group. A server that
        # did not make the command a group leader leaves no such group: signal the shell.
        script = (f"kill -TERM -{g} 2>/dev/null || kill -TERM {g} 2>/dev/null; i=0; "
                  f"while kill -0 -{g} 2>/dev/null && [ $i -lt 20 ]; do sleep 0.1; i=$((i+1)); done; "
                  f"kill -KILL -{g} 2>/dev/null; true")
        try:
            conn = await self._connect()
            await asyncio.wait_for(conn.run(script, check=False), KILL_GRACE_S + 10)
        except Exception:  # best effort: the caller reports the timeout either way
            pass

    async def read_file(self, path: str) -> bytes:
        conn = await self._connect()
        async with self._channels:
            res = await conn.run(f"cat -- {path_for_shell(path)}", encoding=None, check=False)
        if res.exit_status != 0:
            msg = (res.stderr or b"").decode(errors="replace").strip()
            raise FileNotFoundError(msg or f"cannot read {path} on {self.name}")
        return res.stdout

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        conn = await self._connect()
        p = path_for_shell(path)
        mode_cmd = (f'chmod {mode:o} "$t"' if mode is not None else
                    f'if [ -e {p} ]; then chmod "$(stat -L -c %a {p})" "$t"; fi')
        script = (f't="$(dirname {p})/.$(basename {p}).eagle-tmp-$$"; '
                  f'cat > "$t" && {mode_cmd} && mv -f -T "$t" {p} || {{ rm -f "$t"; exit 1; }}')
        async with self._channels:
            res = await conn.run(script, input=data, encoding=None, check=False)
        if res.exit_status != 0:
            msg = (res.stderr or b"").decode(errors="replace").strip()
            raise OSError(f"cannot write {path} on {self.name}: {msg}")

    async def spawn_detached(self, argv, *, log_path, pid_path, env=None, cwd=None) -> int:
        res = await self.run(detach_script(argv, log_path, pid_path, env, cwd), timeout=30)
        if not res.ok:
            raise TransportError(f"could not start {argv[0]} on {self.name}: {res.stderr.strip() or res.exit_status}")
        return int(res.stdout.split()[-1])

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            try:
                await asyncio.wait_for(self._conn.wait_closed(), 2)
            except asyncio.TimeoutError:
                pass
            self._conn = None


def path_for_shell(path: str) -> str:
    """Quote a path for sh, keeping a leading `~/` expandable."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


class TransportPool:
    """Builds and caches one transport per configured host."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._t: dict[str, Transport] = {}

    def get(self, name: str) -> Transport:
        if name not in self._t:
            cfg = self.settings.hosts[name]
            if cfg.transport == "local":
                self._t[name] = LocalTransport(name)
            else:
                tunnel = self.get(cfg.jump) if cfg.jump else None
                if tunnel is not None and not isinstance(tunnel, SSHTransport):
                    raise TransportError(f"host {name}: jump host {cfg.jump} must be an ssh host")
                self._t[name] = SSHTransport(name, cfg, tunnel=tunnel)
        return self._t[name]

    async def close(self) -> None:
        for t in self._t.values():
            await t.close()
        self._t.clear()
