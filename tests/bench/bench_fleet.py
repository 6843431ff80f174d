"""Fan-out: five `sleep 0.2` steps on 1, 8, 32 and 64 hosts (a script, not a test).

    .venv/bin/python tests/bench/bench_fleet.py [--hosts 1,8,32,64] [--rounds 3]

One loopback OpenSSH sshd (MaxStartups 64:30:128, MaxSessions 32, as tests/support/sshd.py starts
it) behind many host names, one connection per host name, audit writes included; the
first run of each size opens the connections (`cold`), the next ones reuse them (`warm`).
Prints each size's wall time and its ratio to one host. Target (issue 13): 64 hosts <= 2x
one host. With `ansible-playbook` installed, the same job with forks=64 alongside.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from bench_engine import ansible_playbook_s  # noqa: E402
from support.sshd import start_sshd  # noqa: E402

from eaglebot.config import load_settings  # noqa: E402
from eaglebot.engine.playbook import parse_playbook  # noqa: E402
from eaglebot.engine.runner import RunRequest  # noqa: E402
from eaglebot.frontends.services import Services  # noqa: E402

BOOK = "name: fleet\nsteps:\n" + "".join(f"  - {{name: s{i}, skill: shell, with: {{command: 'sleep 0.2'}}}}\n"
                                          for i in range(5))


async def bench(server, work: Path, n: int, rounds: int) -> tuple[float, list[float]]:
    hosts = {f"h{i:03d}": server.host_config() for i in range(n)}
    cfg = work / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": str(work / f"eagle-{n}.db"), "hosts": hosts}))
    svc = await Services.open(load_settings(cfg))
    book = parse_playbook(BOOK, "bench")
    try:
        async def once() -> float:
            t0 = time.perf_counter()
            out = await svc.engine.run(RunRequest(playbook=book, hosts=list(hosts)))
            assert out.status == "succeeded", out.error
            return time.perf_counter() - t0
        cold = await once()
        return cold, [await once() for _ in range(rounds)]
    finally:
        await svc.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", default="1,8,32,64")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eagle-fleet-"))
    os.chmod(work, 0o755)
    server = start_sshd(work / "sshd")
    try:
        base = None
        print(f"five `sleep 0.2` steps per host, median of {a.rounds} warm runs [min-max]:")
        for n in [int(x) for x in a.hosts.split(",")]:
            cold, warm = await bench(server, work, n, a.rounds)
            med = statistics.median(warm)
            base = base or med
            print(f"  {n:3d} hosts: {med:6.2f} s [{min(warm):.2f}-{max(warm):.2f}]  ({med / base:.2f}x one host); "
                  f"first run, connecting: {cold:.2f} s ({cold / base:.2f}x)")
            ans = (ansible_playbook_s(server, work, [f"h{i:03d}" for i in range(n)], ["sleep 0.2"] * 5, forks=64)
                   if n == 64 else None)
            if ans is not None:
                print(f"      ansible-playbook forks=64: {ans:.2f} s ({ans / base:.1f}x)")
        if not shutil.which("ansible-playbook"):
            print("  ansible-playbook: not installed (pip install ansible-core to compare)")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
