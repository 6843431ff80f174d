"""What the end-of-step sweep (src/eaglebot/transport/leftovers.py) takes and what it spares, on the host
`local` and over a real sshd as the non-root test user and as root, in both shell modes: it takes what a
step started however it hid (no tag, its own session, its parent gone); it spares a server
the step started on purpose, the user's other processes (started before the step, or during
it by another login), and orphans of another cgroup (a host that gives each login its own, as
systemd does). On a host with one cgroup for all, an orphan that another login of the same
user makes during the step is taken too: docs/reliability.md says so, and this test shows it."""
from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from support.helpers import pid_alive, pid_folder, wait_for

from eaglebot.config import HostConfig
from eaglebot.transport import LocalTransport, SSHTransport
from eaglebot.transport.base import CURRENT, StepProcs
from eaglebot.transport.leftovers import find_script

HIDE = "env -u EAGLE_PROC_TAG setsid sh -c 'echo $$ > {f}; exec sleep 300' </dev/null >/dev/null 2>&1 &"


@pytest.fixture(params=["local", "ssh", "root-ssh"])
async def host(request, sshd, root_sshd):
    if request.param == "local":
        t = LocalTransport("local")
    else:
        server = sshd if request.param == "ssh" else root_sshd
        t = SSHTransport("box", HostConfig(**server.host_config()))
        t.server = server  # type: ignore[attr-defined]
    t.kind = request.param  # type: ignore[attr-defined]
    yield t
    await t.close()


@pytest.fixture
def folder():
    yield from pid_folder("sweep", pid_files=("*",))   # every file there holds a pid, or nothing


def _pid(path: Path) -> int:
    return int(wait_for(lambda: path.exists() and path.read_text().strip(), 20, what=str(path)))


def _as_user(host, sshd, script: str) -> subprocess.Popen:
    """Another login of the host's user, not the bot's: over its own SSH session, or (local)
    a process of this user that the bot did not start."""
    argv = [*host.server.ssh_argv(), script] if host.kind != "local" else ["/bin/sh", "-c", script]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _kill(*files: Path) -> None:
    for f in files:
        try:
            os.kill(int(f.read_text()), 9)
        except (OSError, ValueError):
            pass


async def _step(host, body):
    sp = StepProcs(tag=f"t-{os.urandom(4).hex()}")
    token = CURRENT.set(sp)
    try:
        await body(sp)
        return sp, await host.leftovers(sp)
    finally:
        CURRENT.reset(token)


async def test_a_hidden_process_is_taken_and_a_server_started_on_purpose_is_spared(host, folder):
    async def body(sp: StepProcs) -> None:
        assert (await host.run(HIDE.format(f=folder / "hidden") + f" while [ ! -s {folder}/hidden ]; do sleep 0.01; done")).ok
        await host.spawn_detached(["sleep", "301"], log_path=f"{folder}/log", pid_path=f"{folder}/server.pid")

    sp, (found, note) = await _step(host, body)
    hidden, server = _pid(folder / "hidden"), _pid(folder / "server.pid")
    try:
        assert found == 1 and "stopped at the end of the step" in note, note
        assert not pid_alive(hidden) and pid_alive(server)
        assert sp.keep == [server] and sp.since is not None
    finally:
        os.kill(server, 9)


async def test_the_users_other_processes_are_spared(host, folder, sshd):
    """Started before the step (a login's sleeper), and during it by another login (its shell
    still its parent): neither descends from the step's commands."""
    before = _as_user(host, sshd, f"sh -c 'echo $$ > {folder}/before; exec sleep 302'")
    _pid(folder / "before")
    during: list[subprocess.Popen] = []

    async def body(sp: StepProcs) -> None:
        assert (await host.run("true")).ok
        during.append(_as_user(host, sshd, f"sh -c 'sleep 303 & echo $! > {folder}/during; wait'"))
        await asyncio.to_thread(_pid, folder / "during")

    try:
        _, (found, note) = await _step(host, body)
        assert (found, note) == (0, "")
        assert pid_alive(_pid(folder / "before")) and pid_alive(_pid(folder / "during"))
    finally:
        for p in [before, *during]:
            p.kill()
        _kill(folder / "before", folder / "during")


