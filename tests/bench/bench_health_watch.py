"""The health watch at fleet size: N simulated hosts probed every `interval_s` over one loopback
sshd; Xid 79 injected into a random host's kernel log at random times (a script, not a test).

    .venv/bin/python tests/bench/bench_health_watch.py [--hosts 256] [--interval 30] [--injections 20]

Each injection writes a real-format Xid 79 line into one host's simulated kernel log and makes
its nvidia-smi fail as a GPU off the bus does (exit 15), then waits for the fake Slack Web API
to receive the incident's message; the latency is from the write to that call. Prints the
latencies' median and p95, the bot's CPU per probe round (all N hosts once: user+system time
of this process, which is the bot; the simulated tools run under sshd) and its peak RSS.
Target (issue 21): p95 <= 60 s with 256 hosts at interval_s 30. The watch against the bot's own
relaunches, faults inside teardown windows and human drains is bench_watch_lifecycle.py.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from support.fakes.slack_api import FakeSlackAPI  # noqa: E402
from support.gpu_helpers import PY  # noqa: E402
from support.sshd import chown_to, start_sshd  # noqa: E402

from eaglebot.config import load_settings  # noqa: E402
from eaglebot.engine.health_watch import HealthWatch, HostReport  # noqa: E402
from eaglebot.frontends.services import Services  # noqa: E402
from eaglebot.frontends.slack.client import make_client  # noqa: E402
from eaglebot.frontends.slack.health_alerts import HealthAlerts  # noqa: E402
from eaglebot.sim import gpu_state, install_sim_bin  # noqa: E402

XID79 = "[{ts:12.6f}] NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python, GPU has fallen off the bus."


def fleet(work: Path, n: int, server) -> tuple[dict, dict[str, Path]]:
    """One copy of the simulated tools; per host a state folder and two wrappers that point at it."""
    sim = install_sim_bin(work / "sim-bin", work / "sim-state", python=PY)
    lib = Path(sim["nvidia_smi"]).parent / ".eagle-sim" / "nvidia_smi.py"
    hosts, states = {}, {}
    for i in range(n):
        name = f"gpu-{i:03d}"
        state, bin_dir = work / "hosts" / name / "state", work / "hosts" / name / "bin"
        bin_dir.mkdir(parents=True)
        gpu_state.init_state(state, 1)
        env = f"EAGLE_SIM_STATE={shlex.quote(str(state))}"
        for tool, extra in (("nvidia-smi", '"$@"'), ("dmesg", "--sim-dmesg")):
            (bin_dir / tool).write_text(f"#!/bin/sh\n{env} exec {shlex.quote(PY)} {shlex.quote(str(lib))} {extra}\n")
            os.chmod(bin_dir / tool, 0o755)
        hosts[name] = server.host_config(vars={"nvidia_smi": str(bin_dir / "nvidia-smi"),
                                               "dmesg": str(bin_dir / "dmesg")})
        states[name] = state
    chown_to(work / "hosts")
    return hosts, states


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=256)
    ap.add_argument("--interval", type=float, default=30.0)
    ap.add_argument("--injections", type=int, default=20)
    ap.add_argument("--seed", type=int, default=21)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = Path(tempfile.mkdtemp(prefix="eagle-watch-"))
    os.chmod(work, 0o755)
    server = start_sshd(work / "sshd")
    fake = await FakeSlackAPI().start()
    svc = None
    try:
        hosts, states = fleet(work, a.hosts, server)
        cfg = work / "eagle.yaml"
        cfg.write_text(yaml.safe_dump({
            "audit_db": str(work / "eagle.db"), "hosts": hosts, "slack": {"api_url": fake.base_url},
            "health_watch": {"hosts": ["all"], "interval_s": a.interval, "probe_timeout_s": 15,
                             "clear_after": 3, "max_quarantined_pct": 100, "channel": "CHEALTH"}}))
        svc = await Services.open(load_settings(cfg))
        alerts = HealthAlerts(make_client(svc.settings, "xoxb-bench", backoff_s=0.05), svc.store, "CHEALTH",
                              a.interval)
        assert svc.settings.health_watch is not None
        watch = HealthWatch(svc.settings, svc.store, svc.pool, svc.settings.health_watch, notify=alerts.notify)
        probes = 0
        real = watch.probe_once

        async def counted(host: str) -> HostReport:
            nonlocal probes
            r = await real(host)
            probes += 1
            return r
        watch.probe_once = counted  # type: ignore[method-assign]
        stop = asyncio.Event()
        task = asyncio.create_task(watch.run(stop))
        await asyncio.sleep(a.interval * 1.2)                 # every host probed once: cursors set
        cpu0, probes0, t_start = time.process_time(), probes, time.monotonic()
        latencies: list[float] = []
        victims = rng.sample(sorted(hosts), a.injections)
        for k, host in enumerate(victims):
            await asyncio.sleep(rng.uniform(0, a.interval))
            gpu_state.set_kernel_log(states[host], gpu_state.KERNEL_LOG + [XID79.format(ts=9000.0 + k)])
            gpu_state.set_exit_code(states[host], 15)
            t0 = time.monotonic()
            seen = None
            while seen is None and time.monotonic() - t0 < 4 * a.interval:
                seen = next((c for c in fake.ok_calls_to("chat.postMessage")
                             if f"{host} " in c.args.get("text", "") and c.at >= t0), None)
                await asyncio.sleep(0.05)
            lat = (seen.at - t0) if seen else float("inf")
            latencies.append(lat)
            print(f"  injection {k + 1:2d} on {host}: posted after {lat:5.1f} s", flush=True)
        cpu, rounds = time.process_time() - cpu0, (probes - probes0) / a.hosts
        wall = time.monotonic() - t_start
        stop.set()
        await asyncio.wait_for(task, 60)
        await alerts.aclose()
        lat_sorted = sorted(latencies)
        p95 = lat_sorted[max(0, int(round(0.95 * len(lat_sorted))) - 1)]
        print(f"{a.hosts} hosts, interval_s {a.interval:g}, {a.injections} injections: "
              f"Xid line -> Slack post median {statistics.median(latencies):.1f} s, p95 {p95:.1f} s, "
              f"max {lat_sorted[-1]:.1f} s")
        print(f"bot CPU {cpu:.1f} s over {wall:.0f} s wall = {rounds:.1f} probe rounds: "
              f"{cpu / max(rounds, 1e-9):.2f} CPU-s per round of {a.hosts} hosts "
              f"({1000 * cpu / max(probes - probes0, 1):.1f} ms per probe); "
              f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    finally:
        if svc is not None:
            await svc.close()
        await fake.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
