"""Fixtures for the real-GPU tests: an in-process asyncssh server and PyTorch holder processes."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from asyncssh_server import start_asyncssh_server  # noqa: E402
from real_gpu import Holders, memory_used  # noqa: E402


@pytest.fixture
def holders():
    h = Holders()
    yield h
    h.stop_all()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and max(memory_used().values()) > 1024:
        time.sleep(0.2)


@pytest.fixture
async def asyncssh_server(tmp_path):
    server = await start_asyncssh_server(tmp_path / "assh")
    yield server
    await server.close()
