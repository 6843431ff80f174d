"""Time `eagle history` on a large audit store (a script, not a test).

    python tests/bench/bench_history.py [--runs 100000] [--keep DIR]

Fills a temporary DB with N finished runs (3 steps and 2 metrics each, spread over 8
hosts and 4 playbooks, one rare host) by bulk insert, then times the history queries
the CLI makes, in-process and as `eagle history` (Store open + query + key metrics).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from eaglebot.frontends.cli.main import main
from eaglebot.history.loader import host_state
from eaglebot.history.view import load_history
from eaglebot.store import Store

HOSTS = [f"gpu-{i:02d}" for i in range(1, 8)]
RARE = "gpu-rare"
PLAYBOOKS = ["bench", "relaunch", "cleanup", "verify"]


def fill(store: Store, n: int) -> None:
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    runs, run_hosts, steps, metrics = [], [], [], []
    sid = 0
    for i in range(1, n + 1):
        host = RARE if i % 1000 == 0 else HOSTS[i % len(HOSTS)]
        pb = PLAYBOOKS[i % len(PLAYBOOKS)]
        start = (t0 + timedelta(minutes=5 * i)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        end = (t0 + timedelta(minutes=5 * i, seconds=90)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        runs.append((i, pb, "succeeded" if i % 17 else "failed", "ops", "schedule" if i % 3 == 0 else "cli",
                     1, "bench", json.dumps([host]), "{}", "{}", start, end, 0, 0))
        run_hosts.append((i, host))
        for k in range(3):
            sid += 1
            steps.append((sid, i, k, "steps", host, f"step {k}", "shell", "ok", "done", "", "{}", "{}", 1, 1000,
                          start, end))
        metrics.append((i, sid, host, "output_throughput", 90.0 + (i % 7), "tok/s", "higher"))
        metrics.append((i, sid, host, "median_ttft_ms", 40.0 + (i % 5), "ms", "lower"))
    db = store.db
    with store._tx():
        db.conn.executemany(
            "insert into runs (id, playbook, status, actor, origin, pid, hostname, hosts, inputs, vars, "
            "started_at, finished_at, dry_run, cancel_requested) values (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", runs)
        db.conn.executemany("insert into run_hosts (run_id, host) values (?,?)", run_hosts)
        db.conn.executemany(
            "insert into steps (id, run_id, idx, section, host, name, skill, status, summary, output, params, "
            "data, attempts, duration_ms, started_at, finished_at) values (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", steps)
        db.conn.executemany("insert into metrics (run_id, step_id, host, name, value, unit, better) "
                            "values (?,?,?,?,?,?,?)", metrics)
    db.execute("analyze")


def timed(fn, reps: int = 7) -> float:
    fn()  # warm the page cache
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1000


def cli_history(cfg: Path, *args: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(["history", *args, "--config", str(cfg)])
    assert rc == 0


def old_host_query(store: Store, host: str) -> list:
    return list(store.db.query(
        "select * from runs where exists (select 1 from json_each(runs.hosts) where value = $1) "
        "order by id desc limit 20", [host]))


def main_(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--keep", help="write the DB into this folder and keep it")
    a = ap.parse_args(argv)
    d = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="eagle-bench-"))
    d.mkdir(parents=True, exist_ok=True)
    try:
        cfg = d / "eagle.yaml"
        cfg.write_text(yaml.safe_dump({"audit_db": "bench.db", "hosts": {
            h: {"address": "127.0.0.1"} for h in HOSTS + [RARE]}}))
        store = Store(d / "bench.db")
        t = time.perf_counter()
        fill(store, a.runs)
        fill_s = time.perf_counter() - t
        size = (d / "bench.db").stat().st_size / 1e6
        print(f"filled {a.runs} runs ({3 * a.runs} steps, {2 * a.runs} metrics) in {fill_s:.1f}s, {size:.0f} MB")

        def cli_like(**kw):
            load_history(store, **kw)

        rows = [
            ("Store.history() + key metrics (20 rows)", lambda: cli_like()),
            ("Store.history(host=gpu-03)", lambda: cli_like(host="gpu-03")),
            (f"Store.history(host={RARE}) (1 run in 1000)", lambda: cli_like(host=RARE)),
            ("Store.history(host=nope) (no runs)", lambda: cli_like(host="nope")),
            ("Store.history(playbook=bench)", lambda: cli_like(playbook="bench")),
            ("Store.history(playbook=bench, host=gpu-03)", lambda: cli_like(playbook="bench", host="gpu-03")),
            ("  old json_each host filter (gpu-03), for comparison", lambda: old_host_query(store, "gpu-03")),
            (f"  old json_each host filter ({RARE}), for comparison", lambda: old_host_query(store, RARE)),
            ("  old json_each host filter (nope), for comparison", lambda: old_host_query(store, "nope")),
            ("metric_history(bench, gpu-04, output_throughput)",
             lambda: store.metric_history("bench", "gpu-04", "output_throughput", before_run=a.runs, limit=10)),
            ("host_state(gpu-03, last run) (fingerprint, no earlier one)",
             lambda: host_state(store, "gpu-03", a.runs)),
            ("`eagle history` (CLI, in-process: open store + query + print)", lambda: cli_history(cfg)),
            ("`eagle history --host gpu-03`", lambda: cli_history(cfg, "--host", "gpu-03")),
            (f"`eagle history --host {RARE}`", lambda: cli_history(cfg, "--host", RARE)),
            ("`eagle history --json --limit 200`", lambda: cli_history(cfg, "--json", "--limit", "200")),
        ]
        width = max(len(r[0]) for r in rows)
        for label, fn in rows:
            print(f"{label.ljust(width)}  {timed(fn):8.2f} ms")
        store.close()
    finally:
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main_())