async def test_an_orphan_of_another_cgroup_is_spared_and_one_of_the_same_cgroup_is_taken(host, folder, sshd):
    """A host that gives each login a cgroup (systemd's session scopes): another login's orphan
    made during the step is spared. With one cgroup for all, the sweep cannot tell it from the
    step's own orphan, and takes it."""
    mount = next((Path(line.split(" - ")[0].split()[4]) for line in open("/proc/self/mountinfo")
                  if line.partition(" - ")[2].startswith("cgroup2 ")), None)
    assert mount is not None and os.geteuid() == 0, "this test needs root and a cgroup2 mount (CI has both)"
    other = mount / f"eagle-sweep-other-{os.getpid()}-{os.urandom(2).hex()}"
    other.mkdir()
    try:
        async def body(sp: StepProcs) -> None:
            assert (await host.run("true")).ok
            for name, cg in (("same", None), ("other", other)):
                # parked until moved, then it leaves an orphan behind and exits
                p = _as_user(host, sshd, f"sh -c 'echo $$ > {folder}/{name}.parent; while [ ! -e {folder}/{name}.go ]; "
                                   f"do sleep 0.01; done; setsid sh -c \"echo \\$\\$ > {folder}/{name}; "
                                   f"exec sleep 304\" </dev/null >/dev/null 2>&1 &'")
                parent = await asyncio.to_thread(_pid, folder / f"{name}.parent")
                if cg is not None:
                    (cg / "cgroup.procs").write_text(str(parent))
                (folder / f"{name}.go").touch()
                await asyncio.to_thread(_pid, folder / name)
                await asyncio.to_thread(wait_for, lambda: not pid_alive(parent), 20, 0.02, "the parent to exit")
                p.wait(20)

        _, (found, note) = await _step(host, body)
        same, spared = _pid(folder / "same"), _pid(folder / "other")
        try:
            assert not pid_alive(same) and pid_alive(spared)
            assert found == 1, note
        finally:
            _kill(folder / "same", folder / "other")
    finally:
        wait_for(lambda: not (other / "cgroup.procs").read_text().strip(), 20, what="the cgroup to empty")
        other.rmdir()


def test_the_scan_costs_one_awk_over_proc_and_finds_nothing_of_a_quiet_step(tmp_path):
    """The usual case, nothing left: the script prints nothing (the cost is in docs/benchmarks.md)."""
    res = subprocess.run(["/bin/sh", "-c", "eagle_hz=100; " + find_script(None, [2 ** 22 - 1], since=10 ** 9)
                          + "eagle_pids"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and res.stdout == ""


def test_an_announced_start_is_taken_only_within_the_hosts_clock_as_the_connection_read_it(sshd):
    """(transport/ssh.py `_since`) The host read 1000.0 s of uptime while our boot clock went from
    50.0 to 50.1; a command sent at 60.0 started at host time 1009.9 to ~1010.1 (and the answer
    came by now). A start inside that (with the slack) is taken; -1 or one in the future is not:
    the earliest the command can have started is."""
    import time as _time

    t = SSHTransport("box", HostConfig(**sshd.host_config()))
    now = _time.clock_gettime(_time.CLOCK_BOOTTIME)
    t._clock = (now - 10.1, now - 10.0, 1000.0)   # read 10 s ago
    sent = now - 0.05
    assert t._since(1009.97, sent) == 1009.97
    earliest = 1000.0 + sent - (now - 10.0)
    for forged in (-1.0, 0.0, 999999.0, None):
        got = t._since(forged, sent)
        assert got is not None and got <= earliest and earliest - got < 1.0, (forged, got)
