"""An asyncssh SSH server on 127.0.0.1 that runs each command with /bin/sh as the current user.

For machines without OpenSSH's sshd (the real-GPU box): generated host and client keys,
a known_hosts file pinning the host key, and a host entry for eagle.yaml.
"""
from __future__ import annotations

import asyncio
import getpass
import os
from dataclasses import dataclass
from pathlib import Path

import asyncssh


class _Server(asyncssh.SSHServer):
    def __init__(self, client_pub: asyncssh.SSHKey, conns: set[asyncssh.SSHServerConnection]):
        self._client_pub = client_pub.export_public_key()
        self._conns = conns
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._conns.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        self._conns.discard(self._conn)  # type: ignore[arg-type]

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return key.export_public_key() == self._client_pub


async def _handle(process: asyncssh.SSHServerProcess) -> None:
    """Run the command, pumping bytes both ways, then report its exit status."""
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", process.command or "true", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)

    async def pump_in() -> None:
        try:
            while data := await process.stdin.read(65536):
                proc.stdin.write(data)
                await proc.stdin.drain()
        except (asyncssh.Error, ConnectionError, BrokenPipeError):
            pass
        finally:
            try:
                proc.stdin.close()
            except Exception:
                pass

    async def pump_out(src: asyncio.StreamReader, dst: asyncssh.SSHWriter) -> None:
        while data := await src.read(65536):
            try:
                dst.write(data)
            except (asyncssh.Error, ConnectionError):
                return

    feeder = asyncio.create_task(pump_in())
    await asyncio.gather(pump_out(proc.stdout, process.stdout), pump_out(proc.stderr, process.stderr))
    rc = await proc.wait()
    feeder.cancel()
    process.exit(rc if rc >= 0 else 128 - rc)


@dataclass
class AsyncSSHServer:
    server: asyncssh.SSHAcceptor
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    connections: set[asyncssh.SSHServerConnection]

    def host_config(self, **extra) -> dict:
        cfg = {"address": "127.0.0.1", "port": self.port, "user": self.user, "key": str(self.client_key),
               "known_hosts": str(self.known_hosts)}
        cfg.update(extra)
        return cfg

    async def close(self) -> None:
        """Stop listening AND close the connections clients still hold open.

        Since Python 3.12, asyncio's Server.wait_closed() (which asyncssh's wait_closed awaits)
        waits until every accepted connection is gone. A test's engine keeps its SSH
        connection open until its own fixture closes it, after this one: without closing
        them here, the teardown of the SSH test waited forever and the one-invocation GPU
        suite hung after it (Python 3.11 returned at once, so it never showed up off the
        GPU machine).
        """
        self.server.close()
        for conn in list(self.connections):
            conn.close()
        for conn in list(self.connections):
            await conn.wait_closed()
        await self.server.wait_closed()


async def start_asyncssh_server(root: Path) -> AsyncSSHServer:
    root.mkdir(parents=True, exist_ok=True)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    key_path = root / "client_ed25519"
    client_key.write_private_key(str(key_path))
    os.chmod(key_path, 0o600)
    conns: set[asyncssh.SSHServerConnection] = set()
    server = await asyncssh.create_server(
        lambda: _Server(client_key, conns), "127.0.0.1", 0, server_host_keys=[host_key], process_factory=_handle,
        encoding=None)
    port = server.sockets[0].getsockname()[1]
    known = root / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_key.export_public_key().decode().strip()}\n")
    return AsyncSSHServer(server, port, getpass.getuser(), key_path, known, conns)
