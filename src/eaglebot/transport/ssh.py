"""SSH hosts over asyncssh: the only module that imports it."""
from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
from pathlib import Path
import random
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Sequence

from eaglebot.config import HostConfig
from eaglebot.errors import HostUnreachable, TransportError
from eaglebot.sdk import CommandResult, OutputCallback, path_for_shell
from eaglebot.transport.base import (CURRENT, DRAIN_S, KILL_GRACE_S, LOGIN_FILES, LineSplitter, StepProcs,
                                     current_tag, login_check_script, parse_login, put_back,
                                     detach_script, note_kept, note_login, note_pgid, session_wrapped)
from eaglebot.transport.leftovers import kill_note, kill_script, leftover_note, parse_kill

if TYPE_CHECKING:  # imported when first used: `eagle history` never pays for asyncssh
    import asyncssh


_preloading: list[threading.Thread] = []
# How long opening a channel for a kill may take before the connection counts as wedged.
CHANNEL_OPEN_S = 1.0
# Exec mode, a command cancelled before its process group was read: how long to wait for it.
PGID_WAIT_S = 5.0
# Backoff between connect tries: BACKOFF_S * 2**try, jittered (x0.5-1.5) so hosts dropped
# together by a bastion's MaxStartups do not come back together; at most BACKOFF_MAX_S.
BACKOFF_S = 0.25
BACKOFF_MAX_S = 4.0


_CIPHERS = ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "chacha20-poly1305@openssh.com",
            "aes256-ctr", "aes192-ctr", "aes128-ctr"]


def backoff_s(attempt: int) -> float:
    return float(min(BACKOFF_MAX_S, BACKOFF_S * 2 ** attempt) * random.uniform(0.5, 1.5))


class _Wedged(TransportError):
    """The connection opened no channel in time: it was dropped; the next try opens a new one."""


def preload() -> None:
    """Import asyncssh (~60 ms) in a background thread while the caller loads the store and
    the playbook; the first connection then finds it loaded. Idempotent."""
    if "asyncssh" in sys.modules or _preloading:
        return
    t = threading.Thread(target=importlib.import_module, args=("asyncssh",), name="eagle-preload", daemon=True)
    _preloading.append(t)
    t.start()


