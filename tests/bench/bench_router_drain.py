"""Relaunching behind SGLang's router: failed client requests and latency (a script, not a test).

    .venv/bin/python tests/bench/bench_router_drain.py [--cycles 20] [--concurrency 8] [--router-args=...]

Two SIMULATED SGLang servers on two hosts over real loopback sshds (one SSH user each, as two
machines), the REAL `sglang-router` (the dev extra installs it) in front of them, round robin; a
client keeps `--concurrency` /generate requests in flight through the router for the whole time
(each takes ~0.25 s: EAGLE_SIM_TIME_SCALE). Then `--cycles` relaunches alternating the two
hosts, twice: with host var `router` set (the worker is drained from the router first and put
back when healthy) and without it (the baseline: a plain relaunch stops a server the router still
sends to). Prints, for each, the client's failed requests, and p50/p99 latency overall and of the
requests started while a relaunch ran.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from support.router_load import Load, start_router  # noqa: E402
from support.sshd import chown_to, start_sshd  # noqa: E402
from test_server_skills import FAST, PY, Host  # noqa: E402

from eaglebot.config import load_settings  # noqa: E402
from eaglebot.engine.runner import RunRequest  # noqa: E402
from eaglebot.frontends.services import Services  # noqa: E402

SLOW = dict(FAST, EAGLE_SIM_TIME_SCALE="0.1")
INPUTS = {"bench_prompts": "0", "env": json.dumps(SLOW), "drain_timeout_s": "120"}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


async def open_services(work: Path, hosts: dict[str, Host], state: str, router: str | None) -> Services:
    cfg = work / ("eagle-router.yaml" if router else "eagle.yaml")
    data = {}
    for n, h in hosts.items():
        c = json.loads(json.dumps(h.config))
        if router:
            c["vars"]["router"] = router
        data[n] = c
    cfg.write_text(yaml.safe_dump({"audit_db": str(work / "eagle.db"), "state_dir": state, "hosts": data}))
    return await Services.open(load_settings(cfg))


async def cycles(svc: Services, load: Load, n: int) -> tuple[list[tuple[float, float]], list[str]]:
    windows, problems = [], []
    for i in range(n):
        host = "ab"[i % 2]
        t0 = time.monotonic()
        out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=[host], inputs=INPUTS))
        windows.append((t0, time.monotonic()))
        if out.status != "succeeded":
            problems.append(f"cycle {i} ({host}): " + "; ".join(s.summary for s in out.steps if s.status == "failed"))
        print(f"  cycle {i + 1:2d} {host}: {windows[-1][1] - t0:5.1f}s, client ok {load.ok}, failed "
              f"{len(load.failed)}", flush=True)
    return windows, problems


def report(name: str, load: Load, windows: list[tuple[float, float]], problems: list[str]) -> dict:
    lat = [s for _, s in load.latencies]
    during = [s for t, s in load.latencies if any(a <= t <= b for a, b in windows)]
    out = {"mode": name, "requests": load.ok + len(load.failed), "failed": len(load.failed),
           "p50_ms": round(pct(lat, 50) * 1000), "p99_ms": round(pct(lat, 99) * 1000),
           "p99_during_relaunch_ms": round(pct(during, 99) * 1000),
           "relaunch_s_median": round(statistics.median(b - a for a, b in windows), 1),
           "run_failures": len(problems)}
    print(json.dumps(out))
    kinds: dict[str, int] = {}
    for f in load.failed:
        kinds[f[:140]] = kinds.get(f[:140], 0) + 1
    for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])[:5]:
        print(f"    {v:4d} x {k}")
    for p in problems[:5]:
        print(f"    run: {p[:200]}")
    return out


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--router-args", default="", help="more sglang-router launch arguments, e.g. --disable-retries")
    args = ap.parse_args()
    tag = f"{os.getpid()}"
    servers = [start_sshd(Path("/tmp") / f"eagle-bench-sshd{i}-{tag}", user=u)
               for i, u in enumerate(("eagletest", "eagletest2"))]
    work = Path(tempfile.mkdtemp(prefix="eagle-bench-router-"))
    dirs = [Path("/tmp") / f"eagle-bench-router-{n}-{tag}" for n in "ab"]
    hosts: dict[str, Host] = {}
    router = None
    state = f"~/eagle-bench-state-{tag}"
    try:
        for n, d, s in zip("ab", dirs, servers):
            d.mkdir()
            hosts[n] = Host(d, d / "bin", PY, ssh=s.host_config())
            chown_to(d, s.user)
            hosts[n].botstate = s.home / state[2:]
        svc = await open_services(work, hosts, state, None)
        try:
            out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["a", "b"], inputs=INPUTS))
            assert out.status == "succeeded", [s.summary for s in out.steps if s.status == "failed"]
        finally:
            await svc.close()
        router = start_router([f"http://127.0.0.1:{h.port}" for h in hosts.values()], work / "router.log",
                              *args.router_args.split())
        results = []
        for name, url in (("router drain", router.url), ("baseline (no router var)", None)):
            print(f"== {name}: {args.cycles} relaunches alternating a and b, {args.concurrency} requests in flight")
            svc = await open_services(work, hosts, state, url)
            load = Load(router.port, args.concurrency).start()
            try:
                windows, problems = await cycles(svc, load, args.cycles)
            finally:
                load.stop()
                await svc.close()
            results.append(report(name, load, windows, problems))
            # the baseline may leave a worker the router marked unhealthy: wait until both serve again
            deadline = time.monotonic() + 120
            while len(router.healthy()) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
        print(json.dumps(results, indent=1))
    finally:
        if router is not None:
            router.stop()
        for h in hosts.values():
            h.stop()
            shutil.rmtree(h.botstate, ignore_errors=True)
        for s in servers:
            s.stop()
            shutil.rmtree(s.root, ignore_errors=True)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
