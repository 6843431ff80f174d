"""Start-up of the `eagle` command (a script, not a test), against a bare Python in the same run.

    .venv/bin/python tests/bench/bench_startup.py [--repeat 10] [--runs 100000]

Times fresh processes, medians of --repeat: `python -c pass`, `eagle --help`, and
`eagle history` on an audit store of --runs finished runs (filled as bench_history.py
does), and prints the ratios. Targets (issue 13): `eagle --help` <= 60 ms and a fresh
`eagle history` on 100k runs <= 200 ms, on an idle machine.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_history import fill  # noqa: E402

from eaglebot.store import Store  # noqa: E402


def times(argv: list[str], n: int, cwd: str) -> list[float]:
    out = []
    env = {k: v for k, v in os.environ.items() if k != "EAGLE_CONFIG"}
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def show(name: str, ms: list[float], base: float) -> float:
    med = statistics.median(ms)
    print(f"{name:34s} median {med:7.1f} ms  (min {min(ms):6.1f}, max {max(ms):6.1f})  {med / base:5.1f}x bare python")
    return med


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--runs", type=int, default=100_000)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="eagle-startup-")
    try:
        store = Store(Path(d) / "eagle.db")
        fill(store, a.runs)
        store.close()
        (Path(d) / "eagle.yaml").write_text("audit_db: eagle.db\n")
        py = sys.executable
        eagle = [py, "-m", "eaglebot"]
        times([py, "-c", "pass"], 2, d)  # warm the page cache
        times(eagle + ["history"], 2, d)
        bare = statistics.median(times([py, "-c", "pass"], a.repeat, d))
        print(f"{'python -c pass':34s} median {bare:7.1f} ms")
        h = show("eagle --help", times(eagle + ["--help"], a.repeat, d), bare)
        hist = show(f"eagle history ({a.runs} runs)", times(eagle + ["history"], a.repeat, d), bare)
        print(f"targets: --help <= 60 ms: {'met' if h <= 60 else 'NOT met'}; "
              f"history <= 200 ms: {'met' if hist <= 200 else 'NOT met'}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
