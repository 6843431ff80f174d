"""Fixtures for the real-GPU tests: an in-process asyncssh server, PyTorch holder processes,
a time limit per test and a guard that no test starts on GPUs a previous one left busy.

The whole suite runs as ONE invocation (`pytest -o addopts="" -m gpu tests/gpu`): a test that
hangs is failed at its limit (SIGALRM, with every thread's stack printed) instead of stopping
the ones after it, and memory a failed test left behind is freed or named before the next starts.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from asyncssh_server import start_asyncssh_server  # noqa: E402
from real_gpu import Holders, kill_leftover_servers, memory_used  # noqa: E402

# Per-test limit in seconds (setup, call and teardown together); EAGLE_GPU_TEST_TIMEOUT_S overrides.
TEST_TIMEOUT_S = int(os.environ.get("EAGLE_GPU_TEST_TIMEOUT_S", "240"))
FREE_MIB = 1024


class GpuTestTimedOut(Exception):
    pass


@pytest.fixture(autouse=True)
def per_test_timeout(request):
    """Fail a test that runs past TEST_TIMEOUT_S (pytest-timeout's signal method, without the plugin)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(_sig: int, _frame: FrameType | None) -> None:
        faulthandler.dump_traceback(sys.stderr, all_threads=True)
        raise GpuTestTimedOut(f"{request.node.nodeid} ran past {TEST_TIMEOUT_S}s (EAGLE_GPU_TEST_TIMEOUT_S)")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TEST_TIMEOUT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(autouse=True)
def gpus_free_between_tests(per_test_timeout):
    """Before each test: the GPUs are free (waiting up to 30 s for a previous test's memory)."""
    deadline = time.monotonic() + 30
    used = memory_used()
    while max(used.values()) > FREE_MIB and time.monotonic() < deadline:
        time.sleep(0.2)
        used = memory_used()
    assert max(used.values()) <= FREE_MIB, f"GPUs busy before the test started (MiB per GPU: {used})"
    yield


@pytest.fixture
def holders():
    h = Holders()
    yield h
    h.stop_all()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and max(memory_used().values()) > FREE_MIB:
        time.sleep(0.2)


@pytest.fixture
def server_state(tmp_path):
    """The bot's state folder for a test that launches servers; at teardown, every server its pid
    files still name is killed (its whole session), so a failed test leaks no GPU memory."""
    state = tmp_path / "state"
    yield state
    kill_leftover_servers(state)


@pytest.fixture
async def asyncssh_server(tmp_path):
    server = await start_asyncssh_server(tmp_path / "assh")
    yield server
    await server.close()
