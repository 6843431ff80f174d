"""No orphans (issue 10): a dropped connection, a killed sshd or a SIGKILLed `eagle` leaves no
remote process behind, no step `running`, no row lost, and the host lock is freed only once
the step's processes were stopped. Real OpenSSH sshd on loopback, real processes, /proc."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.helpers import pid_alive, wait_for, write_playbook, write_yaml
from support.sshd import SSHD, SSHServer, start_sshd

from eaglebot.engine.playbook import load_playbook
from eaglebot.engine.runner import RunRequest
from eaglebot.store import Store


@pytest.fixture
def own_sshd(tmp_path):
    """An sshd of this test alone: the test kills it."""
    server = start_sshd(Path("/tmp") / f"eagle-sshd-fault-{os.getpid()}-{os.urandom(3).hex()}")
    yield server
    server.stop()
    for p in sshd_children(server.proc.pid):
        _kill(p)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return int(s[s.rindex(")") + 2:].split()[1])
    except (OSError, ValueError):
        return None


def sshd_children(root: int) -> list[int]:
    """The per-connection sshd processes under the listener `root` (not the user's commands)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            pp = _ppid(int(d))
            if pp is not None:
                kids.setdefault(pp, []).append(int(d))
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            try:
                comm = open(f"/proc/{c}/comm").read().strip()
            except OSError:
                continue
            if comm.startswith("sshd"):
                out.append(c)
                todo.append(c)
    return out


def restart_sshd(server: SSHServer) -> None:
    server.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(server.root / "sshd_config")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    import socket

    def up() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=0.2):
                return True
        except OSError:
            return False
    wait_for(up, 10, 0.05, "sshd to listen again")


SLOW = "echo $$ > {pids}; setsid sleep 341 & echo $! >> {pids}; sleep 342 & echo $! >> {pids}; echo started; sleep 343"


def _pids(path: Path) -> list[int]:
    try:
        return [int(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return []


def _book(tmp_path: Path, pids: Path):
    return load_playbook(write_playbook(tmp_path, "slow", f"""
        name: slow
        steps:
          - skill: shell
            with: {{command: "{SLOW.format(pids=pids)}"}}
    """))


async def _wait_started(pids: Path) -> list[int]:
    return await asyncio.to_thread(wait_for, lambda: len(_pids(pids)) == 3 and _pids(pids), 20, 0.05,
                                   "the remote command to start")


async def _gone(pids: list[int]) -> None:
    await asyncio.to_thread(wait_for, lambda: not any(pid_alive(p) for p in pids), 15, 0.05,
                            "no remote process left")


def _no_running_rows(store: Store) -> None:
    assert not list(store.db.query("select id from steps where status = 'running'"))
    assert not list(store.db.query("select id from runs where status = 'running'"))


async def test_per_connection_sshd_killed_reconnects_and_stops_the_command(services, own_sshd, remote_dir,
                                                                           tmp_path):
    svc = await services({"box": own_sshd.host_config()})
    pids = remote_dir / "pids"
    run_id, task = await svc.engine.start(RunRequest(playbook=_book(tmp_path, pids), hosts=["box"]))
    remote = await _wait_started(pids)
    for p in sshd_children(own_sshd.proc.pid):  # the connection's sshd processes, not the listener
        _kill(p)
    out = await asyncio.wait_for(task, 60)
    assert out.status == "failed"
    summary = out.steps[0].summary
    assert "connection lost" in summary and "processes stopped (SIGTERM, then SIGKILL)" in summary, summary
    await _gone(remote)
    store = svc.store.sync
    _no_running_rows(store)
    assert store.locks() == []
    row = store.steps(run_id)[0]
    assert row["status"] == "failed" and "started" in row["output"]
    procs = store.step_procs(row["id"])
    assert procs[0]["state"] == "stopped" and procs[0]["pgids"] != "[]"


async def test_sshd_killed_mid_step_keeps_the_lock_until_the_next_run_stops_the_orphans(
        services, own_sshd, remote_dir, tmp_path):
    svc = await services({"box": own_sshd.host_config(connect_timeout_s=2)})
    pids = remote_dir / "pids"
    run_id, task = await svc.engine.start(RunRequest(playbook=_book(tmp_path, pids), hosts=["box"]))
    remote = await _wait_started(pids)
    conns = sshd_children(own_sshd.proc.pid)
    assert conns
    own_sshd.proc.kill()  # the listener and every per-connection process
    own_sshd.proc.wait()
    for p in conns:
        _kill(p)
    out = await asyncio.wait_for(task, 60)
    store = svc.store.sync
    assert out.status == "failed"
    summary = out.steps[0].summary
    assert "connection lost" in summary and "could not be stopped" in summary and "unreachable" in summary, summary
    _no_running_rows(store)
    # The host was unreachable: the processes live on, and the lock says why.
    assert any(pid_alive(p) for p in remote)
    (lock,) = store.locks()
    assert lock["pid"] is None and f"processes of run #{run_id} may still run on box" in lock["reason"]

    restart_sshd(own_sshd)
    book2 = load_playbook(write_playbook(tmp_path, "quick", "name: quick\nsteps:\n  - skill: shell\n    with: {command: 'true'}\n"))
    out2 = await svc.engine.run(RunRequest(playbook=book2, hosts=["box"]))
    assert out2.status == "succeeded", out2.error
    assert [w for w in out2.warnings if f"run #{run_id} had left processes on box" in w]
    await _gone(remote)
    assert store.locks() == []
    assert f"were stopped by run #{out2.run_id}" in store.steps(run_id)[0]["summary"]
    _no_running_rows(store)
    assert len(store.steps(run_id)) == 1 and len(store.steps(out2.run_id)) == 1


def test_eagle_sigkilled_and_restarted_stops_what_it_left_over_ssh(own_sshd, remote_dir, tmp_path):
    pids = remote_dir / "pids"
    books = tmp_path / "books"
    books.mkdir()
    write_playbook(books, "slow", f"""
        name: slow
        steps:
          - skill: shell
            with: {{command: "{SLOW.format(pids=pids)}"}}
    """)
    write_playbook(books, "quick", "name: quick\nsteps:\n  - skill: shell\n    with: {command: 'true'}\n")
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "playbooks_dir": "books",
                                                "hosts": {"box": own_sshd.host_config()}})
    env = {k: v for k, v in os.environ.items() if k != "EAGLE_CONFIG"}
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "run", "slow", "-H", "box", "--config", str(cfg)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    remote = wait_for(lambda: len(_pids(pids)) == 3 and _pids(pids), 30, 0.05, "the remote command to start")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(0.2)
    assert any(pid_alive(p) for p in remote)  # orphans until a restarted eagle stops them
    run2 = subprocess.run([sys.executable, "-m", "eaglebot", "run", "quick", "-H", "box", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert run2.returncode == 0, run2.stderr
    wait_for(lambda: not any(pid_alive(p) for p in remote), 15, 0.05, "no remote process left")
    store = Store(tmp_path / "eagle.db")
    try:
        _no_running_rows(store)
        runs = {r["id"]: r for r in store.db.query("select * from runs")}
        assert runs[1]["status"] == "interrupted" and runs[2]["status"] == "succeeded"
        step = store.steps(1)[0]
        assert step["status"] == "failed" and "were stopped by run #2" in step["summary"]
        assert store.locks() == []
        (w,) = store.warnings(2)
        assert w["message"].startswith("run #1 had left processes on box: ")
    finally:
        store.close()
