"""Streamed output survives a busy store: 20 concurrent runs while another process keeps
taking the write lock; every step's stored `output` is exactly what its command printed."""
from __future__ import annotations

import json
import sqlite3
import threading
import time

from eaglebot.engine.runner import RunRequest
from support.gpu_helpers import playbook

LINES = 120


def _book(tag: str):
    cmd = (f"for i in $(seq 1 {LINES // 2}); do echo {tag}-a$i; done; sleep 0.6; "
           f"for i in $(seq 1 {LINES // 2}); do echo {tag}-b$i; done")
    return playbook(json.dumps({"name": "stream", "steps": [
        {"name": "one", "skill": "shell", "with": {"command": cmd, "changed": False}},
        {"name": "two", "skill": "shell", "with": {"command": cmd.replace("-a", "-c").replace("-b", "-d"),
                                                   "changed": False}}]}))


def _hog(db, stop: threading.Event) -> int:
    """Another writer: holds the DB's write lock for 150 ms at a time (a busy DB)."""
    n = 0
    conn = sqlite3.connect(db, timeout=30, isolation_level=None)
    while not stop.is_set():
        conn.execute("BEGIN IMMEDIATE")
        time.sleep(0.15)
        conn.execute("COMMIT")
        n += 1
        time.sleep(0.02)
    conn.close()
    return n


async def test_twenty_concurrent_runs_lose_no_output_under_a_busy_db(services):
    import asyncio

    hosts = {f"h{i}": {"transport": "local"} for i in range(20)}
    svc = await services(hosts)
    stop = threading.Event()
    held = {}
    hog = threading.Thread(target=lambda: held.setdefault("n", _hog(svc.settings.db_path, stop)))
    hog.start()
    try:
        outs = await asyncio.gather(*(svc.engine.run(RunRequest(playbook=_book(f"r{i}"), hosts=[f"h{i}"]))
                                      for i in range(20)))
    finally:
        stop.set()
        hog.join()
    assert held["n"] > 3  # the store really was busy while the runs streamed
    for i, out in enumerate(outs):
        assert out.status == "succeeded", out.error
        steps = await svc.store.call(lambda s: s.steps(out.run_id))
        assert [s["status"] for s in steps] == ["ok", "ok"]
        for s, (x, y) in zip(steps, [("a", "b"), ("c", "d")]):
            want = [f"r{i}-{x}{n}" for n in range(1, LINES // 2 + 1)] + [f"r{i}-{y}{n}" for n in range(1, LINES // 2 + 1)]
            got = [ln for ln in s["output"].splitlines() if ln.startswith(f"r{i}-")]
            assert got == want, (s["name"], len(got))
