"""node.drain, node.resume, the shipped drain/resume playbooks and the health watch's auto-drain
against a REAL one-node Slurm 22.05 cluster (tests/support/slurm.py), over the real loopback sshd: the
host's `scontrol` and `sinfo` are Slurm's own binaries (through shims that set SLURM_CONF), and
every state is read back from the real `sinfo` and `scontrol show node`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.gpu_helpers import PY, playbook
from support.helpers import eagle
from support.slurm import NODE, SINFO_FORMAT
from support.sshd import chown_to

from eaglebot.engine.fleet_hook import watch_actions
from eaglebot.engine.health_watch import HealthWatch, HostReport
from eaglebot.engine.runner import RunRequest
from eaglebot.sim import gpu_state, install_sim_bin


def _host(sshd, slurm, remote_dir: Path, *, gpus: bool = False) -> tuple[dict, Path]:
    """gpu-01 over the loopback sshd, in the real Slurm; with `gpus`, SIMULATED GPUs (nvidia-smi,
    dmesg) for the watch, Slurm still the real one."""
    state = remote_dir / "gpu"
    tools = {}
    if gpus:
        tools = install_sim_bin(remote_dir / "sim-bin", state, python=PY)
        gpu_state.init_state(state, 2)
    tools.update(slurm.shims(remote_dir / "slurm-bin"))
    chown_to(remote_dir)
    return {NODE: sshd.host_config(vars={"scheduler": "slurm", **tools})}, state


def _book(skill: str, **with_):
    w = f"\n    with: {json.dumps(with_)}" if with_ else ""
    name = skill.replace(".", "-")
    return playbook(f"name: {name}\nsteps:\n  - skill: {skill}{w}\n", name)


def _lines(slurm) -> list[str]:
    return slurm.sinfo().splitlines()


def _show_reason(slurm) -> str:
    """Reason=... of the real `scontrol show node`: the reason, then [user@time] Slurm adds."""
    for line in slurm.check("scontrol", "show", "node", NODE).splitlines():
        if line.strip().startswith("Reason="):
            return line.strip()[len("Reason="):]
    return ""


async def _one(svc, book, **kw) -> dict:
    out = await svc.engine.run(RunRequest(book, hosts=[NODE], **kw))
    [step] = await svc.store.call(lambda s: s.steps(out.run_id))
    return step


async def test_drain_drains_the_real_node_with_its_reason_and_resume_undoes_it(services, sshd, slurm, remote_dir):
    hosts, _ = _host(sshd, slurm, remote_dir)
    svc = await services(hosts)
    step = await _one(svc, _book("node.drain", reason="Xid 79 on GPU 3"))
    assert step["status"] == "changed", step["summary"]
    assert step["summary"] == f"{NODE} drained in Slurm: eaglebot: Xid 79 on GPU 3"
    assert _lines(slurm) == [f"{NODE} drained eaglebot: Xid 79 on GPU 3"] * 2           # both partitions
    assert _show_reason(slurm).startswith("eaglebot: Xid 79 on GPU 3 [eagletest@")       # the SSH user drained it
    again = await _one(svc, _book("node.drain", reason="something else"))
    assert again["status"] == "ok" and "already drained" in again["summary"]             # nothing done
    assert _lines(slurm) == [f"{NODE} drained eaglebot: Xid 79 on GPU 3"] * 2
    step = await _one(svc, _book("node.resume"))
    assert step["status"] == "changed" and step["summary"] == f"{NODE} resumed in Slurm (idle)", step["summary"]
    slurm.wait(lambda: slurm.state() == "idle", "the node to answer again")
    assert _lines(slurm) == [f"{NODE} idle none"] * 2


async def test_a_node_running_a_job_is_draining_until_the_job_ends(services, sshd, slurm, remote_dir):
    hosts, _ = _host(sshd, slurm, remote_dir)
    svc = await services(hosts)
    slurm.start_job(cpus=1)
    step = await _one(svc, _book("node.drain", reason="ECC"))
    assert step["status"] == "changed" and step["summary"] == f"{NODE} draining in Slurm: eaglebot: ECC"
    assert _lines(slurm) == [f"{NODE} draining eaglebot: ECC"] * 2 and len(slurm.jobs()) == 1   # the job runs on
    slurm.end_jobs()
    assert _lines(slurm) == [f"{NODE} drained eaglebot: ECC"] * 2
    step = await _one(svc, _book("node.drain", reason="ECC"))
    assert step["status"] == "ok" and f"{NODE} is already drained in Slurm (eaglebot: ECC)" == step["summary"]


async def test_a_resume_of_a_node_not_drained_asks_slurm_nothing_slurm_would_refuse_it(services, sshd, slurm,
                                                                                       remote_dir):
    hosts, _ = _host(sshd, slurm, remote_dir)
    svc = await services(hosts)
    step = await _one(svc, _book("node.resume"))
    assert step["status"] == "ok" and step["summary"] == f"{NODE} is idle in Slurm, not drained; nothing to resume"
    refused = slurm.run("scontrol", "update", f"NodeName={NODE}", "State=RESUME")     # what it would have said
    assert (refused.returncode, refused.stderr.strip()) == (1, "slurm_update error: Invalid node state specified")
    assert _lines(slurm) == [f"{NODE} idle none"] * 2


async def test_a_node_slurm_does_not_know_fails_the_step_in_one_sentence(services, sshd, slurm, remote_dir):
    hosts, _ = _host(sshd, slurm, remote_dir)
    hosts[NODE]["vars"]["node_name"] = "gpu-99"
    svc = await services(hosts)
    out = await svc.engine.run(RunRequest(_book("node.drain"), hosts=[NODE]))
    [step] = await svc.store.call(lambda s: s.steps(out.run_id))
    assert out.status == "failed" and step["status"] == "failed"
    assert "Slurm does not know the node 'gpu-99' (sinfo -n gpu-99 lists nothing); set the host var node_name" \
        in step["summary"], step["summary"]


async def test_a_drain_a_person_made_is_never_resumed_by_the_bot(services, sshd, slurm, remote_dir):
    hosts, _ = _host(sshd, slurm, remote_dir)
    svc = await services(hosts)
    slurm.check("scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=RMA ticket 4471")
    step = await _one(svc, _book("node.resume", only_if_reason="eaglebot: Xid 79 (GPU has fallen off the bus)"))
    assert step["status"] == "ok" and "its drain is not eaglebot's (reason 'RMA ticket 4471')" in step["summary"]
    assert _lines(slurm) == [f"{NODE} drained RMA ticket 4471"] * 2
    assert _show_reason(slurm).startswith("RMA ticket 4471 [root@")
    drain = await _one(svc, _book("node.drain", reason="Xid 79 (GPU has fallen off the bus)"))
    assert drain["status"] == "ok" and "already drained" in drain["summary"]   # the person's drain: not taken over
    assert _lines(slurm) == [f"{NODE} drained RMA ticket 4471"] * 2


def _cli_config(remote_dir: Path, hosts: dict) -> Path:
    d = remote_dir / "cli"
    d.mkdir()
    cfg = d / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"hosts": hosts}, sort_keys=False))
    return cfg


def _cli(cfg: Path, *argv: str) -> tuple[int, dict]:
    res = eagle("run", *argv, "-H", NODE, "--json", config=cfg, cwd=cfg.parent, timeout=300)
    try:
        return res.returncode, json.loads(res.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"eagle run {' '.join(argv)}: stdout is not JSON\n{res.stdout}\n{res.stderr}")


@pytest.mark.e2e  # the shipped playbooks through the CLI on real Slurm
def test_the_shipped_drain_and_resume_playbooks_through_the_real_cli(sshd, slurm, remote_dir):
    hosts, _ = _host(sshd, slurm, remote_dir)
    cfg = _cli_config(remote_dir, hosts)
    rc, doc = _cli(cfg, "drain", "-e", "reason=maintenance")            # no terminal, no --yes: not approved
    assert rc != 0 and [(s["skill"], s["status"]) for s in doc["steps"]] == [("node.drain", "failed")], doc
    assert "not approved" in doc["steps"][0]["summary"]
    assert _lines(slurm) == [f"{NODE} idle none"] * 2                   # Slurm was never asked
    rc, doc = _cli(cfg, "drain", "--yes", "-e", "reason=maintenance")
    assert rc == 0 and [(s["skill"], s["status"]) for s in doc["steps"]] == [("node.drain", "changed")], doc
    assert _lines(slurm) == [f"{NODE} drained eaglebot: maintenance"] * 2
    rc, doc = _cli(cfg, "resume", "-e", "only_if_reason=eaglebot: something else")
    assert rc == 0 and doc["steps"][0]["status"] == "ok" and "not eaglebot's" in doc["steps"][0]["summary"], doc
    assert _lines(slurm) == [f"{NODE} drained eaglebot: maintenance"] * 2
    rc, doc = _cli(cfg, "resume")
    assert rc == 0 and [(s["skill"], s["status"]) for s in doc["steps"]] == [("node.resume", "changed")], doc
    slurm.wait(lambda: slurm.state() == "idle", "the node to answer again")
    assert _lines(slurm) == [f"{NODE} idle none"] * 2


async def _watch(services, hosts: dict):
    """A watch that drains what it quarantines and resumes its own drains, as `eagle serve`'s does."""
    svc = await services(hosts, health_watch={"hosts": ["all"], "interval_s": 60, "probe_timeout_s": 10,
                                              "clear_after": 2, "auto_drain": True})
    reports: list[HostReport] = []

    async def notify(r: HostReport) -> None:
        reports.append(r)
        await watch_actions(svc.engine, r)
    return svc, HealthWatch(svc.settings, svc.store, svc.pool, svc.settings.health_watch, notify=notify), reports


