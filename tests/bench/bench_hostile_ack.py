"""Ack latency of ordinary /eagle commands while other users send hostile ones (a script,
not a test): every other request is a YAML alias bomb in a `dict` input (7 levels, the
one that once froze the bot) or an 8 KiB value; the ordinary ones must still be acked fast.
The bot runs in its own process over real HTTP, as in `bench_ack.py`. Target: p99 < 100 ms.

    .venv/bin/python tests/bench/bench_hostile_ack.py [--n 200] [--concurrency 50]
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp  # noqa: E402

from bench_ack import bot_process, latency_report, serve, start_fake  # noqa: E402
from support.fakes.slack_api import FakeSlackAPI  # noqa: E402
from support.slack_harness import PLAYBOOKS, command_body, signed_headers  # noqa: E402

ENVY = {"name": "envy", "inputs": {"env": {"type": "dict"}},
        "steps": [{"skill": "audit.note", "with": {"message": "{{ env }}"}}]}


def bomb(levels: int = 7) -> str:
    parts = ["a0: &a0 [x,x,x,x,x,x,x,x,x]"] + [
        f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "envy local 'env={" + ", ".join(parts) + "}'"


async def load(url: str, fake: FakeSlackAPI, n: int, concurrency: int) -> tuple[list[float], dict, float]:
    sem = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    hostile = [bomb(), "envy local 'env={k: " + "x" * 8000 + "}'"]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def one(i: int) -> None:
            ordinary = i % 2 == 0
            text = "help" if ordinary else hostile[(i // 2) % 2]
            body = command_body(text, user="UOK" if ordinary else "UBAD", response_url=fake.response_url(f"h{i}"))
            async with sem:
                t0 = time.perf_counter()
                async with session.post(url, data=body.encode(), headers=signed_headers(body)) as r:
                    await r.read()
                    statuses[r.status] = statuses.get(r.status, 0) + 1
                    if ordinary:
                        latencies.append((time.perf_counter() - t0) * 1000)

        await one(0)
        latencies.clear()
        statuses.clear()
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return latencies, statuses, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--serve", metavar="API_URL", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        asyncio.run(serve(a.serve, a.dir, playbooks={**PLAYBOOKS, "envy": ENVY}))
        return 0
    fake, _loop = start_fake()
    with bot_process(__file__, fake) as (url, _bot, d, stop):
        latencies, statuses, wall = asyncio.run(load(url, fake, a.n, a.concurrency))
        stop()
        size = sum(f.stat().st_size for f in d.glob("eagle.db*"))
    print(f"{a.n} signed requests ({a.n // 2} hostile), {a.concurrency} in flight, {wall:.2f}s wall, "
          f"HTTP statuses {statuses}, audit DB {size / 1024:.0f} KiB")
    return latency_report(latencies, statuses, a.n, "ordinary ack latency")


if __name__ == "__main__":
    sys.exit(main())
