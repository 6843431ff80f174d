#!/usr/bin/env python3
"""Benchmark: time from `gpu.cleanup` start to "verified free" (gpu.verify) for one holder.

Not a test. With the simulator (default) the holder is a real `sleep` registered in a
simulated nvidia-smi; with --real it is a PyTorch process holding memory on a real GPU
(needs nvidia-smi and torch; only processes carrying this script's tag are killed).

    python tests/bench/bench_cleanup.py [--repeat 5] [--ignore-term] [--grace 2]
    python tests/bench/bench_cleanup.py --real --gpu 0 --mib 4096
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eaglebot.config import Settings
from eaglebot.engine.playbook import parse_playbook
from eaglebot.engine.runner import RunRequest
from eaglebot.frontends.services import Services

TAG = "eagle-bench-holder"
SIM_SLEEP = "3001"          # the simulated holder's command line is `sleep 3001`
TORCH_HOLDER = r'''
import signal, sys, time
import torch
if sys.argv[4] == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
x = torch.ones(int(sys.argv[3]) * 1024 * 1024, dtype=torch.uint8, device=f"cuda:{sys.argv[2]}")
torch.cuda.synchronize()
print("ready", flush=True)
while True:
    time.sleep(1)
'''


def start_holder(args, state_dir: Path | None) -> subprocess.Popen:
    ign = "1" if args.ignore_term else "0"
    if args.real:
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        p = subprocess.Popen([sys.executable, "-c", TORCH_HOLDER, TAG, str(args.gpu), str(args.mib), ign],
                             stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
        if p.stdout.readline().strip() != "ready":
            raise SystemExit(f"the PyTorch holder did not start (exit {p.poll()})")
        return p
    from eaglebot.sim import gpu_state

    body = ("trap '' TERM; " if args.ignore_term else "") + f"exec sleep {SIM_SLEEP}"
    p = subprocess.Popen(["sh", "-c", body], start_new_session=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(b"sleep"):
        time.sleep(0.01)
    gpu_state.add_holder(state_dir, p.pid, args.gpu, args.mib)
    return p


async def one(svc: Services, args, state_dir: Path | None) -> dict:
    holder = start_holder(args, state_dir)
    pb = parse_playbook(json.dumps({"name": "bench-cleanup", "steps": [
        {"skill": "gpu.cleanup", "with": {"gpus": [args.gpu], "grace_s": args.grace,
                                          "match": TAG if args.real else f"^sleep {SIM_SLEEP}$"}},
        {"skill": "gpu.verify", "with": {"gpus": [args.gpu], "max_used_mib": args.max_used_mib,
                                         "timeout_s": 60, "poll_s": args.poll}}]}), "bench.yaml")
    t0 = time.perf_counter()
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"], assume_yes=True))
    total = time.perf_counter() - t0
    try:
        if out.status != "succeeded":
            raise SystemExit("run failed: " + "; ".join(f"{s.name}: {s.summary}" for s in out.steps))
        return {"cleanup_s": out.steps[0].duration_ms / 1000, "verify_s": out.steps[1].duration_ms / 1000,
                "gpu_free_s": next(m.value for _, m in out.metrics if m.name == "gpu_free_s"), "total_s": total}
    finally:
        if holder.poll() is None:
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", action="store_true", help="a real GPU, real nvidia-smi and a PyTorch holder")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--mib", type=int, default=4096)
    ap.add_argument("--grace", type=float, default=2.0, help="gpu.cleanup grace_s")
    ap.add_argument("--poll", type=float, default=0.05, help="gpu.verify poll_s (its default)")
    ap.add_argument("--max-used-mib", type=int, default=64)
    ap.add_argument("--ignore-term", action="store_true", help="the holder ignores SIGTERM (SIGKILL after --grace)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="eagle-bench-") as tmp:
        tmp_path = Path(tmp)
        host: dict = {"transport": "local", "vars": {}}
        state_dir = None
        if not args.real:
            from eaglebot.sim import gpu_state, install_sim_bin

            state_dir = tmp_path / "gpu-state"
            host["vars"]["nvidia_smi"] = install_sim_bin(tmp_path / "bin", state_dir)["nvidia_smi"]
            gpu_state.init_state(state_dir, args.gpu + 1)
        settings = Settings(audit_db=str(tmp_path / "bench.db"), hosts={"gpu": host},
                            state_dir=str(tmp_path / "state"), base_dir=tmp_path)
        svc = await Services.open(settings)
        try:
            rows = [await one(svc, args, state_dir) for _ in range(args.repeat)]
        finally:
            await svc.close()
    mode = "real GPU" if args.real else "SIMULATED nvidia-smi"
    print(f"{mode}: one holder of {args.mib} MiB on GPU {args.gpu}"
          f"{' ignoring SIGTERM' if args.ignore_term else ''}, grace {args.grace:g}s, {args.repeat} runs")
    for key in ("cleanup_s", "verify_s", "gpu_free_s", "total_s"):
        vals = [r[key] for r in rows]
        print(f"  {key:<11} median {statistics.median(vals):7.3f}  min {min(vals):7.3f}  max {max(vals):7.3f}")


if __name__ == "__main__":
    asyncio.run(main())