async def test_the_watch_drains_the_real_node_on_a_fatal_fault_and_resumes_its_own_drain(services, sshd, slurm,
                                                                                         remote_dir):
    hosts, state = _host(sshd, slurm, remote_dir, gpus=True)
    svc, w, _ = await _watch(services, hosts)
    gpu_state.set_health(state, 0, ecc_uncorrected=2)               # the fatal class: quarantined and drained at once
    await w.round()
    assert _lines(slurm) == [f"{NODE} drained eaglebot: 2 uncorrected ECC errors"] * 2
    gpu_state.set_health(state, 0)
    for _ in range(5):
        await w.round()
    slurm.wait(lambda: slurm.state() == "idle", "the node to answer again")
    assert _lines(slurm) == [f"{NODE} idle none"] * 2
    runs = await svc.store.call(lambda s: s.history(limit=10))
    assert sorted(r["playbook"] for r in runs) == ["drain", "resume"] and {r["actor"] for r in runs} == {"health-watch"}


async def test_the_watch_never_resumes_a_drain_a_person_made_in_slurm(services, sshd, slurm, remote_dir):
    hosts, state = _host(sshd, slurm, remote_dir, gpus=True)
    slurm.check("scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=RMA ticket 4471")
    svc, w, reports = await _watch(services, hosts)
    gpu_state.set_health(state, 0, ecc_uncorrected=2)
    await w.round()
    gpu_state.set_health(state, 0)
    for _ in range(6):
        await w.round()
    assert _lines(slurm) == [f"{NODE} drained RMA ticket 4471"] * 2
    assert _show_reason(slurm).startswith("RMA ticket 4471 [root@")
    [row] = await svc.store.call(lambda s: s.health_states(NODE))
    assert (row["state"], row["actor"]) == ("drained", "slurm") and "not the watch's to resume" in row["reason"]
    assert [r["playbook"] for r in await svc.store.call(lambda s: s.history(limit=10)) if r["playbook"] == "resume"] == []
