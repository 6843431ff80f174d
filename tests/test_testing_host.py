"""`eaglebot.testing.Host`, the double plugin authors test their skills with, keeps the real
transport's protocol: each case runs on the local transport for real and on the double
scripted with what the real command printed, and the results must be the same."""
from __future__ import annotations

import os
import re

import pytest

from eaglebot import testing
from eaglebot.errors import TransportError
from eaglebot.sdk import CommandResult, StreamCallback
from eaglebot.skills import shell
from eaglebot.transport.local import LocalTransport

CASES = [   # (command, its reply on the double, timeout)
    ("echo a; echo b >&2; printf c", testing.Reply(stdout="a\nc", stderr="b\n"), 30),
    ("exit 3", testing.Reply(exit_status=3), 30),
    ("echo partial; kill -TERM $$", testing.Reply(stdout="partial\n", signal="SIGTERM"), 30),
    ("kill -KILL $$", testing.Reply(signal="SIGKILL"), 30),
    ("echo started; exec sleep 60", testing.Reply(stdout="started\n", hang=True), 0.5),
    ("printf 'x%.0s' $(seq 1 300000)", testing.Reply(stdout="x" * 300000), 30),   # over the kept head + tail
]


def same_face(res: CommandResult) -> tuple:
    return res.exit_status, res.stdout, res.stderr, res.timed_out, res.signal, res.ok, res.cut_bytes


@pytest.mark.parametrize("cmd,reply,timeout", CASES, ids=[c[0][:30] for c in CASES])
async def test_the_double_answers_a_command_as_the_local_transport_does(cmd, reply, timeout):
    lines_real: list[tuple[str, str]] = []
    lines_fake: list[tuple[str, str]] = []
    real = await LocalTransport().run(cmd, timeout=timeout, on_output=lambda s, l: lines_real.append((s, l)))
    host = testing.Host("local").on(cmd, reply)
    fake = await host.run(cmd, timeout=timeout, on_output=lambda s, l: lines_fake.append((s, l)))
    assert same_face(fake) == same_face(real)
    # the order between the two streams is the host's; within each it is the same
    for stream in ("stdout", "stderr"):
        assert [x for x in lines_fake if x[0] == stream] == [x for x in lines_real if x[0] == stream]
    assert host.commands == [cmd]


async def test_stream_callbacks_get_the_same_pieces():
    cmd = "printf 'a\\nb'"
    real: list[str] = []
    fake: list[str] = []
    await LocalTransport().run(cmd, timeout=30, on_output=StreamCallback(lambda _s, p: real.append(p)))
    await testing.Host().on(cmd, stdout="a\nb").run(cmd, timeout=30, on_output=StreamCallback(lambda _s, p: fake.append(p)))
    assert fake == real == ["a\n", "b"]


async def test_files_read_write_and_missing_as_on_the_local_host(tmp_path):
    local, host = LocalTransport(), testing.Host()
    path = str(tmp_path / "config.json")
    for h in (local, host):
        await h.write_file(path, b'{"a": 1}\n', mode=0o600)
        assert await h.read_file(path) == b'{"a": 1}\n'
    assert os.stat(path).st_mode & 0o777 == 0o600 and host.modes[path] == 0o600
    errors = []
    for h in (local, host):
        with pytest.raises(FileNotFoundError) as e:
            await h.read_file(str(tmp_path / "missing"))
        errors.append(e.value.errno)
    assert errors[0] == errors[1]


async def test_spawn_writes_the_pid_file_as_the_detach_script_does(tmp_path):
    local, host = LocalTransport(), testing.Host()
    pids = []
    for h in (local, host):
        pid_path, log_path = str(tmp_path / f"{id(h)}.pid"), str(tmp_path / f"{id(h)}.log")
        pid = await h.spawn_detached(["sleep", "30"], log_path=log_path, pid_path=pid_path)
        pids.append(pid)
        assert (await h.read_file(pid_path)).decode().strip() == str(pid)
        assert await h.read_file(log_path) == b""
    os.kill(pids[0], 9)   # the real one: the bot started it, the test stops it
    assert host.spawned[0].argv == ["sleep", "30"]


async def test_a_bad_environment_name_is_refused_by_both():
    for h in (LocalTransport(), testing.Host().on("true", stdout="")):
        with pytest.raises(TransportError):
            await h.run("true", env={"BAD-NAME": "x"}, timeout=30)


async def test_an_unscripted_command_or_a_hang_without_timeout_fails_the_test_naming_it():
    host = testing.Host("gpu-01").on(re.compile(r"^nvidia-smi"), stdout="ok\n").on("sleep 99", hang=True)
    with pytest.raises(testing.Unscripted, match="unscripted command 'rm -rf /tmp/x'"):
        await host.run("rm -rf /tmp/x", timeout=5)
    with pytest.raises(testing.Unscripted, match="without a timeout"):
        await host.run("sleep 99")
    assert (await host.run("nvidia-smi -L", timeout=5)).stdout == "ok\n"


async def test_successive_replies_and_the_last_one_repeats():
    host = testing.Host().on("probe", testing.Reply(exit_status=1), testing.Reply(stdout="up\n"))
    got = [(await host.run("probe", timeout=5)).exit_status for _ in range(3)]
    assert got == [1, 0, 0]


async def test_run_skill_runs_a_shipped_skill_as_the_engine_does():
    host = testing.Host().on("false", exit_status=1)
    res = await testing.run_skill(shell, host, {"command": "false"})
    real = await testing.run_skill(shell, LocalTransport(), {"command": "false"})
    assert res.status == real.status == "failed"
    assert res.data["rc"] == real.data["rc"] == 1
