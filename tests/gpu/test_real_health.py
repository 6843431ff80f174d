"""On a real GPU machine: the `health` playbook's gpu.health reads every field from the real
nvidia-smi, NVLink and the kernel log, and a healthy idle machine gets `ok` on every GPU.

Run with `pytest -o addopts="" -m gpu tests/gpu` as root on a host with nvidia-smi.
"""
from __future__ import annotations

import json

import pytest

from real_gpu import gpu_count
from eaglebot.engine.runner import RunRequest
from eaglebot.facts.gpu.health import HEALTH_FIELDS

pytestmark = pytest.mark.gpu


async def test_health_on_real_gpus_is_ok_and_every_field_parses(services):
    svc = await services({"gpu": {"transport": "local"}})
    out = await svc.engine.run(RunRequest(playbook="health", hosts=["gpu"]))
    row = svc.store.sync.steps(out.run_id)[0]
    print(row["output"])
    data = json.loads(row["data"])
    n = gpu_count()
    assert sorted(data["health"]) == [str(i) for i in range(n)]
    assert data["dropped_fields"] == [], "driver 580 knows every health field"
    for i in range(n):
        g = data["gpus"][str(i)]
        assert set(g) == set(HEALTH_FIELDS)
        missing = [f for f in HEALTH_FIELDS if g[f] is None]
        assert missing == [], f"GPU {i}: no value for {missing}"
    if n >= 2:
        assert all(len(links) > 0 for links in data["nvlink"].values()), data["nvlink"]
        assert set(data["nvlink_errors"]) == {str(i) for i in range(n)}
    assert data["dcgm"]["status"] in ("skipped", "ok")
    assert out.status == "succeeded", row["summary"]
    assert {v["verdict"] for v in data["health"].values()} == {"ok"}, data["health"]
