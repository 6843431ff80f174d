"""The health watch never undoes a person (issue 33, item 4), over the real loopback sshd with the
SIMULATED Slurm and Kubernetes: a drain the watch made itself (auto_drain) is resumed by it once
the GPUs read clean; a Slurm drain or a cordon a person made before, a drain whose reason a
person changed since, and an `eagle run drain` by a user are never resumed, and the watch says
once that it left them."""
from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

from support.gpu_helpers import PY
from support.sshd import chown_to

from eaglebot.engine.fleet_hook import watch_actions
from eaglebot.engine.health_watch import HealthWatch, HostReport
from eaglebot.engine.runner import RunRequest
from eaglebot.frontends.fleet_text import fleet_xids
from eaglebot.sim import cluster as sim_cluster
from eaglebot.sim import gpu_state, install_sim_bin


def _host(sshd, remote_dir: Path, scheduler: str, *, slurm: dict | None = None, k8s: dict | None = None):
    state = remote_dir / "state"
    sim = install_sim_bin(remote_dir / "bin", state, python=PY)
    gpu_state.init_state(state, 2)
    sim_cluster.save({"slurm": {"gpu-01": {"base": "idle", "drain": False, "reason": None, "partitions": ["gpu"],
                                           **(slurm or {})}},
                      "k8s": {"nodes": {"gpu-01": {"unschedulable": False, **(k8s or {})}}, "pods": []}}, state)
    chown_to(remote_dir)
    return {"gpu-01": sshd.host_config(vars={"scheduler": scheduler, **sim})}, state


def _commands(state: Path) -> list[list[str]]:
    return [json.loads(line) for line in (state / sim_cluster.LOG_FILE).read_text().splitlines()]


def _cluster(state: Path) -> dict:
    return json.loads((state / sim_cluster.STATE_FILE).read_text())


async def _watch(services, hosts: dict, fake=None):
    """A watch that drains what it quarantines and resumes its own drains, as `eagle serve`'s does."""
    extra = {"slack": {"api_url": fake.base_url}} if fake else {}
    svc = await services(hosts, health_watch={"hosts": ["all"], "interval_s": 60, "probe_timeout_s": 10,
                                              "clear_after": 2, "auto_drain": True, "channel": "CHEALTH"}, **extra)
    reports: list[HostReport] = []
    alerts = None
    if fake is not None:
        from eaglebot.frontends.slack.client import make_client
        from eaglebot.frontends.slack.health_alerts import HealthAlerts
        alerts = HealthAlerts(make_client(svc.settings, "xoxb-test", backoff_s=0.01), svc.store, "CHEALTH", 60).notify

    async def notify(r: HostReport) -> None:
        reports.append(r)
        if alerts is not None:
            await alerts(r)
        await watch_actions(svc.engine, r)
    return svc, HealthWatch(svc.settings, svc.store, svc.pool, svc.settings.health_watch, notify=notify), reports


async def _fault_then_clean(svc, w, state: Path, rounds: int = 5) -> None:
    gpu_state.set_health(state, 0, ecc_uncorrected=2)           # the fatal class: quarantined at once
    await w.round()
    gpu_state.set_health(state, 0)
    for _ in range(rounds):
        await w.round()


def _resumes(state: Path) -> list[list[str]]:
    return [c for c in _commands(state) if c[0] == "scontrol" and "State=RESUME" in c] + \
           [c for c in _commands(state) if c[:2] == ["kubectl", "uncordon"]]


async def test_the_watch_resumes_a_drain_it_made_itself_once_clean(services, sshd, remote_dir):
    hosts, state = _host(sshd, remote_dir, "slurm")
    svc, w, reports = await _watch(services, hosts)
    await _fault_then_clean(svc, w, state)
    assert _cluster(state)["slurm"]["gpu-01"]["drain"] is False
    assert len(_resumes(state)) == 1
    runs = [r for r in await svc.store.call(lambda s: s.history(limit=10))]
    assert sorted(r["playbook"] for r in runs) == ["drain", "resume"] and {r["actor"] for r in runs} == {"health-watch"}
    [row] = await svc.store.call(lambda s: s.health_states("gpu-01"))
    assert row["state"] in ("resuming", "healthy") and row["actor"] == "health-watch"


async def test_a_slurm_drain_a_person_made_before_is_left_and_said_once(services, sshd, remote_dir, fake):
    hosts, state = _host(sshd, remote_dir, "slurm", slurm={"drain": True, "reason": "RMA ticket 4471"})
    svc, w, reports = await _watch(services, hosts, fake)
    await _fault_then_clean(svc, w, state, rounds=6)
    assert _cluster(state)["slurm"]["gpu-01"] == {"base": "idle", "drain": True, "reason": "RMA ticket 4471",
                                                  "partitions": ["gpu"]}
    assert _resumes(state) == []
    [row] = await svc.store.call(lambda s: s.health_states("gpu-01"))
    assert (row["state"], row["actor"]) == ("drained", "slurm") and "not the watch's to resume" in row["reason"]
    notes = [e for e in await svc.store.call(lambda s: s.health_events("gpu-01")) if e["kind"] == "note"]
    assert len(notes) == 1 and notes[0]["reason"].startswith("left drained: the GPUs read clean for 2 probes, "
                                                             "but the drain is slurm's, not the watch's")
    said = [c for c in fake.ok_calls_to("chat.postMessage") if "left drained" in c.args["text"]]
    assert len(said) == 1 and said[0].args.get("thread_ts")          # in the incident's thread


