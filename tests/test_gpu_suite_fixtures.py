"""The real-GPU suite's own fixtures, checked without a GPU: the asyncssh server closes the
connections a client still holds (else Python 3.12's Server.wait_closed() waits for them and the
one-invocation GPU suite hung after the SSH test), and leftover servers named by pid files die."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "gpu"))

import asyncssh  # noqa: E402

from asyncssh_server import start_asyncssh_server  # noqa: E402
from support.helpers import wait_for  # noqa: E402
from real_gpu import kill_leftover_servers  # noqa: E402


async def test_closing_the_asyncssh_server_closes_connections_clients_still_hold(tmp_path):
    server = await start_asyncssh_server(tmp_path / "assh")
    conn = await asyncssh.connect("127.0.0.1", server.port, username=server.user,
                                  client_keys=[str(server.client_key)], known_hosts=str(server.known_hosts))
    res = await conn.run("echo hi", check=True)
    assert res.stdout == "hi\n" and len(server.connections) == 1
    # The engine's connection is still open here, as in the GPU tests' fixture teardown order.
    await asyncio.wait_for(server.close(), 30)
    await asyncio.wait_for(conn.wait_closed(), 30)
    assert server.connections == set()


def _execed(*pids: int) -> None:
    """Until each child runs its own program (a forked child shows the parent's command line until
    its exec; on a loaded machine the check below would read that)."""
    for pid in pids:
        wait_for(lambda: "300" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"), 30,
                 what=f"process {pid} to exec")


def test_leftover_servers_named_by_pid_files_are_killed_and_nothing_else(tmp_path):
    run = tmp_path / "state" / "run"
    run.mkdir(parents=True)
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "sglang.launch_server"],
                              start_new_session=True)
    other = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        _execed(server.pid, other.pid)
        (run / "server-30000.pid").write_text(f"{server.pid}\n")
        (run / "server-30001.pid").write_text(f"{other.pid}\n")     # not an SGLang server: left alone
        (run / "server-30002.pid").write_text("999999999\n")         # gone
        assert kill_leftover_servers(tmp_path / "state") == [server.pid]
        assert server.wait(30) == -9 and other.poll() is None
    finally:
        for p in (server, other):
            p.kill()
            p.wait(30)


def test_leftover_servers_of_one_port_only_when_the_state_folder_is_shared(tmp_path):
    """The real-SGLang module uses the default state folder (~/.eaglebot), which other runs share: it
    kills only what its own port's pid file names."""
    run = tmp_path / "state" / "run"
    run.mkdir(parents=True)
    mine, other = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "sglang.launch_server"],
                                    start_new_session=True) for _ in range(2))
    try:
        _execed(mine.pid, other.pid)
        (run / "server-31000.pid").write_text(f"{mine.pid}\n")
        (run / "server-31001.pid").write_text(f"{other.pid}\n")
        assert kill_leftover_servers(tmp_path / "state", 31000) == [mine.pid]
        assert mine.wait(30) == -9 and other.poll() is None
    finally:
        for p in (mine, other):
            p.kill()
            p.wait(30)
