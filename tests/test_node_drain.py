"""node.drain / node.resume on the SIMULATED scontrol, sinfo and kubectl over the real loopback
sshd: the exact commands issued and the state read back; the parsers on the documented formats."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.gpu_helpers import PY, playbook
from support.sshd import chown_to

from eaglebot.engine.runner import RunRequest
from eaglebot.errors import UsageError
from eaglebot.facts.host import cluster as fc
from eaglebot.sim import cluster as sim_cluster
from eaglebot.sim import install_sim_bin

FIXTURES = Path(__file__).parent / "fixtures" / "cluster"


def test_sinfo_lines_parse_with_reasons_partitions_and_not_responding_nodes():
    text = (FIXTURES / "sinfo-N-h-o-NTE.txt").read_text()
    n1 = fc.parse_sinfo(text, "gpu-01")
    assert (n1.state, n1.reason, n1.draining) == ("idle", None, False)
    n3 = fc.parse_sinfo(text, "gpu-03")
    assert n3.draining and n3.reason == "eaglebot: Xid 79 (GPU has fallen off the bus)"
    assert fc.parse_sinfo(text, "gpu-02").draining and fc.parse_sinfo(text, "gpu-06").draining
    n5 = fc.parse_sinfo(text, "gpu-05")
    assert (n5.state, n5.responding, n5.draining) == ("down", False, False)
    assert fc.parse_sinfo(text, "gpu-99") is None


def test_only_pods_that_requested_gpus_are_selected():
    assert fc.gpu_pods((FIXTURES / "kubectl-get-pods-gpu.json").read_text()) == [("ml", "trainer-0")]


def _host(sshd, remote_dir: Path, scheduler: str) -> tuple[dict, Path]:
    state = remote_dir / "cluster"
    sim = install_sim_bin(remote_dir / "bin", state, python=PY)
    sim_cluster.save({"slurm": {"gpu-01": {"base": "mixed", "drain": False, "reason": None,
                                           "partitions": ["gpu", "debug"]}},
                      "k8s": {"nodes": {"gpu-01": {"unschedulable": False}},
                              "pods": [{"namespace": "ml", "name": "trainer-0", "node": "gpu-01", "gpus": 8},
                                       {"namespace": "monitoring", "name": "node-exporter-7xk2p", "node": "gpu-01"}]}},
                     state)
    chown_to(remote_dir)                                   # the SSH test user runs the fakes and writes their state
    return {"gpu-01": sshd.host_config(vars={"scheduler": scheduler, "scontrol": sim["scontrol"],
                                             "sinfo": sim["sinfo"], "kubectl": sim["kubectl"],
                                             "nvidia_smi": sim["nvidia_smi"], "dmesg": sim["dmesg"]})}, state


def _commands(state: Path) -> list[list[str]]:
    return [json.loads(line) for line in (state / sim_cluster.LOG_FILE).read_text().splitlines()]


BOOK = """
name: {name}
steps:
  - skill: {skill}
{with_}
"""


def _book(skill: str, **with_):
    w = f"    with: {json.dumps(with_)}" if with_ else ""
    return playbook(BOOK.format(name=skill.replace(".", "-"), skill=skill, with_=w), skill.replace(".", "-"))


async def test_slurm_drain_issues_the_exact_command_reads_it_back_and_resume_undoes_it(services, sshd, remote_dir):
    hosts, state = _host(sshd, remote_dir, "slurm")
    svc = await services(hosts)
    out = await svc.engine.run(RunRequest(_book("node.drain", reason="Xid 79 on GPU 3"), hosts=["gpu-01"]))
    assert out.status == "succeeded", [(s["status"], s["summary"]) for s in await svc.store.call(lambda s: s.steps(out.run_id))]
    [step] = await svc.store.call(lambda s: s.steps(out.run_id))
    assert step["status"] == "changed" and "gpu-01 draining in Slurm: eaglebot: Xid 79 on GPU 3" in step["summary"]
    assert _commands(state) == [
        ["sinfo", "-N", "-h", "-n", "gpu-01", "-o", "%N %T %E"],
        ["scontrol", "update", "NodeName=gpu-01", "State=DRAIN", "Reason=eaglebot: Xid 79 on GPU 3"],
        ["sinfo", "-N", "-h", "-n", "gpu-01", "-o", "%N %T %E"]]
    again = await svc.engine.run(RunRequest(_book("node.drain"), hosts=["gpu-01"]))
    assert (await svc.store.call(lambda s: s.steps(again.run_id)))[0]["status"] == "ok"        # already draining: nothing done
    assert len(_commands(state)) == 4
    out = await svc.engine.run(RunRequest(_book("node.resume"), hosts=["gpu-01"]))
    [step] = await svc.store.call(lambda s: s.steps(out.run_id))
    assert step["status"] == "changed" and "resumed in Slurm (mixed)" in step["summary"]
    assert _commands(state)[-2] == ["scontrol", "update", "NodeName=gpu-01", "State=RESUME"]
    out = await svc.engine.run(RunRequest(_book("node.resume"), hosts=["gpu-01"]))
    assert (await svc.store.call(lambda s: s.steps(out.run_id)))[0]["status"] == "ok"          # Slurm would refuse: never asked


async def test_kubernetes_drain_cordons_and_stops_only_the_gpu_pods_then_uncordons(services, sshd, remote_dir):
    hosts, state = _host(sshd, remote_dir, "kubernetes")
    svc = await services(hosts)
    out = await svc.engine.run(RunRequest(_book("node.drain", timeout_s=120), hosts=["gpu-01"]))
    [step] = await svc.store.call(lambda s: s.steps(out.run_id))
    assert step["status"] == "changed" and "1 GPU pod stopped: ml/trainer-0" in step["summary"], step["summary"]
    cmds = _commands(state)
    assert ["kubectl", "cordon", "gpu-01"] in cmds
    assert ["kubectl", "delete", "pod", "-n", "ml", "trainer-0", "--timeout=120s"] in cmds
    assert not any(c[:2] == ["kubectl", "delete"] and "node-exporter-7xk2p" in c for c in cmds)
    left = json.loads((state / sim_cluster.STATE_FILE).read_text())
    assert left["k8s"]["nodes"]["gpu-01"]["unschedulable"] is True
    assert [p["name"] for p in left["k8s"]["pods"]] == ["node-exporter-7xk2p"]
    out = await svc.engine.run(RunRequest(_book("node.resume"), hosts=["gpu-01"]))
    [step] = await svc.store.call(lambda s: s.steps(out.run_id))
    assert step["status"] == "changed" and _commands(state)[-2] == ["kubectl", "uncordon", "gpu-01"]


async def test_the_shipped_drain_playbook_asks_for_approval_and_none_is_skipped(services, sshd, remote_dir):
    hosts, state = _host(sshd, remote_dir, "slurm")
    svc = await services(hosts)
    out = await svc.engine.run(RunRequest("drain", hosts=["gpu-01"], inputs={"reason": "Xid 79"}))
    assert out.status == "failed"                          # no terminal, no --yes: denied
    assert not any(c[0] == "scontrol" for c in _commands(state))
    out = await svc.engine.run(RunRequest("drain", hosts=["gpu-01"], inputs={"reason": "Xid 79"}, assume_yes=True))
    assert out.status == "succeeded"
    assert ["scontrol", "update", "NodeName=gpu-01", "State=DRAIN", "Reason=eaglebot: Xid 79"] in _commands(state)
    hosts["gpu-01"]["vars"]["scheduler"] = "none"
    svc2 = await services(hosts)
    out = await svc2.engine.run(RunRequest(_book("node.drain"), hosts=["gpu-01"]))
    assert (await svc2.store.call(lambda s: s.steps(out.run_id)))[0]["status"] == "skipped"


async def test_a_drain_moves_a_quarantined_host_to_draining_and_a_resume_to_resuming(services, sshd, remote_dir):
    hosts, state = _host(sshd, remote_dir, "slurm")
    svc = await services(hosts, health_watch={"hosts": ["all"]})
    await svc.store.call(lambda s: s.health_transition("gpu-01", 3, "quarantined", "Xid 79 (GPU has fallen off the bus)", "health-watch"))
    out = await svc.engine.run(RunRequest("drain", hosts=["gpu-01"], inputs={"reason": "Xid 79"}, assume_yes=True,
                                          actor="UBOSS"))
    assert out.status == "succeeded"
    [row] = await svc.store.call(lambda s: s.health_states("gpu-01"))
    assert (row["gpu"], row["state"], row["actor"]) == (3, "draining", "UBOSS")      # jobs still run: draining
    assert f"node.drain in run #{out.run_id}" in row["reason"]
    assert await svc.store.call(lambda s: s.health_held("gpu-01")) is not None
    out = await svc.engine.run(RunRequest("resume", hosts=["gpu-01"], actor="UBOSS"))
    [row] = await svc.store.call(lambda s: s.health_states("gpu-01"))
    assert row["state"] == "resuming" and await svc.store.call(lambda s: s.health_held("gpu-01")) is None
    events = await svc.store.call(lambda s: s.health_events("gpu-01"))
    assert [e["to_state"] for e in events if e["kind"] == "transition"] == ["resuming", "draining", "quarantined"]


async def test_without_a_watch_a_resume_makes_the_host_healthy_and_a_hand_drain_holds_it(services, sshd, remote_dir):
    hosts, state = _host(sshd, remote_dir, "kubernetes")
    svc = await services(hosts)
    out = await svc.engine.run(RunRequest("drain", hosts=["gpu-01"], assume_yes=True))
    assert out.status == "succeeded"
    held = await svc.store.call(lambda s: s.health_held("gpu-01"))
    assert held is not None and (held["gpu"], held["state"]) == (-1, "drained")
    await svc.engine.run(RunRequest("resume", hosts=["gpu-01"]))
    assert [r["state"] for r in await svc.store.call(lambda s: s.health_states("gpu-01"))] == ["healthy"]


async def test_auto_drain_drains_a_host_the_watch_quarantines(services, sshd, remote_dir):
    from eaglebot.engine.fleet_hook import auto_drain
    from eaglebot.engine.health_watch import HealthWatch
    from eaglebot.sim import gpu_state

    hosts, state = _host(sshd, remote_dir, "slurm")
    svc = await services(hosts, health_watch={"hosts": ["all"], "auto_drain": True})
    runs: list[int | None] = []

    async def notify(report):
        runs.append(await auto_drain(svc.engine, report))
    w = HealthWatch(svc.settings, svc.store, svc.pool, svc.settings.health_watch, notify=notify)
    gpu_state.set_kernel_log(state, gpu_state.KERNEL_LOG + [
        "[ 8123.456789] NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python, GPU has fallen off the bus."])
    gpu_state.set_exit_code(state, 15)
    await w.round()
    assert len(runs) == 1 and runs[0] is not None, await svc.store.call(lambda s: s.events("rejected"))
    run = await svc.store.call(lambda s: s.get_run(runs[0]))
    assert (run["playbook"], run["actor"], run["origin"], run["status"]) == ("drain", "health-watch", "watch",
                                                                             "succeeded")
    drain = [c for c in _commands(state) if c[0] == "scontrol"]
    assert drain and drain[0][:4] == ["scontrol", "update", "NodeName=gpu-01", "State=DRAIN"]
    assert "Xid 79" in drain[0][4]
    assert [r["state"] for r in await svc.store.call(lambda s: s.health_states("gpu-01"))] == ["draining"]


async def test_the_circuit_breaker_refuses_an_approved_drain_too(services, sshd, remote_dir):
    hosts, state = _host(sshd, remote_dir, "slurm")
    hosts = {f"gpu-0{i}": dict(hosts["gpu-01"]) for i in range(1, 6)}     # 5 watched hosts: 25% is 1
    svc = await services(hosts, health_watch={"hosts": ["all"], "max_quarantined_pct": 25})
    await svc.store.call(lambda s: s.health_transition("gpu-05", -1, "drained", "node.drain in run #0", "UBOSS"))
    with pytest.raises(UsageError, match="circuit breaker: 1 host is draining or drained already and at most 1"):
        await svc.engine.run(RunRequest("drain", hosts=["gpu-01"], assume_yes=True))
    assert not (state / sim_cluster.LOG_FILE).exists()                  # refused before any command
    assert "circuit breaker" in (await svc.store.call(lambda s: s.events("rejected")))[0]["reason"]