async def test_a_drain_a_person_took_over_is_not_resumed(services, sshd, remote_dir):
    hosts, state = _host(sshd, remote_dir, "slurm")
    svc, w, reports = await _watch(services, hosts)
    gpu_state.set_health(state, 0, ecc_uncorrected=2)
    await w.round()                                               # quarantined, drained by the watch
    assert _cluster(state)["slurm"]["gpu-01"]["drain"] is True
    c = _cluster(state)
    c["slurm"]["gpu-01"]["reason"] = "hands off: bad fan (ops)"   # a person re-drains it with a reason of theirs
    sim_cluster.save(c, state)
    gpu_state.set_health(state, 0)
    for _ in range(5):
        await w.round()
    assert _cluster(state)["slurm"]["gpu-01"]["drain"] is True and _resumes(state) == []
    [row] = await svc.store.call(lambda s: s.health_states("gpu-01"))
    assert row["state"] == "drained" and row["actor"] == "slurm" and "left gpu-01 drained in Slurm" in row["reason"]
    resume = [r for r in await svc.store.call(lambda s: s.history(limit=10)) if r["playbook"] == "resume"]
    assert len(resume) == 1                                       # tried once, found it was not its own
    [step] = await svc.store.call(lambda s: s.steps(resume[0]["id"]))
    assert "its drain is not eaglebot's (reason 'hands off: bad fan (ops)')" in step["summary"]


async def test_a_drain_a_user_ran_is_never_resumed_by_the_watch(services, sshd, remote_dir):
    hosts, state = _host(sshd, remote_dir, "slurm")
    svc, w, reports = await _watch(services, hosts)
    out = await svc.engine.run(RunRequest("drain", hosts=["gpu-01"], inputs={"reason": "maintenance"},
                                          assume_yes=True, actor="UBOSS"))
    assert out.status == "succeeded"
    for _ in range(5):
        await w.round()
    assert _cluster(state)["slurm"]["gpu-01"]["drain"] is True and _resumes(state) == []
    [row] = await svc.store.call(lambda s: s.health_states("gpu-01"))
    assert (row["gpu"], row["state"], row["actor"]) == (-1, "drained", "UBOSS")
    assert [n for r in reports for n in r.notes] == [(-1, "left drained: the GPUs read clean for 2 probes, but the "
                                                          "drain is UBOSS's, not the watch's; `eagle run resume -H "
                                                          "gpu-01` puts it back")]


async def test_a_cordon_a_person_made_is_left(services, sshd, remote_dir):
    hosts, state = _host(sshd, remote_dir, "kubernetes", k8s={"unschedulable": True})
    svc, w, reports = await _watch(services, hosts)
    await _fault_then_clean(svc, w, state)
    assert _cluster(state)["k8s"]["nodes"]["gpu-01"]["unschedulable"] is True and _resumes(state) == []
    assert [r["actor"] for r in await svc.store.call(lambda s: s.health_states("gpu-01"))] == ["kubernetes"]


async def test_a_cordon_the_watch_made_is_annotated_and_uncordoned_once_clean(services, sshd, remote_dir):
    hosts, state = _host(sshd, remote_dir, "kubernetes")
    svc, w, reports = await _watch(services, hosts)
    gpu_state.set_health(state, 0, ecc_uncorrected=2)
    await w.round()
    assert _cluster(state)["k8s"]["nodes"]["gpu-01"] == {
        "unschedulable": True, "annotations": {"eaglebot.io/drain-reason": "eaglebot: 2 uncorrected ECC errors"}}
    gpu_state.set_health(state, 0)
    for _ in range(3):
        await w.round()
    assert _cluster(state)["k8s"]["nodes"]["gpu-01"] == {"unschedulable": False, "annotations": {}}
    assert len(_resumes(state)) == 1


def _xid79(ts: float) -> str:
    return f"[{ts:12.6f}] NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python, GPU has fallen off the bus."


async def test_an_xid_79_every_probe_keeps_the_host_quarantined_and_drained(services, sshd, remote_dir):
    """Issue 46 item 7: a probe that reads a new fatal Xid for a GPU is never a clean one, so a GPU
    that keeps failing through three clear windows is neither cleared nor resumed; once the lines
    stop, `clear_after` clean probes resume the watch's drain. Each Xid keeps the kernel's time."""
    hosts, state = _host(sshd, remote_dir, "slurm")
    svc, w, reports = await _watch(services, hosts)
    t0 = time.time()
    base = gpu_state.uptime_s() - 600                    # stamped ten minutes ago by the kernel
    lines = list(gpu_state.KERNEL_LOG)
    for i in range(6):                                   # clear_after is 2: three windows' worth
        lines.append(_xid79(base + i))
        gpu_state.set_kernel_log(state, lines)
        await w.round()
        held = await svc.store.call(lambda s: s.health_held("gpu-01"))
        assert held is not None and held["state"] in ("quarantined", "drained"), held
    assert _cluster(state)["slurm"]["gpu-01"]["drain"] is True and _resumes(state) == []
    events = await svc.store.call(lambda s: s.health_events("gpu-01"))
    assert not [e for e in events if e["kind"] == "transition" and e["to_state"] in ("healthy", "resuming")]
    xids = fleet_xids(events)
    assert [x["code"] for x in xids] == [79] * 6
    assert all(datetime.fromisoformat(x["at"].replace("Z", "+00:00")).timestamp() < t0 - 500 for x in xids)
    for _ in range(2):                                   # the lines stop: two clean probes resume the drain
        await w.round()
    assert _cluster(state)["slurm"]["gpu-01"]["drain"] is False and len(_resumes(state)) == 1
