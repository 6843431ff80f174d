"""On a real GPU machine: `relaunch` starts the SIMULATED SGLang server, which holds REAL
GPU memory (PyTorch, sized by --mem-fraction-static); `cleanup` then kills it without asking
(the bot started it) and `verify` sees the memory back under the tolerance.

Run with `pytest -m gpu tests/gpu` as root on a host with nvidia-smi and PyTorch.
"""
from __future__ import annotations

import json
import socket

import pytest

from real_gpu import memory_used
from eaglebot.frontends.cli.demo import _write_models
from eaglebot.engine.runner import RunRequest
from eaglebot.sim import install_sim_bin

pytestmark = pytest.mark.gpu


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_relaunch_holds_real_gpu_memory_and_cleanup_frees_it(services, tmp_path, server_state):
    before = memory_used()[0]
    host_vars = install_sim_bin(tmp_path / "bin", tmp_path / "sim-state")
    target, draft = _write_models(tmp_path)
    port = _port()
    # Real nvidia-smi (no nvidia_smi host var); the simulated SGLang allocates real memory.
    svc = await services({"gpu": {"transport": "local", "vars": {
        "python": host_vars["python"], "model": str(target), "draft": str(draft), "port": port}}},
        state_dir=str(server_state))
    out = await svc.engine.run(RunRequest(
        playbook="relaunch", hosts=["gpu"],
        inputs={"gpus": "0", "mem_fraction": "0.05", "bench_prompts": "8", "bench_output_len": "32",
                "ready_timeout_s": "300"}))
    assert out.status == "succeeded", [(s.name, s.status, s.summary) for s in out.steps]
    # By name: the playbook checks the launch first (a server.launch step with check_only).
    (launch_row,) = [r for r in svc.store.sync.steps(out.run_id) if r["name"] == "launch SGLang"]
    launched = json.loads(launch_row["data"] or "{}")
    held = memory_used()[0]
    assert held - before >= 1000, f"the simulated server should hold real memory: {before} -> {held} MiB"

    clean = await svc.engine.run(RunRequest(playbook="cleanup", hosts=["gpu"], inputs={"gpus": "0"}))
    assert clean.status == "succeeded", [(s.name, s.status, s.summary) for s in clean.steps]
    rows = svc.store.sync.steps(clean.run_id)
    data = json.loads(rows[0]["data"])
    assert data["killed"], "cleanup found nothing to kill"
    assert all(p["ours"] for p in data["processes"]), "the server the bot launched counts as its own"
    assert list(svc.store.sync.db.query("select * from approvals where run_id = $1", [clean.run_id])) == []
    assert rows[1]["status"] == "ok"
    assert memory_used()[0] <= 64
    print(f"relaunch: server pid {launched['pid']} held {held - before} MiB; cleanup killed {data['killed']}")
