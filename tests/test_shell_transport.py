"""Both transports (a channel per command over a real OpenSSH sshd on loopback, local
subprocesses): exact output, exit status, no leaking state, timeouts that kill setsid
descendants, a command that kills its own shell, concurrency."""
from __future__ import annotations

import asyncio
import os

import pytest

from support.helpers import pid_alive, wait_for

from eaglebot.config import HostConfig
from eaglebot.transport import LocalTransport, SSHTransport
from eaglebot.transport.base import CURRENT, StepProcs


@pytest.fixture(params=["local", "ssh"])
async def host(request, sshd):
    if request.param == "local":
        t = LocalTransport("local")
    else:
        t = SSHTransport("box", HostConfig(**sshd.host_config()))
    yield t
    await t.close()


TRICKY = r"printf 'a\nEAGLE-END 0\n\036E 0\n\036deadbeefdeadbeef E 0\n\tb\\'; printf '\377\000x' >&2; exit 7"


async def test_output_is_exact_whatever_the_command_prints(host):
    res = await host.run(TRICKY)
    assert res.exit_status == 7 and not res.timed_out
    assert res.stdout == "a\nEAGLE-END 0\n\x1eE 0\n\x1edeadbeefdeadbeef E 0\n\tb\\"
    assert res.stderr == "\udcff\x00x"  # every byte kept: surrogateescape gives back b"\xff\x00x"


async def test_bytes_that_are_not_utf8_go_back_to_the_host_as_they_came(host):
    """A value registered from one command's output (surrogate-escaped) in the next command."""
    first = await host.run("printf 'a\\377b'")
    assert first.stdout == "a\udcffb"
    res = await host.run(["sh", "-c", 'printf %s "$1" | od -An -tx1', "sh", first.stdout])
    assert res.ok and res.stdout.split() == ["61", "ff", "62"]


async def test_streamed_lines_and_status_of_many_commands(host):
    seen: list[tuple[str, str]] = []
    res = await host.run("echo one; echo two >&2; printf three", on_output=lambda s, l: seen.append((s, l)))
    assert res.ok and res.stdout == "one\nthree" and res.stderr == "two\n"
    assert sorted(seen) == [("stderr", "two"), ("stdout", "one"), ("stdout", "three")]
    for i in range(20):
        r = await host.run(["sh", "-c", f"exit {i % 5}"])
        assert r.exit_status == i % 5


async def test_environment_and_directory_do_not_leak_between_commands(host):
    assert (await host.run("cd /tmp && export LEAK=1 && umask 077 && pwd", env={"STEPVAR": "x"})).stdout == "/tmp\n"
    res = await host.run('pwd; echo "${LEAK-unset} ${STEPVAR-unset}"; umask')
    assert res.stdout.split("\n")[1] == "unset unset"
    assert res.stdout.split("\n")[0] != "/tmp" and res.stdout.split("\n")[2] != "0077"
    assert (await host.run("pwd", cwd="/tmp")).stdout == "/tmp\n"


async def test_timeout_kills_the_group_and_setsid_descendants(host, tmp_path):
    pids = f"/tmp/eagle-pids-{os.getpid()}-{os.urandom(3).hex()}"
    token = CURRENT.set(StepProcs(tag=f"t-{os.urandom(4).hex()}"))
    try:
        res = await host.run(f"setsid sleep 311 & echo $! > {pids}; sleep 312 & echo $! >> {pids}; "
                             f"echo $$ >> {pids}; sleep 313", timeout=1)
        sp = CURRENT.get()
    finally:
        CURRENT.reset(token)
    assert res.timed_out and res.exit_status is None
    assert sp is not None and sp.state == "stopped" and sp.pgids
    with open(pids) as f:
        remote = [int(x) for x in f.read().split()]
    os.unlink(pids)
    assert len(remote) == 3
    await asyncio.to_thread(wait_for, lambda: not any(pid_alive(p) for p in remote), 10, 0.05, "processes to die")
    assert (await host.run("echo after")).stdout == "after\n"  # the host is still usable


async def test_cancel_kills_the_command(host):
    pidfile = f"/tmp/eagle-pid-{os.getpid()}-{os.urandom(3).hex()}"
    task = asyncio.create_task(host.run(f"echo $$ > {pidfile}; exec sleep 321"))
    await asyncio.to_thread(wait_for, lambda: os.path.exists(pidfile) and open(pidfile).read().strip(), 10)
    pid = int(open(pidfile).read())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    os.unlink(pidfile)
    # the kill goes over a fresh channel after the cancel: on a loaded machine that is seconds, not a hang
    await asyncio.to_thread(wait_for, lambda: not pid_alive(pid), 30, 0.05, "the command to die")
    assert (await host.run("echo next")).stdout == "next\n"


async def test_concurrent_commands_on_one_host(host):
    results = await asyncio.gather(*(host.run(f"sleep 0.0{i % 3}; echo {i}; exit {i % 4}") for i in range(16)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(16)]
    assert [r.exit_status for r in results] == [i % 4 for i in range(16)]


async def test_a_command_reads_the_stdin_it_is_given(host):
    res = await host.run("cat; echo", stdin="from stdin")
    assert res.stdout == "from stdin\n"


async def test_a_command_that_kills_its_own_shell_fails_and_the_host_stays_usable(host):
    res = await host.run("kill -9 $$; echo unreachable")
    assert res.exit_status == 137 or res.signal == "KILL" or res.exit_status == -1
    assert "unreachable" not in res.stdout
    assert (await host.run("echo next")).stdout == "next\n"


async def test_commands_are_read_by_sh_with_their_own_pid(host):
    res = await host.run('echo ${BASH_VERSION:-sh}; echo $$ > /dev/null; ps -o pid= -o pgid= -p $$')
    name, ps = res.stdout.splitlines()
    pid, pgid = ps.split()
    assert name == "sh" and pid == pgid  # $$ is the command's own shell, leader of its group


async def test_a_detached_process_outlives_its_command_and_carries_no_tag(host, tmp_path):
    d = f"/tmp/eagle-detach-{os.getpid()}-{os.urandom(3).hex()}"
    token = CURRENT.set(StepProcs(tag=f"t-{os.urandom(4).hex()}"))
    try:
        for _ in range(5):  # the race with the end-of-command group kill, several times
            pid = await host.spawn_detached(["sleep", "61"], log_path=f"{d}/log", pid_path=f"{d}/pid")
            assert (await host.run("true")).ok
            try:
                assert pid_alive(pid)
                assert b"EAGLE_PROC_TAG" not in open(f"/proc/{pid}/environ", "rb").read()
            finally:
                os.kill(pid, 9)
    finally:
        CURRENT.reset(token)

