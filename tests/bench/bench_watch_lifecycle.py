"""The health watch against the bot's own hands (issue 33), a script, not a test: SIMULATED GPU hosts
on one loopback sshd, the shipped `relaunch` run over and over under a running watch.

    .venv/bin/python tests/bench/bench_watch_lifecycle.py [--hosts 16] [--interval 30] [--cycles 100]
        [--faults 30] [--human 20] [--duration 420] [--seed 33]

Phase 1, under one watch (`interval_s` --interval, `confirm_after_s` 10, as configured by default):
- `--cycles` runs of the shipped `relaunch` (stop the simulated SGLang, clean, verify, launch; no
  closing benchmark), at random times over `--duration` seconds. The simulated SGLang's schedulers
  die unregistered when stopped (as SGLang's SIGKILL of its children), so each stop leaves a
  realistic teardown burst in the host's kernel log (per GPU: Xid 43, 8 x Xid 45, Xid 31, stamped
  when the driver notices): 0 quarantines is the target.
- `--faults` real faults injected at random times, a third of them into a host's teardown window
  (right after a relaunch's stop began): Xid 48, 79, 94, 119 lines in the driver's format, a pending
  row remap, a PCIe link down to x8, `ERR!` readings; each on its own GPU. From the write to the
  fake Slack Web API receiving the GPU's `is quarantined` message (post or edit), the second probe
  of the non-fatal ones included: 30/30 and p95 <= 60 s are the targets.
Phase 2, under a watch with `auto_drain` (interval 2 s): `--human` drains a person made (a Slurm
drain found in place, a drain whose reason a person changed, an `eagle run drain` by a user, a
cordon found in place; a quarter each) and 5 of the watch's own, each host through a fatal fault
and back to clean: 0 of the persons' resumed is the target, the watch's own 5 resumed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
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
from support.sshd import chown_to, free_port, start_sshd  # noqa: E402
from test_sglang_sim import write_models  # noqa: E402

from eaglebot.config import load_settings  # noqa: E402
from eaglebot.engine.fleet_hook import watch_actions  # noqa: E402
from eaglebot.engine.health_watch import HealthWatch, HostReport  # noqa: E402
from eaglebot.engine.runner import RunRequest  # noqa: E402
from eaglebot.errors import UsageError  # noqa: E402
from eaglebot.frontends.services import Services  # noqa: E402
from eaglebot.frontends.slack.client import make_client  # noqa: E402
from eaglebot.frontends.slack.health_alerts import HealthAlerts  # noqa: E402
from eaglebot.sim import cluster as sim_cluster  # noqa: E402
from eaglebot.sim import gpu_state, install_sim_bin  # noqa: E402

FAST = {"EAGLE_SIM_LOAD_S": "0.05", "EAGLE_SIM_WARMUP_S": "0.05"}
RELAUNCH = {"bench_prompts": 0, "grace_s": 1, "gpus": [0, 1], "tp": 2, "env": FAST, "ready_timeout_s": 120}
BURST = [43] + [45] * 8 + [31]
FAULTS = ["xid48", "xid79", "xid94", "xid119", "remap", "pcie", "err"]
XID_TEXT = {48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 1",
            79: "pid=1234, name=python, GPU has fallen off the bus.", 94: "pid=1234, name=python, Contained: SM (0x1)",
            119: "pid=1234, name=python, Timeout after 6s of waiting for RPC response from GPU0 GSP!"}
BUS = {0: "0000:00:06", 1: "0000:00:07"}


def make_hosts(work: Path, n: int, server, prefix: str, scheduler: str = "none") -> tuple[dict, dict[str, Path]]:
    hosts, states = {}, {}
    for i in range(n):
        name = f"{prefix}-{i:02d}"
        root = work / "hosts" / name
        state = root / "state"
        sim = install_sim_bin(root / "bin", state, python=PY)
        gpu_state.init_state(state, 2)
        gpu_state.set_teardown_xids(state, BURST)
        gpu_state.set_hard_exit(state)
        target, draft = write_models(root / "models")
        sim_cluster.save({"slurm": {name: {"base": "idle", "drain": False, "reason": None, "partitions": ["gpu"]}},
                          "k8s": {"nodes": {name: {"unschedulable": False}}, "pods": []}}, state)
        hosts[name] = server.host_config(vars={**sim, "model": str(target), "draft": str(draft), "port": free_port(),
                                               "scheduler": scheduler})
        states[name] = state
    chown_to(work / "hosts")
    return hosts, states


async def open_services(work: Path, name: str, hosts: dict, fake: FakeSlackAPI, watch: dict) -> Services:
    cfg = work / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": str(work / f"{name}.db"), "hosts": hosts,
                                   "slack": {"api_url": fake.base_url, "channel": "CHEALTH"},
                                   "health_watch": {"hosts": ["all"], "probe_timeout_s": 15, "clear_after": 3,
                                                    "max_quarantined_pct": 100, "channel": "CHEALTH", **watch}}))
    return await Services.open(load_settings(cfg))


def start_watch(svc: Services, *, actions: bool) -> tuple[HealthWatch, HealthAlerts, asyncio.Event, asyncio.Task]:
    cfg = svc.settings.health_watch
    assert cfg is not None
    alerts = HealthAlerts(make_client(svc.settings, "xoxb-bench", backoff_s=0.05), svc.store, "CHEALTH", cfg.interval_s)

    async def notify(r: HostReport) -> None:      # as `eagle serve` wires it
        await alerts.notify(r)
        if actions:
            await watch_actions(svc.engine, r)
    w = HealthWatch(svc.settings, svc.store, svc.pool, cfg, notify=notify)
    stop = asyncio.Event()
    return w, alerts, stop, asyncio.create_task(w.run(stop))


def inject(state: Path, kind: str, gpu: int) -> None:
    if kind.startswith("xid"):
        code = int(kind[3:])
        line = f"[{gpu_state.uptime_s():12.6f}] NVRM: Xid (PCI:{BUS[gpu]}): {code}, {XID_TEXT[code]}"
        with gpu_state._locked(state) as s:      # appended as the driver appends, under the sim's lock
            s.setdefault("kernel_log", list(gpu_state.KERNEL_LOG)).append(line)
    elif kind == "remap":
        gpu_state.set_health(state, gpu, remap_pending=True)
    elif kind == "pcie":
        gpu_state.set_health(state, gpu, pcie_width=8)
    else:
        gpu_state.set_health(state, gpu, read_error="ERR!")


async def relaunch(svc: Services, host: str) -> str:
    try:
        out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=[host], inputs=RELAUNCH, assume_yes=True,
                                              actor="bench"))
    except UsageError as e:                # a quarantined host refuses relaunch: as in production
        return f"refused: {e}"
    if out.status != "succeeded":
        bad = next((x for x in out.steps if x.status == "failed"), None)
        return f"{out.status}: {bad.name + ': ' + bad.summary if bad else out.error}"
    return out.status


async def teardown_started(svc: Services, host: str, since: int) -> None:
    """Until a relaunch newer than run `since` began to stop the server on `host`."""
    while True:
        steps = await svc.store.call(lambda s: s.health_lifecycle_steps(host, limit=8))
        if any(s["run_id"] > since and s["skill"] == "server.stop" for s in steps):
            return
        await asyncio.sleep(0.02)


async def phase1(work: Path, server, fake: FakeSlackAPI, a: argparse.Namespace, rng: random.Random) -> dict:
    hosts, states = make_hosts(work, a.hosts, server, "gpu")
    svc = await open_services(work, "phase1", hosts, fake, {"interval_s": a.interval})
    try:
        first = await asyncio.gather(*(relaunch(svc, h) for h in hosts))
        assert all(s == "succeeded" for s in first), first
        w, alerts, stop, task = start_watch(svc, actions=False)
        await asyncio.sleep(a.interval * 1.1)                # every host probed once: cursors set
        t_start = time.monotonic()
        busy: set[str] = set()
        cycles: list[str] = []
        latencies: list[tuple[str, str, float, bool]] = []
        targets = rng.sample([(h, g) for h in hosts for g in (0, 1)], a.faults)
        kinds = [FAULTS[i % len(FAULTS)] for i in range(a.faults)]
        in_teardown = set(rng.sample(range(a.faults), a.faults // 3))

        async def cycle(host: str) -> None:
            busy.add(host)
            try:
                cycles.append(await relaunch(svc, host))
            finally:
                busy.discard(host)

        async def cycles_driver() -> None:
            tasks = []
            for t in sorted(rng.uniform(0, a.duration) for _ in range(a.cycles)):
                await asyncio.sleep(max(0.0, t_start + t - time.monotonic()))
                free = [h for h in hosts if h not in busy]
                if free:
                    tasks.append(asyncio.create_task(cycle(rng.choice(free))))
            await asyncio.gather(*tasks)

        async def fault(k: int, at: float) -> None:
            await asyncio.sleep(max(0.0, t_start + at - time.monotonic()))
            host, gpu = targets[k]
            inside = k in in_teardown
            if inside:
                while host in busy:
                    await asyncio.sleep(0.05)
                last = max((s["run_id"] for s in await svc.store.call(lambda s: s.health_lifecycle_steps(host, limit=1))), default=0)
                task = asyncio.create_task(cycle(host))
                began = asyncio.create_task(teardown_started(svc, host, last))
                await asyncio.wait({task, began}, return_when=asyncio.FIRST_COMPLETED)
                if not began.done():          # refused (the host is held): no teardown to land in
                    began.cancel()
                    inside = False
            t0 = time.monotonic()
            inject(states[host], kinds[k], gpu)
            want = f"{host} GPU {gpu} is quarantined"
            seen = None
            while seen is None and time.monotonic() - t0 < 6 * a.interval:
                seen = next((c for c in fake.calls if c.method in ("chat.postMessage", "chat.update")
                             and c.status == 200 and c.at >= t0 and want in str(c.args.get("text", ""))), None)
                await asyncio.sleep(0.05)
            latencies.append((f"{host} GPU {gpu}", kinds[k], (seen.at - t0) if seen else float("inf"), inside))
            print(f"  fault {k + 1:2d} {kinds[k]:6s} on {host} GPU {gpu}{' (teardown)' if inside else '':11s}: "
                  f"{'posted after %5.1f s' % (seen.at - t0) if seen else 'NOT quarantined'}", flush=True)
            if k in in_teardown:
                await task
            if kinds[k] in ("remap", "pcie", "err"):
                gpu_state.set_health(states[host], gpu)

        await asyncio.gather(cycles_driver(), *(fault(k, rng.uniform(0, a.duration)) for k in range(a.faults)))
        while len([c for c in cycles if c == "succeeded"]) < a.cycles:      # refused ones run again elsewhere
            free = [h for h in hosts if h not in busy]
            await cycle(rng.choice(free))
        await asyncio.sleep(a.interval * 1.2)               # the last teardowns' lines read
        stop.set()
        await asyncio.wait_for(task, 120)
        await alerts.aclose()
        events = await svc.store.call(lambda s: s.health_events(limit=100000))
        faulted = {(h, g) for h, g in targets}
        quarantined = {(e["host"], e["gpu"]) for e in events if e["kind"] == "transition" and e["to_state"] == "quarantined"}
        suspects = {(e["host"], e["gpu"]) for e in events if e["kind"] == "transition" and e["to_state"] == "suspect"}
        expected = [e for e in events if e["kind"] == "xid_expected"]
        judged_teardown = [e for e in events if e["kind"] == "xid" and e["from_state"] == "teardown"
                           and e["code"] in (13, 31, 43, 45)]
        fault_windows = {(e["host"], e["gpu"], e["code"]): e["from_state"] for e in events if e["kind"] == "xid"
                         and e["code"] in (48, 79, 94, 119)}
        return {"cycles": len([c for c in cycles if c == "succeeded"]),
                "refused": len([c for c in cycles if c.startswith("refused")]),
                "failed": [c for c in cycles if c not in ("succeeded",) and not c.startswith("refused")],
                "teardown_lines": len(expected) + len(judged_teardown), "expected": len(expected),
                "judged_teardown_app_xids": len(judged_teardown),
                "false_quarantines": sorted(quarantined - faulted), "false_suspects": sorted(suspects - faulted),
                "latencies": latencies, "xid_fault_windows": fault_windows}
    finally:
        await svc.close()


async def phase2(work: Path, server, fake: FakeSlackAPI, a: argparse.Namespace) -> dict:
    n = a.human // 4
    hosts, states = make_hosts(work, 3 * n + 5, server, "slurm", "slurm")
    khosts, kstates = make_hosts(work, a.human - 3 * n, server, "k8s", "kubernetes")
    hosts.update(khosts)
    states.update(kstates)
    names = sorted(hosts)
    slurm = [h for h in names if h.startswith("slurm")]
    before, takeover, user, own = slurm[:n], slurm[n:2 * n], slurm[2 * n:3 * n], slurm[3 * n:]
    cordoned = [h for h in names if h.startswith("k8s")]
    for h in before:
        c = json.loads((states[h] / sim_cluster.STATE_FILE).read_text())
        c["slurm"][h].update(drain=True, reason=f"RMA ticket {4400 + names.index(h)}")
        sim_cluster.save(c, states[h])
    for h in cordoned:
        c = json.loads((states[h] / sim_cluster.STATE_FILE).read_text())
        c["k8s"]["nodes"][h]["unschedulable"] = True
        sim_cluster.save(c, states[h])
    svc = await open_services(work, "phase2", hosts, fake, {"interval_s": 2.0, "auto_drain": True,
                                                            "clear_after": 2})
    try:
        w, alerts, stop, task = start_watch(svc, actions=True)
        for h in user:
            out = await svc.engine.run(RunRequest("drain", hosts=[h], inputs={"reason": "maintenance window"},
                                                  assume_yes=True, actor="UOPS"))
            assert out.status == "succeeded", out.error
        for h in before + takeover + own + cordoned:
            gpu_state.set_health(states[h], 0, ecc_uncorrected=2)

        async def drained(h: str) -> bool:
            return any(r["state"] in ("draining", "drained") for r in await svc.store.call(lambda s: s.health_states(h)))
        deadline = time.monotonic() + 300
        while not all([await drained(h) for h in names]):
            assert time.monotonic() < deadline, "not every host drained"
            await asyncio.sleep(0.2)
        for h in takeover:                                   # a person takes the watch's drain over
            c = json.loads((states[h] / sim_cluster.STATE_FILE).read_text())
            c["slurm"][h]["reason"] = "hands off: fan replaced, burn-in pending (ops)"
            sim_cluster.save(c, states[h])
        for h in names:
            gpu_state.set_health(states[h], 0)

        async def decided(h: str) -> bool:
            ev = await svc.store.call(lambda s: s.health_events(h, limit=200))
            if h in own:
                return any(e["kind"] == "transition" and e["to_state"] == "healthy" for e in ev)
            return any(e["kind"] == "note" and e["reason"].startswith("left ") for e in ev)
        deadline = time.monotonic() + 120
        while not all([await decided(h) for h in names]):
            if time.monotonic() > deadline:
                for h in names:
                    if not await decided(h):
                        print("UNDECIDED", h, await svc.store.call(lambda s: s.health_states(h)), (await svc.store.call(lambda s: s.health_events(h)))[:4])
            assert time.monotonic() < deadline, "the watch did not decide on every host"
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.wait_for(task, 60)
        await alerts.aclose()

        def resumed(h: str) -> bool:
            log = [json.loads(x) for x in (states[h] / sim_cluster.LOG_FILE).read_text().splitlines()]
            return any((c[0] == "scontrol" and "State=RESUME" in c) or c[:2] == ["kubectl", "uncordon"] for c in log)
        human = before + takeover + user + cordoned
        return {"human": len(human), "human_resumed": sorted(h for h in human if resumed(h)),
                "own": len(own), "own_resumed": len([h for h in own if resumed(h)]),
                "left_notes": sum(1 for c in fake.ok_calls_to("chat.postMessage") if ": left drained: " in c.args["text"])}
    finally:
        await svc.close()


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--interval", type=float, default=30.0)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--faults", type=int, default=30)
    ap.add_argument("--human", type=int, default=20)
    ap.add_argument("--duration", type=float, default=420.0)
    ap.add_argument("--seed", type=int, default=33)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    t_all = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="eagle-lifecycle-"))
    os.chmod(work, 0o755)
    server = start_sshd(work / "sshd")
    fake = await FakeSlackAPI().start()
    try:
        p1 = await phase1(work, server, fake, a, rng)
        lat = sorted(x[2] for x in p1["latencies"])
        caught = [x for x in p1["latencies"] if x[2] != float("inf")]
        p95 = lat[max(0, int(round(0.95 * len(lat))) - 1)]
        print(f"phase 1: {a.hosts} hosts x 2 GPUs, interval_s {a.interval:g}: {p1['cycles']} relaunch cycles "
              f"({p1['refused']} refused on a quarantined host, failed: {p1['failed'] or 'none'}); "
              f"{p1['teardown_lines']} teardown Xid lines read, {p1['expected']} expected, "
              f"{p1['judged_teardown_app_xids']} judged; quarantines without a fault: {len(p1['false_quarantines'])} "
              f"{p1['false_quarantines'] or ''}; suspects without a fault: {len(p1['false_suspects'])}")
        inside = [x for x in p1["latencies"] if x[3]]
        print(f"faults: {len(caught)}/{len(lat)} quarantined ({len([x for x in inside if x[2] != float('inf')])}/"
              f"{len(inside)} of those in a teardown window); write -> Slack median {statistics.median(lat):.1f} s, "
              f"p95 {p95:.1f} s, max {lat[-1]:.1f} s; fatal Xids' windows {sorted(set(p1['xid_fault_windows'].values()))}")
        for kind in FAULTS:
            mine = [x[2] for x in p1["latencies"] if x[1] == kind]
            if mine:
                print(f"  {kind:6s}: {len(mine)} faults, median {statistics.median(mine):.1f} s, max {max(mine):.1f} s")
        p2 = await phase2(work, server, fake, a)
        print(f"phase 2: {p2['human']} drains a person made: {len(p2['human_resumed'])} resumed by the watch "
              f"{p2['human_resumed'] or ''}, {p2['left_notes']} 'left' notes posted; the watch's own "
              f"{p2['own']}: {p2['own_resumed']} resumed")
        ok = (not p1["false_quarantines"] and len(caught) == len(lat) and p95 <= 60 and not p2["human_resumed"]
              and p2["own_resumed"] == p2["own"])
        print(f"RESULT: {'all targets met' if ok else 'a target missed'} ({time.monotonic() - t_all:.0f} s)")
        return 0 if ok else 1
    finally:
        await fake.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
