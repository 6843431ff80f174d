"""Host keys: the key an SSH host presents (read through its jump host, as the transport connects),
whether its known_hosts file already pins it, and pinning it (`eagle hosts pin`, `eagle doctor`).

The key is read without verifying it and without logging in: that is the point, it is not
pinned yet. A person compares the fingerprint (`ssh-keygen -lf` on the host's
/etc/ssh/ssh_host_*_key.pub prints the same `SHA256:...`) before it is written.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from eaglebot.config import HostConfig
from eaglebot.errors import HostUnreachable, TransportError
from eaglebot.transport.ssh import SSHTransport
from eaglebot.transport.ssh import known_hosts_path as known_hosts_path  # (also the pin command's)

Pinned = Literal["no", "same", "different"]


@dataclass(frozen=True)
class HostKey:
    algorithm: str      # ssh-ed25519, ecdsa-sha2-nistp256, ...
    fingerprint: str    # SHA256:... as `ssh-keygen -lf` prints it
    public: str         # "ALGORITHM BASE64", a known_hosts line without its host pattern

    def describe(self) -> str:
        return f"{self.algorithm} key {self.fingerprint}"


def _address(cfg: HostConfig) -> str:
    if not cfg.address:
        raise TransportError("the host has no address")
    return cfg.address


def host_pattern(cfg: HostConfig) -> str:
    """The host as OpenSSH (and asyncssh) look it up in known_hosts: `[addr]:port` off port 22."""
    return _address(cfg) if cfg.port == 22 else f"[{cfg.address}]:{cfg.port}"


def _pinned_keys(cfg: HostConfig) -> list[Any]:
    import asyncssh

    path = known_hosts_path(cfg)
    if not path.is_file():
        return []
    try:
        known = asyncssh.read_known_hosts(str(path))
    except (OSError, ValueError, asyncssh.KeyImportError) as e:
        raise TransportError(f"cannot read {path}: {e}") from None
    return list(known.match(_address(cfg), "", cfg.port)[0])


async def _server_key(cfg: HostConfig, kwargs: dict[str, Any]) -> Any:
    import asyncssh

    where = f"{cfg.address}:{cfg.port}"
    try:
        key = await asyncio.wait_for(asyncssh.get_server_host_key(_address(cfg), cfg.port, **kwargs),
                                     cfg.connect_timeout_s)
    except asyncio.TimeoutError:
        raise HostUnreachable(f"{where} did not answer an SSH handshake in {cfg.connect_timeout_s:g} s") from None
    except OSError as e:
        raise HostUnreachable(f"{where} is unreachable: {e.strerror or e}") from None
    except asyncssh.Error as e:
        raise TransportError(f"{where}: the SSH handshake failed: {e.reason}") from None
    if key is None:
        raise TransportError(f"{where} presented no host key")
    return key


async def scan(cfg: HostConfig, tunnel: SSHTransport | None = None) -> HostKey:
    """The key the host presents, through `tunnel` (its jump host's transport) when it has one.

    When known_hosts already holds keys for the host, the key is asked for in their algorithms
    first, as a connection would be (asyncssh offers only the pinned algorithms); a host that
    offers none of them is asked again for any key, which then differs from the pinned one."""
    pinned = _pinned_keys(cfg)
    kwargs: dict[str, Any] = {}
    if tunnel is not None:
        try:
            kwargs["tunnel"] = await tunnel._connect()
        except (HostUnreachable, TransportError) as e:
            raise TransportError(f"its jump host {tunnel.name} cannot be reached: {e}") from None
    key = None
    if pinned:
        try:
            key = await _server_key(cfg, {**kwargs, "server_host_key_algs": sorted({k.get_algorithm() for k in pinned})})
        except TransportError:   # sshd drops a handshake with no common host key type
            key = None
    if key is None:
        key = await _server_key(cfg, kwargs)
    return HostKey(key.get_algorithm(), key.get_fingerprint("sha256"),
                   " ".join(key.export_public_key("openssh").decode().split()[:2]))


def pinned_state(cfg: HostConfig, key: HostKey) -> Pinned:
    """Does the host's known_hosts pin `key` ("same"), pin another key ("different"), or nothing?"""
    keys = _pinned_keys(cfg)
    if not keys:
        return "no"
    mine = key.public.split()[:2]
    same = any(k.export_public_key("openssh").decode().split()[:2] == mine for k in keys)
    return "same" if same else "different"


def pin(cfg: HostConfig, key: HostKey) -> Path:
    """Append the key to the host's known_hosts (created 0600, its folder 0700); the path."""
    path = known_hosts_path(cfg)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        sep = b""
        if end:
            with open(path, "rb") as f:
                f.seek(end - 1)
                sep = b"" if f.read(1) == b"\n" else b"\n"
        os.write(fd, sep + f"{host_pattern(cfg)} {key.public}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return path
