"""Drain behind the router (issue 41 item 4): the REAL sglang-router in front of two SIMULATED SGLang
servers on two hosts over the real sshd, a client keeping 8 requests in flight through it the whole
time. A rolling relaunch of both takes each out of the router, relaunches it and puts it back, one
at a time: no client request fails. A relaunch whose launch crashes leaves its worker out and says
so; the last healthy worker is never taken out; relaunched again, the worker left out is put back."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from eaglebot.engine.playbook import parse_playbook
from eaglebot.engine.runner import RunRequest
from eaglebot.frontends.services import Services
from support.router_load import Load, start_router
from support.sshd import chown_to, start_sshd
from test_server_skills import FAST, PY, Host, alive

# requests that take ~0.1 s (a simulated second is 0.05 s here): the drain has requests to wait for
SLOW = dict(FAST, EAGLE_SIM_TIME_SCALE="0.05")
USER2 = "eagletest2"
# the servers the relaunches replace: started by the bot (its pid files), as a relaunch would
LAUNCH = parse_playbook(json.dumps({"name": "launch", "steps": [{"skill": "server.launch", "with": {
    "python": "{{ python }}", "model": "{{ model }}", "draft": "{{ draft }}", "port": "{{ port }}",
    "spec_algorithm": "EAGLE3", "env": SLOW}}]}), "launch.yaml")
QUICK = {"bench_prompts": "0", "env": json.dumps(SLOW), "drain_timeout_s": "60"}


@pytest.fixture(scope="module")
def sshd2():
    """A second machine: its own sshd and SSH user (a step's sweep of leftovers takes the orphans
    of its own user only: two hosts on one machine must not share a user, tests/support/sshd.py)."""
    s = start_sshd(Path("/tmp") / f"eagle-sshd2-{os.getpid()}", user=USER2)
    yield s
    s.stop()
    shutil.rmtree(s.root, ignore_errors=True)


@pytest.fixture
async def fleet(sshd, sshd2, remote_dir, make_settings, tmp_path):
    """Hosts a and b (one SIMULATED GPU each, own ports), both launched by the bot, behind the router;
    the bot's services with host var `router` set on both."""
    dir_b = Path("/tmp") / f"eagle-remote-b-{os.getpid()}-{os.urandom(4).hex()}"
    dir_b.mkdir()
    hosts = {"a": Host(remote_dir, remote_dir / "bin", PY, ssh=sshd.host_config()),
             "b": Host(dir_b, dir_b / "bin", PY, ssh=sshd2.host_config())}
    chown_to(remote_dir)
    chown_to(dir_b, USER2)
    state = f"~/eagle-state-{os.urandom(4).hex()}"
    for h, ssh in zip(hosts.values(), (sshd, sshd2)):
        h.botstate = ssh.home / state[2:]
    router = svc = None
    try:
        first = await Services.open(make_settings({n: h.config for n, h in hosts.items()}, state_dir=state))
        try:
            out = await first.engine.run(RunRequest(playbook=LAUNCH, hosts=["a", "b"]))
        finally:
            await first.close()
        assert out.status == "succeeded", [s.summary for s in out.steps if s.status == "failed"]
        router = start_router([f"http://127.0.0.1:{h.port}" for h in hosts.values()], tmp_path / "router.log")
        for h in hosts.values():
            h.config["vars"]["router"] = router.url
        svc = await Services.open(make_settings({n: h.config for n, h in hosts.items()}, state_dir=state))
        yield svc, hosts, router
    finally:
        if svc is not None:
            await svc.close()
        if router is not None:
            router.stop()
        for h in hosts.values():
            h.stop()
            shutil.rmtree(h.botstate, ignore_errors=True)
        shutil.rmtree(dir_b, ignore_errors=True)


def _steps(out, host):
    return {s.name: s for s in out.steps if s.host == host}


async def test_a_rolling_relaunch_behind_the_router_drops_no_request(fleet):
    svc, hosts, router = fleet
    load = Load(router.port).start()
    try:
        out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["a", "b"], inputs=QUICK))
    finally:
        load.stop()
    assert out.status == "succeeded", [s.summary for s in out.steps if s.status == "failed"]
    assert load.failed == [] and load.ok > 50
    a, b = _steps(out, "a"), _steps(out, "b")
    for steps in (a, b):
        assert steps["take the worker out of the router"].summary.startswith("took http://127.0.0.1:")
        assert steps["put the worker back in the router"].summary.startswith("put http://127.0.0.1:")
    assert router.healthy() == sorted(f"http://127.0.0.1:{h.port}" for h in hosts.values())


@pytest.mark.e2e
async def test_a_failed_relaunch_stays_out_and_the_last_healthy_worker_is_never_taken_out(fleet):
    svc, hosts, router = fleet
    a, b = (f"http://127.0.0.1:{h.port}" for h in hosts.values())
    load = Load(router.port).start()
    try:
        crash = dict(QUICK, env=json.dumps(dict(SLOW, EAGLE_SIM_FAIL="1")))
        out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["a"], inputs=crash))
        assert out.status == "failed"
        back = _steps(out, "a")["put the worker back in the router"]
        assert back.status == "failed" and back.summary.startswith(f"left {a} out of router {router.url}: the "
                                                                   f"relaunch's launch failed")
        assert router.healthy() == [b]
        pid_b = int((hosts["b"].botstate / "run" / f"server-{hosts['b'].port}.pid").read_text())
        out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["b"], inputs=dict(QUICK, peer_timeout_s="1")))
        steps = _steps(out, "b")
        assert out.status == "failed" and steps["take the worker out of the router"].summary.startswith(
            f"router {router.url} has no other healthy worker: taking {b} out would leave it none")
        assert steps["stop old server"].status == "skipped"
        assert steps["put the worker back in the router"].status == "skipped"      # it never left
        assert router.healthy() == [b] and alive(pid_b)
        # fixed: a relaunch of the worker left out puts it back
        out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["a"], inputs=QUICK))
    finally:
        load.stop()
    assert out.status == "succeeded" and _steps(out, "a")["take the worker out of the router"].summary.startswith(
        f"{a} is not in router {router.url}")
    assert router.healthy() == sorted([a, b])
    assert load.failed == [] and load.ok > 20
