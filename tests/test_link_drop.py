"""A dropped link is not a failed launch (issue 41 item 3): server.launch's readiness wait over the
real sshd survives the sshd process serving its connection being killed; where the link cannot come
back the step says the server may still be starting, and the next launch adopts it (SIMULATED SGLang,
real processes)."""
from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from eaglebot.engine.runner import RunRequest
from eaglebot.errors import HostUnreachable
from eaglebot.transport.local import LocalTransport
from support.helpers import wait_for
from test_server_skills import FAST, alive, one_step, open_svc, ssh_host, local_host  # noqa: F401  (fixtures)


def _children(ppid: int) -> list[int]:
    out = []
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            try:
                stat = Path(f"/proc/{e.name}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == ppid:
                out.append(int(e.name))
    return out


def _servers(root: Path) -> list[int]:
    """Live simulated SGLang servers (launch_server leaders) started for this test's models."""
    found = []
    for e in os.scandir("/proc"):
        if not e.name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{e.name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "sglang.launch_server" in cmd and str(root) in cmd and alive(int(e.name)):
            found.append(int(e.name))
    return found


def _launch(h, gate: Path):
    return one_step("server.launch", {"python": h.vars["python"], "model": str(h.target), "port": h.port,
                                      "spec_algorithm": "EAGLE3", "draft": str(h.draft), "ready_timeout_s": 120,
                                      "env": dict(FAST, EAGLE_SIM_WARMUP_UNTIL_FILE=str(gate))})


async def test_killing_the_ssh_session_mid_launch_reconnects_and_the_run_succeeds(services, ssh_host, sshd):
    h = ssh_host
    svc = await open_svc(services, h)
    gate = h.root / "ready-gate"
    pid_file = h.botstate / "run" / f"server-{h.port}.pid"
    run = asyncio.create_task(svc.engine.run(RunRequest(playbook=_launch(h, gate), hosts=["gpu"])))
    await asyncio.to_thread(wait_for, lambda: pid_file.exists() and pid_file.read_text().strip(), 60,
                            what="the server's pid file")
    served = _children(sshd.proc.pid)            # the sshd process of each connection (ours alone now)
    assert served
    for pid in served:
        os.kill(pid, signal.SIGKILL)
    await asyncio.to_thread(wait_for, lambda: not set(served) & set(_children(sshd.proc.pid)), 30,
                            what="the killed sshd processes gone")
    gate.touch()                                 # only now may the server become healthy
    out = await run
    step = out.steps[0]
    assert out.status == "succeeded" and step.status == "changed", step.summary
    row = svc.store.sync.steps(out.run_id)[0]
    data = json.loads(row["data"])
    # no run ends with an unknown server: the one running is the one the step names and the pid file holds
    assert _servers(h.root) == [data["pid"]] == [int(pid_file.read_text())]
    assert set(_children(sshd.proc.pid)).isdisjoint(served)    # it came back on a new connection


async def test_a_link_that_does_not_come_back_says_so_and_the_next_launch_adopts_the_server(
        services, local_host, monkeypatch):
    h = local_host
    h.config["shell"] = "exec"      # the poll is cut where LocalTransport.run is (the skill's logic is under test)
    svc = await open_svc(services, h)
    gate = h.root / "ready-gate"
    real_run = LocalTransport.run

    async def unreachable_once_started(self, cmd, **kw):   # the readiness poll's marker: the link is gone
        if "EAGLE-LOG" in str(cmd):
            raise HostUnreachable("host gpu is unreachable at 127.0.0.1:22 after 4 tries: Connection refused")
        return await real_run(self, cmd, **kw)

    monkeypatch.setattr(LocalTransport, "run", unreachable_once_started)
    out = await svc.engine.run(RunRequest(playbook=_launch(h, gate), hosts=["gpu"]))
    step = out.steps[0]
    data = json.loads(svc.store.sync.steps(out.run_id)[0]["data"])
    pid = data["pid"]
    assert step.status == "failed"
    assert step.summary.startswith(f"lost the connection while waiting; the server (pid {pid}) may still be starting")
    assert alive(pid) and (h.botstate / "run" / f"server-{h.port}.pid").read_text().strip() == str(pid)

    monkeypatch.setattr(LocalTransport, "run", real_run)
    # the next run comes once the server has started all its processes (its HTTP server is up), as a
    # later run would: the end-of-step sweep takes what started since the step began (transport/leftovers.py)
    wait_for(lambda: "Uvicorn running on" in Path(data["log_path"]).read_text(), 60, what="the server's HTTP server")
    gate.touch()
    again = await svc.engine.run(RunRequest(playbook=_launch(h, gate), hosts=["gpu"]))
    step = again.steps[0]
    assert again.status == "succeeded" and step.summary.startswith(
        f"adopted the server the bot started earlier on port {h.port} (pid {pid})"), step.summary
    assert _servers(h.root) == [pid]
