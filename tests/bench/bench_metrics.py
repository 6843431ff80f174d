"""What a Prometheus scrape of `eagle serve`'s /metrics costs (a script, not a test).

A real SQLite audit store with a fleet's health rows (256 hosts x 8 GPUs, every 50th GPU
quarantined) and open incidents; each scrape runs the store queries of the custom gauges
and renders the registry, as the /metrics handler does. Prints the median and max over
the scrapes and the body's size. Target: a few milliseconds (Prometheus scrapes every 15 s).

    .venv/bin/python tests/bench/bench_metrics.py [--hosts 256] [--gpus 8] [--scrapes 50]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from prometheus_client import generate_latest

from eaglebot.frontends.service.metrics import Metrics
from eaglebot.store import AsyncStore
from eaglebot.store.protocol import StoreProtocol


async def main(hosts: int, gpus: int, scrapes: int) -> None:
    store = await AsyncStore.open(Path(tempfile.mkdtemp()) / "eagle.db", None)

    def fill(s: StoreProtocol) -> None:
        for h in range(hosts):
            for g in range(gpus):
                state = "quarantined" if (h * gpus + g) % 50 == 0 else "suspect"
                s.health_transition(f"gpu-{h:03d}", g, state, "bench", "watch")
    await store.call(fill)
    m = Metrics(store)
    took, size = [], 0
    for _ in range(scrapes):
        t0 = time.perf_counter()
        await m.refresh()
        size = len(generate_latest(m.registry))
        took.append((time.perf_counter() - t0) * 1000)
    await store.aclose()
    print(f"{hosts * gpus} health rows: scrape median {statistics.median(took):.1f} ms, max {max(took):.1f} ms, "
          f"body {size} bytes")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=256)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--scrapes", type=int, default=50)
    a = ap.parse_args()
    asyncio.run(main(a.hosts, a.gpus, a.scrapes))
