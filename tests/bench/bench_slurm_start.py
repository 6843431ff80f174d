#!/usr/bin/env python3
"""Benchmark: the test Slurm cluster's start (tests/support/slurm.py): from slurmctld's start to the node
idle in sinfo, and its stop; then a job's start (sbatch to `mixed`) and a drain read back.

Not a test: the numbers go to docs/benchmarks.md. Needs slurm-wlm (and root, as the suite).

    python tests/bench/bench_slurm_start.py [--repeat 5] [--auth none|munge]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.slurm import NODE, start_slurm  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--auth", choices=["none", "munge"], default=None)
    args = ap.parse_args()
    if args.auth:
        os.environ["EAGLE_SLURM_AUTH"] = args.auth
    starts, stops, jobs, drains = [], [], [], []
    auth = ""
    for _ in range(args.repeat):
        c = start_slurm()
        auth = c.auth
        starts.append(c.started_s)
        try:
            t = time.monotonic()
            c.start_job(cpus=1)
            jobs.append(time.monotonic() - t)
            t = time.monotonic()
            c.check("scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=bench")
            assert c.sinfo().startswith(f"{NODE} draining bench")
            drains.append(time.monotonic() - t)
        finally:
            t = time.monotonic()
            c.stop()
            stops.append(time.monotonic() - t)

    def stat(xs: list[float]) -> dict[str, float]:
        return {"median_s": round(statistics.median(xs), 3), "min_s": round(min(xs), 3), "max_s": round(max(xs), 3)}
    print(json.dumps({"auth": auth, "repeat": args.repeat, "start": stat(starts), "job_to_mixed": stat(jobs),
                      "drain_read_back": stat(drains), "stop": stat(stops)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