class SSHTransport:
    """One asyncssh connection per host, reused by every step; a channel per command, at most
    `max_channels` at once."""

    def __init__(self, name: str, cfg: HostConfig, *, tunnel: "SSHTransport | None" = None,
                 connecting: asyncio.Semaphore | None = None, via_jump: asyncio.Semaphore | None = None):
        self.name, self.cfg, self.tunnel = name, cfg, tunnel
        self._connecting = connecting or asyncio.Semaphore(1)
        self._via_jump = via_jump  # connections being opened through the same jump host
        self.connect_tries = 0  # tries the last connection took (1: the first worked)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._sshd_pid: int | None = None
        # The host's boot clock against ours, learned with the sshd pid: (our boot clock, `_boot`,
        # before the question, after the answer, the host's uptime in the answer).
        self._clock: tuple[float, float, float] | None = None
        # The login files (base.LOGIN_FILES) as the connection found them: put back when a step
        # changes one (the step's own start is checked by hash; this is what it had).
        self._login_cache: dict[str, bytes] = {}
        self._lock = asyncio.Lock()
        self._channels = asyncio.Semaphore(cfg.max_channels)

    async def _connect(self) -> asyncssh.SSHClientConnection:
        import asyncssh

        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            cfg = self.cfg
            known = str(known_hosts_path(cfg))
            kwargs: dict[str, Any] = dict(
                host=cfg.address, port=cfg.port, known_hosts=known,
                connect_timeout=cfg.connect_timeout_s, login_timeout=cfg.connect_timeout_s,
                keepalive_interval=15, keepalive_count_max=3,
                # AES-GCM first (then asyncssh's defaults): AES-NI does it in hardware, where
                # chacha20-poly1305 costs a cipher context per packet in Python, ~4 ms a host
                # for a short playbook (tests/bench/bench_bastion.py)
                encryption_algs=_CIPHERS,
            )
            if cfg.user:
                kwargs["username"] = cfg.user
            if cfg.key:
                kwargs["client_keys"] = [os.path.expanduser(cfg.key)]
                if not os.access(kwargs["client_keys"][0], os.R_OK):   # the config's mistake: no connect tries
                    raise TransportError(f"host {self.name}: the SSH key {cfg.key} does not exist or is not readable")
            if not os.path.exists(known):
                raise TransportError(
                    f"host {self.name}: known_hosts file {known} does not exist; "
                    f"pin the host key first: `eagle hosts pin {self.name}` shows its fingerprint and writes it")
            self._conn = await self._connect_retrying(kwargs, known)
            self._sshd_pid = None
            await self._learn_sshd_pid(self._conn)
            return self._conn

    async def _connect_retrying(self, kwargs: dict[str, Any], known: str) -> asyncssh.SSHClientConnection:
        """asyncssh.connect, tried again (`connect_retries`, jittered backoff) when the failure
        is on the way (refused, reset, lost before login, timed out: a bastion's MaxStartups
        drops the excess that way); a refused key or host key, or a name that does not
        resolve, fails at once. Still failing: HostUnreachable."""
        import asyncssh

        cfg = self.cfg
        tries = cfg.connect_retries + 1
        reason = ""
        for i in range(tries):
            self.connect_tries = i + 1
            if self.tunnel is not None:  # (re)opened when it closed since the last try
                try:
                    kwargs["tunnel"] = await self.tunnel._connect()
                except HostUnreachable as e:
                    raise HostUnreachable(f"host {self.name}: its jump host is unreachable ({e})") from None
            try:
                async with (self._via_jump or contextlib.nullcontext()), self._connecting:
                    return await asyncssh.connect(**kwargs)
            except asyncssh.HostKeyNotVerifiable as e:
                raise TransportError(
                    f"host {self.name}: host key of {cfg.address}:{cfg.port} is unknown or changed "
                    f"({e.reason}); refusing to connect (check {known}; `eagle doctor` prints the key it presents)") from None
            except asyncssh.PermissionDenied:
                raise TransportError(f"host {self.name}: SSH login as {cfg.user or 'the current user'} "
                                     f"to {cfg.address}:{cfg.port} was refused (check the key)") from None
            except socket.gaierror as e:
                raise HostUnreachable(f"host {self.name} is unreachable: {cfg.address}: {e.strerror}") from None
            except asyncssh.KeyImportError as e:   # the config's mistake (`key: /etc/passwd`): no retries
                raise TransportError(f"host {self.name}: the SSH key {cfg.key} is not a private key asyncssh can "
                                     f"read ({e}); point `key` at the private key file") from None
            except ValueError as e:   # a known_hosts file that is not one (asyncssh reads it at the handshake)
                raise TransportError(f"host {self.name}: known_hosts file {known} cannot be read ({str(e)[:200]}); "
                                     f"fix it, or pin the host key again: `eagle hosts pin {self.name}`") from None
            except (OSError, asyncio.TimeoutError, asyncssh.Error) as e:
                reason = (getattr(e, "strerror", None) or getattr(e, "reason", None) or str(e)
                          or type(e).__name__)
            if i + 1 < tries:
                await asyncio.sleep(backoff_s(i))
        tried = f" after {tries} tries" if tries > 1 else ""
        raise HostUnreachable(f"host {self.name} is unreachable at {cfg.address}:{cfg.port}{tried}: {reason}")

    async def _learn_sshd_pid(self, conn: asyncssh.SSHClientConnection) -> None:
        """The pid of the sshd process that serves this connection (every command's parent),
        learned once per connection, before its first command (one round trip): a step that
        stops it (`kill -STOP $PPID`) wedges the connection, and the kill that follows
        continues it from a new one. With it, the host's boot clock (`_since`)."""
        try:
            t_a = _boot()
            res = await asyncio.wait_for(conn.run(
                'read -r u _ </proc/uptime; echo "$PPID $u"; cd && for f in ' + " ".join(LOGIN_FILES)
                + '; do if [ -f "$f" ]; then printf "%s " "$f"; base64 -w0 < "$f"; echo; fi; done', check=False), 10)
            t_b = _boot()
            first, *files = _text(res.stdout).splitlines() or [""]
            words = first.split()
            if len(words) == 2 and words[0].isdigit() and self._conn is conn:
                self._sshd_pid = int(words[0])
                self._clock = (t_a, t_b, float(words[1]))
            import base64
            for line in files:
                path, _, data = line.partition(" ")
                if path in LOGIN_FILES:
                    self._login_cache[path] = base64.b64decode(data)
        except Exception:  # a nicety for the kill path: without it, a stopped sshd stays stopped
            pass

    def _since(self, announced: float | None, sent: float) -> float | None:
        """The command's start on the host's boot clock: as its wrapper announced it when that
        lies between the host's clock when we sent the command and when the announcement came
        (give or take half a second and the clocks' drift), else the earliest it can have
        started. A step cannot move the start its sweep goes by (issue 46)."""
        if self._clock is None:
            return announced
        t_a, t_b, up = self._clock
        now = _boot()
        slack = 0.5 + 1e-3 * (now - t_a)
        earliest = up + sent - t_b
        if announced is not None and earliest - slack <= announced <= up + now - t_a + slack:
            return announced
        return earliest - slack

    async def connect(self) -> None:
        await self._connect()

    async def run(self, cmd: str | Sequence[str], *, timeout: float | None = None,
                  on_output: OutputCallback | None = None, env: dict[str, str] | None = None,
                  cwd: str | None = None, stdin: str | None = None) -> CommandResult:
        return await self._run_exec(cmd, timeout=timeout, on_output=on_output, env=env, cwd=cwd, stdin=stdin)

    async def _run_exec(self, cmd: str | Sequence[str], *, timeout: float | None,
                        on_output: OutputCallback | None, env: dict[str, str] | None,
                        cwd: str | None, stdin: str | None) -> CommandResult:
        import asyncssh

        conn = await self._connect()
        pgid: list[int] = []
        out: list[str] = []
        err: list[str] = []
        so = LineSplitter("stdout", on_output, out)

        pgid_read = asyncio.Event()

        def on_pgid(g: int, since: float | None, login: dict[str, str] | None) -> None:
            pgid.append(g)
            note_pgid(g, self._since(since, sent))
            if login is not None:
                note_login(login)
            pgid_read.set()

        se = LineSplitter("stderr", on_output, err, on_pgid=on_pgid)
        t0 = time.monotonic()
        async with self._channels:
            sent = _boot()
            try:
                # Bytes, not str: asyncssh encodes a str command strictly, and a value from a
                # command's output may hold bytes that are not UTF-8.
                line = session_wrapped(cmd, env, cwd).encode("utf-8", "surrogateescape")
                proc = await conn.create_process(line, encoding="utf-8",
                                                 errors="surrogateescape", stdin=asyncssh.DEVNULL if stdin is None else asyncssh.PIPE)
            except (asyncssh.Error, OSError) as e:
                self._conn = None
                raise TransportError(f"host {self.name}: could not start a command: {e}") from None
            except asyncio.CancelledError:  # it may have started: stop what carries the tag
                await asyncio.shield(self._kill([]))
                raise
            if stdin is not None:
                proc.stdin.write(stdin)
                proc.stdin.write_eof()

            async def pump(reader: asyncssh.SSHReader[str], splitter: LineSplitter) -> None:
                while chunk := await reader.read(65536):
                    splitter.feed(chunk)
                splitter.close()

            pumps = asyncio.gather(pump(proc.stdout, so), pump(proc.stderr, se))
            # sshd sends the exit status when the command's shell exits, before its output
            # ends if a background child still holds it: the command ends there (DRAIN_S for
            # the rest of its output), and the child is stopped at the end of the step.
            exited = asyncio.Event()
            proc.exit_status_received = lambda status: exited.set()  # type: ignore[method-assign]
            proc.exit_signal_received = lambda *_a: exited.set()  # type: ignore[method-assign]
            if proc.exit_status is not None or proc.exit_signal is not None:  # came with the open
                exited.set()
            timed_out = False
            try:
                await asyncio.wait_for(_first(pumps, exited), timeout)
                cut = False
                try:
                    await asyncio.wait_for(asyncio.shield(pumps), DRAIN_S)
                except asyncio.TimeoutError:
                    cut = True
                if cut:
                    proc.close()
                else:
                    await proc.wait_closed()
            except asyncio.TimeoutError:
                timed_out = True
                await self._kill(pgid, cont=self._stoppable())
            except asyncio.CancelledError:
                if not pgid:
                    # Cancelled before the pump read the command's first stderr line, which names
                    # its process group (seen on a loaded machine): it is on its way, so wait a
                    # little for it rather than kill nothing.
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(asyncio.shield(pgid_read.wait()), PGID_WAIT_S)
                await asyncio.shield(self._kill(pgid, cont=self._stoppable()))
                proc.close()
                raise
            except (asyncssh.Error, OSError, ConnectionError) as e:
                self._conn = None
                note = await self._kill(pgid)
                raise TransportError(f"host {self.name}: connection lost during the command ({e}); {note}") from None
            finally:
                if timed_out:
                    proc.close()
                try:
                    await asyncio.wait_for(pumps, 1.0)
                except (asyncio.TimeoutError, asyncio.CancelledError, asyncssh.Error, ConnectionError):
                    pumps.cancel()
        if proc.exit_status is None and not timed_out and conn.is_closed():
            self._conn = None
            note = await self._kill(pgid)
            raise TransportError(f"host {self.name}: connection lost during the command; {note}")
        return CommandResult(None if timed_out else proc.exit_status, "".join(out), "".join(err),
                             timed_out=timed_out, duration_s=time.monotonic() - t0,
                             signal=proc.exit_signal[0] if proc.exit_signal else None,
                             cut_bytes=so.cut_bytes + se.cut_bytes)

    async def _kill(self, pgids: list[int], now: list[int] | None = None, cont: list[int] | None = None) -> str:
        """Stop the command's process groups and every process carrying the step's tag,
        over a fresh channel (a new connection when the old one is gone); one sentence says
        what happened and the step's `StepProcs` records it."""
        return await self.cleanup(current_tag(), pgids, record=True, now=now, cont=cont)

    def _stoppable(self) -> list[int] | None:
        """The sshd process a timed-out command may have stopped (its parent, which serves the
        whole connection): continued by the kill."""
        return [self._sshd_pid] if self._sshd_pid else None

    async def _control(self, script: str) -> str:
        """Run a kill script on its own channel and return its stdout. A connection that does
        not open a channel within CHANNEL_OPEN_S is wedged (a step stopped the sshd process
        that serves it): it is dropped, and the next try opens a new one."""
        conn = await self._connect()
        try:
            proc = await asyncio.wait_for(conn.create_process(script), CHANNEL_OPEN_S)
        except asyncio.TimeoutError:
            if self._conn is conn:
                self._conn = None
            conn.close()
            raise _Wedged(f"host {self.name}: the connection did not answer") from None
        try:
            res = await asyncio.wait_for(proc.wait(check=False), KILL_GRACE_S + 15)
        finally:
            proc.close()
        return _text(res.stdout)

    async def leftovers(self, sp: StepProcs) -> tuple[int, str]:
        last = ""
        check = login_check_script(sp.login) if sp.login is not None and sp.watch_login else ""
        for _ in range(2):  # a wedged connection is replaced once
            try:
                out = await self._control(check + kill_script(sp.tag, sp.pgids, since=sp.since, keep=sp.keep))
                sp.login_changed = parse_login(out)
                if sp.login_changed:
                    sp.login_note = await self._put_back(sp)
                return leftover_note(parse_kill(out))
            except Exception as e:  # the step's own result says what broke; this only adds to it
                last = type(e).__name__
        return 0, f"could not check for processes it left running ({last})"

    async def _put_back(self, sp: StepProcs) -> str:
        """Write back what the step changed of the login files (moved aside by the check), from
        what the connection read, where that is what the step found; one sentence."""
        return await put_back(self, sp, self._login_cache)

    async def cleanup(self, tag: str | None, pgids: list[int] | None = None, *, record: bool = False,
                      since_wall: float | None = None, attempts: int = 3, now: list[int] | None = None,
                      cont: list[int] | None = None) -> str:
        """Kill what `tag` (and `pgids`) name on this host (transport/leftovers.py); reconnects, a few tries."""
        what = "the command's processes" if pgids else f"processes tagged {tag}"
        if not tag and not pgids and not now:
            return "its processes were not known"
        last = ""
        sp = CURRENT.get() if record else None
        script = kill_script(tag, pgids or [], now or [], cont or [], since=sp.since if sp else None,
                             since_wall=since_wall, keep=sp.keep if sp else ())
        for i in range(attempts):
            try:
                out = await self._control(script)
                ok, note = kill_note(parse_kill(out), what)
                if sp is not None:
                    (sp.stopped if ok else sp.pending)(note)
                return note
            except _Wedged as e:
                last = str(e)
                continue  # a new connection, at once
            except TransportError as e:
                last = f"the host is unreachable ({e})"
            except Exception as e:  # the connection broke again: retry on a new one
                self._conn = None
                last = f"the host did not answer ({type(e).__name__}: {e})"
            await asyncio.sleep(0.2 * (i + 1))
        note = f"{what} could not be stopped: {last}"
        if sp is not None:
            sp.pending(note)
        return note

    async def read_file(self, path: str) -> bytes:
        conn = await self._connect()
        async with self._channels:
            res = await conn.run(f"cat -- {path_for_shell(path)}", encoding=None, check=False)
        if res.exit_status != 0:
            msg = _text(res.stderr)
            raise FileNotFoundError(msg or f"cannot read {path} on {self.name}")
        return res.stdout if isinstance(res.stdout, bytes) else (res.stdout or "").encode()

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        conn = await self._connect()
        p = path_for_shell(path)
        mode_cmd = (f'chmod {mode:o} "$t"' if mode is not None else
                    f'if [ -e {p} ]; then chmod "$(stat -L -c %a {p})" "$t"; fi')
        # The rename needs only the folder's write permission: the new file is ours unless it is
        # given back the replaced file's owner and group, and where we may not (not root, and not
        # its owner or not in its group) nothing is written. chmod comes after chown, which
        # clears set-id bits.
        keep = (f'o=""; if [ -e {p} ]; then o="$(stat -L -c %u:%g {p})" || exit 1; me="$(id -u)"; '
                f'if [ "$me" != 0 ] && [ "${{o%%:*}}" != "$me" ]; then '
                f'echo "it belongs to $(stat -L -c %U {p}) and would become $(id -un)\'s; write it as its owner" >&2; '
                f'exit 1; fi; '
                f'if [ "$me" != 0 ] && ! id -G | tr " " "\\n" | grep -qx "${{o#*:}}"; then '
                f'echo "its group is $(stat -L -c %G {p}) and would become $(id -gn)\'s; '
                f'write it as a member of $(stat -L -c %G {p})" >&2; exit 1; fi; fi; ')
        script = (keep + f't="$(dirname {p})/.$(basename {p}).eagle-tmp-$$"; '
                  f'cat > "$t" && {{ [ -z "$o" ] || chown "$o" "$t"; }} && {mode_cmd} && mv -f -T "$t" {p} '
                  f'|| {{ rm -f "$t"; exit 1; }}')
        async with self._channels:
            res = await conn.run(script, input=data, encoding=None, check=False)
        if res.exit_status != 0:
            msg = _text(res.stderr)
            raise OSError(f"cannot write {path} on {self.name}: {msg}")

    async def spawn_detached(self, argv: Sequence[str], *, log_path: str, pid_path: str,
                             env: dict[str, str] | None = None, cwd: str | None = None) -> int:
        res = await self.run(detach_script(argv, log_path, pid_path, env, cwd), timeout=30)
        if not res.ok:
            raise TransportError(f"could not start {argv[0]} on {self.name}: {res.stderr.strip() or res.exit_status}")
        pid = int(res.stdout.split()[-1])
        note_kept(pid)
        return pid

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            try:
                await asyncio.wait_for(self._conn.wait_closed(), 2)
            except asyncio.TimeoutError:
                pass
            self._conn = None


async def _first(pumps: "asyncio.Future[Any]", exited: asyncio.Event) -> None:
    """Until the command's output ended or its exit status came."""
    waiter = asyncio.ensure_future(exited.wait())
    try:
        await asyncio.wait({waiter, pumps}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


def _boot() -> float:
    """This machine's boot clock: like the host's /proc/uptime it runs on through a suspend, where
    the monotonic clock stops."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _text(data: bytes | str | None) -> str:
    """A byte-mode channel's stderr as one stripped line of text."""
    if isinstance(data, bytes):
        return data.decode(errors="replace").strip()
    return (data or "").strip()


def known_hosts_path(cfg: HostConfig) -> Path:
    """The known_hosts file that pins a host's key (its `known_hosts`, else ~/.ssh/known_hosts)."""
    return Path(os.path.expanduser(cfg.known_hosts or "~/.ssh/known_hosts"))
