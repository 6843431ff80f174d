"""The health watch over a REAL GPU machine: idle, then under a full matmul load on every GPU
(a script for the device machine, not a test; recorded in docs/gpu-validation.md).

    python3 tests/gpu/watch_real.py [--idle 270] [--load 270] [--interval 10]

The watch probes the local host (local transport, real nvidia-smi, NVLink, the kernel log)
every `interval` seconds; it must make no finding and no transition, idle or loaded. Prints the
probes, their wall time (median, p95, max), the bot's CPU per probe and every finding.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from eaglebot.config import load_settings
from eaglebot.engine.health_watch import HealthWatch, HostReport
from eaglebot.frontends.services import Services

LOAD = r'''
import sys, time, torch
n = torch.cuda.device_count()
xs = [torch.randn(8192, 8192, device=f"cuda:{i}", dtype=torch.bfloat16) for i in range(n)]
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for x in xs:
        y = x @ x
    torch.cuda.synchronize()
'''


async def phase(svc: Services, watch: HealthWatch, name: str, seconds: float, interval: float) -> dict:
    durations: list[float] = []
    findings: list[str] = []
    transitions: list[str] = []
    cpu0 = time.process_time()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        r: HostReport = await watch.probe_once("gpu")
        p = r.probe
        durations.append(p.duration_s)
        findings += [f"{f.gpu}: {f.level} {f.reason}" for f in p.findings] + [f"xid {x.code}" for _, x in p.xids]
        transitions += [f"{g}: {a} -> {b} ({why})" for g, a, b, why in r.transitions]
        if p.status != "ok":
            findings.append(f"probe {p.status}")
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0)))
    cpu = time.process_time() - cpu0
    q = sorted(durations)
    out = {"phase": name, "probes": len(durations), "median_s": statistics.median(q), "p95_s": q[int(0.95 * (len(q) - 1))],
           "max_s": q[-1], "bot_cpu_ms_per_probe": 1000 * cpu / max(1, len(durations)),
           "findings": findings, "transitions": transitions}
    print(out, flush=True)
    return out


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle", type=float, default=270)
    ap.add_argument("--load", type=float, default=270)
    ap.add_argument("--interval", type=float, default=10)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eagle-watch-real-"))
    cfg = work / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": str(work / "eagle.db"), "hosts": {"gpu": {"transport": "local"}},
                                   "health_watch": {"hosts": ["gpu"], "interval_s": a.interval,
                                                    "probe_timeout_s": 15}}))
    svc = await Services.open(load_settings(cfg))
    assert svc.settings.health_watch is not None
    watch = HealthWatch(svc.settings, svc.store, svc.pool, svc.settings.health_watch)
    try:
        idle = await phase(svc, watch, "idle", a.idle, a.interval)
        load = subprocess.Popen([sys.executable, "-c", LOAD, str(a.load + 30)])
        await asyncio.sleep(15)                          # the load up to speed
        util = subprocess.run(["nvidia-smi", "--query-gpu=index,utilization.gpu,power.draw,clocks_event_reasons.active",
                               "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        print(f"under load: {util}", flush=True)
        busy = await phase(svc, watch, "load", a.load, a.interval)
        load.kill()
        load.wait()
    finally:
        await svc.close()
    bad = idle["findings"] + idle["transitions"] + busy["findings"] + busy["transitions"]
    print("RESULT:", "0 findings" if not bad else f"{len(bad)} findings", flush=True)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
