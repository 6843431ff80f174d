"""Transports: how the engine reaches a host (local subprocesses or asyncssh)."""
from eaglebot.transport.base import Transport
from eaglebot.transport.local import LocalTransport
from eaglebot.transport.pool import TransportPool
from eaglebot.transport.ssh import SSHTransport

__all__ = ["LocalTransport", "SSHTransport", "Transport", "TransportPool"]
