"""On a real GPU machine: the health watch over the local host (real nvidia-smi, NVLink, the real
kernel log) makes no finding while the GPUs are idle, under a full matmul load, and through a real
cleanup of real PyTorch holders (the driver's own teardown Xids, if it logs any, are `expected`).

Run with `pytest -o addopts="" -m gpu tests/gpu` as root on a host with nvidia-smi.
"""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from real_gpu import gpu_count
from eaglebot.engine.health_watch import HealthWatch, HostReport
from eaglebot.engine.runner import RunRequest

pytestmark = pytest.mark.gpu

LOAD = r'''
import sys, time, torch
n = torch.cuda.device_count()
xs = [torch.randn(8192, 8192, device=f"cuda:{i}", dtype=torch.bfloat16) for i in range(n)]
print("loaded", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for x in xs:
        y = x @ x
    torch.cuda.synchronize()
'''


def _trouble(reports: list[HostReport]) -> list[str]:
    """Everything but an `expected` Xid: findings, held or suspect transitions, notes."""
    out = [f"{r.probe.status}: {f.gpu} {f.level} {f.reason}" for r in reports for f in r.probe.findings]
    out += [f"probe {r.probe.status}" for r in reports if r.probe.status != "ok"]
    out += [f"{g}: {a} -> {b} ({why})" for r in reports for g, a, b, why in r.transitions if b != "expected"]
    out += [f"note {g}: {n}" for r in reports for g, n in r.notes]
    return out


async def _rounds(w: HealthWatch, n: int) -> list[HostReport]:
    out = []
    for _ in range(n):
        out += await w.round()
        await asyncio.sleep(1.0)
    return out


async def test_the_watch_finds_nothing_idle_under_load_and_through_a_real_cleanup(services, holders):
    svc = await services({"gpu": {"transport": "local"}},
                         health_watch={"hosts": ["gpu"], "interval_s": 1, "probe_timeout_s": 15,
                                       "confirm_after_s": 0.5})
    assert svc.settings.health_watch is not None
    w = HealthWatch(svc.settings, svc.store, svc.pool, svc.settings.health_watch)
    idle = await _rounds(w, 5)
    assert _trouble(idle) == [], idle
    assert all(r.probe.boot_id and r.probe.uptime_s for r in idle), "the kernel log command reads boot id and uptime"

    load = subprocess.Popen([sys.executable, "-c", LOAD, "40"], stdout=subprocess.PIPE, text=True)
    try:
        assert load.stdout is not None and load.stdout.readline().strip() == "loaded"
        busy = await _rounds(w, 8)
    finally:
        load.kill()
        load.wait(30)
    assert _trouble(busy) == [], busy

    n = gpu_count()
    holders.start(list(range(n)), 2048)
    holders.start([0], 1024, ignore_term=True)
    reports: list[HostReport] = []

    async def notify(r: HostReport) -> None:
        reports.append(r)
    w.notify = notify
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    try:
        out = await svc.engine.run(RunRequest(playbook="cleanup", hosts=["gpu"], inputs={"grace_s": 1},
                                              assume_yes=True))
        assert out.status == "succeeded", [(s.name, s.status, s.summary) for s in out.steps]
        await asyncio.sleep(5)                          # the teardown's lines, if any, read by the watch
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
    after = await _rounds(w, 3)
    assert _trouble(reports + after) == [], reports + after
    judged = [e for e in await svc.store.call(lambda s: s.health_events("gpu")) if e["kind"] == "xid"]
    assert judged == [], judged
    expected = [e for e in await svc.store.call(lambda s: s.health_events("gpu")) if e["kind"] == "xid_expected"]
    print(f"Xid lines the real driver logged in the bot's teardown: {len(expected)} "
          f"({sorted({e['code'] for e in expected})})")
    assert {e["from_state"] for e in expected} <= {"teardown"}
