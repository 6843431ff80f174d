"""On a real GPU machine: real PyTorch holders, gpu.cleanup + gpu.verify locally and over SSH.

Run with `pytest -m gpu tests/gpu` as root on a host with nvidia-smi and PyTorch. Only
processes carrying this test's tag in their command line are killed (`match`).
"""
from __future__ import annotations

import json
import sys

import pytest

from real_gpu import TAG, gpu_count, memory_used
from eaglebot.engine.playbook import parse_playbook
from eaglebot.engine.runner import RunRequest

pytestmark = pytest.mark.gpu

TOLERANCE_MIB = 64

PLAYBOOK = f"""
name: gpu-clean
steps:
  - skill: gpu.processes
    with: {{gpus: "{{{{ gpus }}}}"}}
  - skill: gpu.cleanup
    confirm: true
    with: {{gpus: "{{{{ gpus }}}}", grace_s: 3, match: "{TAG}"}}
  - skill: gpu.verify
    with: {{gpus: "{{{{ gpus }}}}", max_used_mib: {TOLERANCE_MIB}, timeout_s: 60, cuda_smoke: true}}
"""


def _gpus() -> list[int]:
    n = gpu_count()
    assert n >= 1, "no GPU visible to nvidia-smi"
    return [0, 1] if n >= 2 else [0]


async def _run_and_check(services, host_cfg: dict, holders) -> None:
    gpus = _gpus()
    plain = holders.start([gpus[0]], 2048)
    stubborn = holders.start([gpus[-1]], 1024, ignore_term=True)
    both = holders.start(gpus, 512)
    expected = {plain, stubborn, both}
    host_cfg = {**host_cfg, "vars": {"python": sys.executable, "gpus": ",".join(map(str, gpus))}}
    svc = await services({"gpu": host_cfg})
    pb = parse_playbook(PLAYBOOK, "gpu-clean.yaml")
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"], assume_yes=True))
    assert out.status == "succeeded", [(s.name, s.status, s.summary) for s in out.steps]
    rows = svc.store.sync.steps(out.run_id)
    listed = json.loads(rows[0]["data"])
    assert expected <= set(listed["pids"])
    mib = {p["pid"]: p["mib"] for p in listed["processes"]}
    assert mib[plain] >= 2048 and mib[both] >= 512 * len(gpus)
    cleanup = json.loads(rows[1]["data"])
    assert set(cleanup["killed"]) == expected and cleanup["survivors"] == []
    signals = {p["pid"]: p["signals"] for p in cleanup["processes"]}
    assert signals[stubborn] == ["SIGTERM", "SIGKILL"]
    assert signals[plain] == ["SIGTERM"]
    approvals = list(svc.store.sync.db.query("select * from approvals where run_id = $1", [out.run_id]))
    assert [a["status"] for a in approvals] == ["approved"]
    verify = json.loads(rows[2]["data"])
    assert all(v <= TOLERANCE_MIB for v in verify["memory"].values())
    assert len(verify["smoke"]) == len(gpus) and all(" ok " in ln for ln in verify["smoke"])
    assert [m["name"] for m in svc.store.sync.metrics(out.run_id)] == ["gpu_free_s"]
    now = memory_used()
    assert all(now[g] <= TOLERANCE_MIB for g in gpus), now
    for h in holders.procs:
        assert h.wait(10) is not None


async def test_cleanup_and_verify_on_real_gpus_over_local_transport(services, holders):
    await _run_and_check(services, {"transport": "local"}, holders)


async def test_cleanup_and_verify_on_real_gpus_over_ssh(services, holders, asyncssh_server):
    await _run_and_check(services, asyncssh_server.host_config(), holders)


async def test_real_nvidia_smi_output_parses(services):
    svc = await services({"gpu": {"transport": "local"}})
    pb = parse_playbook('{"name": "p", "steps": [{"skill": "gpu.processes"}]}', "p.yaml")
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"]))
    assert out.steps[0].status == "ok", out.steps[0].summary
    data = json.loads(svc.store.sync.steps(out.run_id)[0]["data"])
    assert sorted(int(k) for k in data["memory"]) == list(range(gpu_count()))


async def test_cuda_smoke_alone_passes(services):
    svc = await services({"gpu": {"transport": "local", "vars": {"python": sys.executable}}})
    pb = parse_playbook('{"name": "s", "steps": [{"skill": "gpu.verify", '
                        '"with": {"cuda_smoke": true, "max_used_mib": 1000000}}]}', "s.yaml")
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"]))
    assert out.steps[0].status == "ok", out.steps[0].summary
    assert "CUDA smoke test passed" in out.steps[0].summary
