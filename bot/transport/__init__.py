"""Transports: how the engine reaches a host (local subprocesses or asyncssh)."""
from eaglebot.sdk import CommandResult, path_for_shell
from eaglebot.transport.base import Transport
from eaglebot.transport.local import LocalTransport, atomic_write_local
from eaglebot.transport.pool import TransportPool
from eaglebot.transport.ssh import SSHTransport

__all__ = ["CommandResult", "LocalTransport", "SSHTransport", "Transport", "TransportPool",
           "atomic_write_local", "path_for_shell"]
