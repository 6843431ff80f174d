"""The shipped `stop` playbook (issue 24): stop the server, free the GPUs, verify, and do not
relaunch; against the SIMULATED SGLang, locally and over a real OpenSSH sshd, and as the
slash form `/eagle stop HOST`."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

from test_server_skills import FAST, Host, alive, local_host, open_svc, ssh_host  # noqa: F401 (fixtures)

from eaglebot.engine.runner import RunRequest
from eaglebot.frontends.chat.caller import Caller
from eaglebot.frontends.chat.router import handle


async def _launch(svc, h: Host) -> int:
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
        "bench_prompts": "0", "env": json.dumps(FAST)}))
    assert out.exit_code == 0, [(s.name, s.status, s.summary) for s in out.steps]
    launch = json.loads(next(r for r in svc.store.sync.steps(out.run_id) if r["skill"] == "server.launch")["data"])
    assert alive(launch["pid"])
    return int(launch["pid"])


def _check_stopped(svc, out, h: Host, pid: int) -> None:
    assert out.exit_code == 0, [(s.name, s.status, s.summary) for s in out.steps]
    assert [(s.skill, s.status) for s in out.steps] == [
        ("server.stop", "changed"), ("gpu.cleanup", "ok"), ("gpu.verify", "ok"), ("audit.note", "ok")]
    assert not alive(pid) and not Path(f"{h.botstate}/run/server-{h.port}.pid").exists()
    assert not any(s["skill"] == "server.launch" for s in svc.store.sync.steps(out.run_id))


async def test_stop_over_ssh_stops_the_server_frees_and_verifies_the_gpus(services, ssh_host):
    h = ssh_host
    svc = await open_svc(services, h)
    pid = await _launch(svc, h)
    out = await svc.engine.run(RunRequest(playbook="stop", hosts=["gpu"]))
    _check_stopped(svc, out, h, pid)
    again = await svc.engine.run(RunRequest(playbook="stop", hosts=["gpu"]))   # nothing left to stop: ok
    assert again.exit_code == 0 and again.steps[0].status == "ok"


async def test_slash_stop_runs_the_stop_playbook_on_the_simulator(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    pid = await _launch(svc, h)
    reply = await handle(svc, "stop gpu", Caller("U1", check_access=False))
    rid = svc.store.sync.last_run_id()
    assert rid is not None and f"#{rid}" in reply.text
    for _ in range(400):   # the reply may come before the run ends
        run = svc.store.sync.get_run(rid)
        if run and run["status"] != "running":
            break
        await asyncio.sleep(0.05)
    assert run is not None and run["playbook"] == "stop" and run["status"] == "succeeded"
    assert not alive(pid)
