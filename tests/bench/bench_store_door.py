"""N awaited store writes through the async door (a script, not a test; issue 45 item 2).

Each write is one audit event (`add_event`: a write transaction, an audit-chain entry), awaited
one after another from the event loop, then the same N in flight at once (`gather`: they queue
on the one writer thread), then N reads (`get_run`). Prints the wall time and the time per call
of each. On a tree with the generated async face (before issue 45) it measures
`await store.add_event(...)`; on one with the door, `await store.call(lambda s: s.add_event(...))`.
--pg runs the same against a real PostgreSQL started for the run (tests/support/pg.py).

    .venv/bin/python tests/bench/bench_store_door.py [--n 2000] [--repeat 5] [--pg]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eaglebot.store import AsyncStore  # noqa: E402
from eaglebot.store.rows import NewRun  # noqa: E402

FACE = hasattr(AsyncStore, "add_event")  # the generated face (before issue 45)


def ops(store: Any) -> tuple[Callable[[int], Awaitable[None]], Callable[[int], Awaitable[Any]]]:
    """One write and one read, through whichever async API this tree has."""
    if FACE:
        return (lambda i: store.add_event(None, "bench", f"event {i}"), lambda rid: store.get_run(rid))
    return (lambda i: store.call(lambda s: s.add_event(None, "bench", f"event {i}")),
            lambda rid: store.call(lambda s: s.get_run(rid)))


async def once(target: str, n: int) -> dict[str, float]:
    store = await AsyncStore.open(target)
    write, read = ops(store)
    run = NewRun(playbook="bench", hosts=["h"], inputs={}, variables={}, actor="bench", origin="cli")
    rid = await (store.create_run(run) if FACE else store.call(lambda s: s.create_run(run)))
    try:
        out = {}
        t0 = time.perf_counter()
        for i in range(n):
            await write(i)
        out["sequential writes"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        await asyncio.gather(*(write(n + i) for i in range(n)))
        out["gathered writes"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(n):
            await read(rid)
        out["sequential reads"] = time.perf_counter() - t0
        return out
    finally:
        await store.aclose()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pg", action="store_true", help="a real PostgreSQL (tests/support/pg.py) instead of SQLite")
    a = ap.parse_args()
    server = None
    if a.pg:
        from support.pg import start_pg

        server = start_pg()
    try:
        results: dict[str, list[float]] = {}
        for k in range(a.repeat):
            if server is not None:
                with server.admin() as c:
                    c.execute(f'create database "bench{k}"')
                target = server.url(f"bench{k}")
            else:
                target = str(Path(tempfile.mkdtemp(prefix="bench-door-")) / "eagle.db")
            for name, s in asyncio.run(once(target, a.n)).items():
                results.setdefault(name, []).append(s)
    finally:
        if server is not None:
            server.stop()
    api = "generated face" if FACE else "door (store.call)"
    print(f"{api}, {'PostgreSQL' if a.pg else 'SQLite'}, n={a.n}, median of {a.repeat}")
    for name, xs in results.items():
        med = statistics.median(xs)
        print(f"  {name:18} {med * 1000:8.1f} ms  {med / a.n * 1e6:7.1f} us/call  (min {min(xs) * 1000:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
