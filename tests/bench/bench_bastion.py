"""A fleet behind one bastion-like sshd: `eagle run hello -H all` on 1 and N host names (a
script, not a test).

    .venv/bin/python tests/bench/bench_bastion.py [--hosts 1,64,256,1024] [--rounds 1]

One loopback OpenSSH sshd configured as a bastion would be (`MaxStartups 10:30:100`,
`MaxSessions 10`: beyond 10 connections not yet logged in, it drops new ones) behind N host
names, one connection each, every host a range member inheriting `host_defaults`. Each size
is a fresh `eagle run hello -H all` process (connecting, the audit writes and the recap
included); prints its wall time, its ratio to one host, the bot's peak RSS (ru_maxrss of the
child), and the hosts that ended unreachable or failed, from `--json`. Targets (issue 20):
1,024 hosts <= 3x one host, peak RSS <= 400 MiB, 0 unreachable, 0 failed.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from support.sshd import start_sshd  # noqa: E402


def run_once(server, work: Path, n: int, extra: dict) -> dict:
    width = len(str(n))
    cfg = work / f"eagle-{n}.yaml"
    cfg.write_text(yaml.safe_dump({
        "audit_db": str(work / f"eagle-{n}.db"),
        "host_defaults": {k: v for k, v in server.host_config().items() if k != "address"},
        "hosts": {f"gpu-[{1:0{width}d}:{n:0{width}d}]" if n > 1 else "gpu-1": {"address": "127.0.0.1"}},
        **extra,
    }))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "eaglebot", "run", "hello", "-H", "all", "--json",
                           "--config", str(cfg)], capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    out, err = proc.stdout, proc.stderr
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: sizes go up, so it is this one's
    rss_mib = after.ru_maxrss / 1024
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        raise SystemExit(f"{n} hosts: no JSON (exit {proc.returncode}): {err.strip()[-2000:]}")
    hosts = doc.get("hosts") or [{"name": "gpu-1", "status": doc["status"]}]
    count = {s: sum(1 for h in hosts if h["status"] == s) for s in ("unreachable", "failed")}
    return {"n": n, "wall": wall, "rss": rss_mib, "cpu": cpu, "exit": proc.returncode, **count,
            "error": err.strip().splitlines()[-1] if proc.returncode else ""}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", default="1,64,256,1024")
    ap.add_argument("--max-startups", default="10:30:100")
    ap.add_argument("--max-sessions", type=int, default=10)
    ap.add_argument("--per-hop", type=int, default=None, help="max_connecting_per_jump (default: eaglebot's)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eagle-bastion-"))
    os.chmod(work, 0o755)
    server = start_sshd(work / "sshd", max_startups=a.max_startups, max_sessions=a.max_sessions)
    extra = {"max_connecting_per_jump": a.per_hop} if a.per_hop else {}
    try:
        print(f"`eagle run hello -H all`, one sshd (MaxStartups {a.max_startups}, MaxSessions {a.max_sessions}), "
              f"a fresh process each:")
        base = None
        for n in [int(x) for x in a.hosts.split(",")]:
            r = run_once(server, work, n, extra)
            base = base or r["wall"]
            print(f"  {n:5d} hosts: {r['wall']:6.2f} s ({r['wall'] / base:.2f}x one host), peak RSS "
                  f"{r['rss']:.0f} MiB, bot CPU {r['cpu']:.1f} s, exit {r['exit']}, {r['unreachable']} unreachable, {r['failed']} failed"
                  + (f"  [{r['error']}]" if r["error"] else ""), flush=True)
        bots = resource.getrusage(resource.RUSAGE_CHILDREN)
        server.stop()
        done = resource.getrusage(resource.RUSAGE_CHILDREN)
        # sshd's CPU (its sessions' too, reaped by it) is what a single loopback sshd adds
        print(f"  sshd CPU over all sizes: {(done.ru_utime + done.ru_stime) - (bots.ru_utime + bots.ru_stime):.1f} s "
              f"(bots: {bots.ru_utime + bots.ru_stime:.1f} s); {os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
