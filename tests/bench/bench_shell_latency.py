"""Commands over a network with latency (a channel per command), per step and in a fan-out.

The measurement that retired `shell: persistent` (one long-lived sh per channel; the numbers
and the decision: docs/benchmarks.md; the two-mode version of this script: commit 06b333a).
What a real fleet adds to loopback is round trips. This machine's kernel has no `sch_netem` (`tc qdisc ... netem`
answers "Specified qdisc kind is unknown"), so the latency is a TCP proxy on 127.0.0.1 in front
of the real sshd that holds every chunk for RTT/2 in each direction (order kept, bytes
untouched): what the SSH client sees is a link with that round-trip time.

    .venv/bin/python tests/bench/bench_shell_latency.py [--rtt-ms 0,20,50] [--steps 20] [--hosts 16]

Run as root (it creates the sshd's test user).
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

from support.sshd import start_sshd  # noqa: E402

from eaglebot.config import load_settings  # noqa: E402
from eaglebot.engine.playbook import parse_playbook  # noqa: E402
from eaglebot.engine.runner import RunRequest  # noqa: E402
from eaglebot.frontends.services import Services  # noqa: E402


class DelayProxy:
    """127.0.0.1:port -> target, each chunk delivered `one_way_s` after it was read."""

    def __init__(self, target_port: int, one_way_s: float) -> None:
        self.target_port, self.delay = target_port, one_way_s
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        q: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await q.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                w.write(data)
                await w.drain()
            w.close()

        sender = asyncio.create_task(deliver())
        try:
            while True:
                data = await r.read(65536)
                q.put_nowait((time.monotonic() + self.delay, data))
                if not data:
                    break
        finally:
            await sender

    async def _client(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        sr, sw = await asyncio.open_connection("127.0.0.1", self.target_port)
        try:
            await asyncio.gather(self._pipe(cr, sw), self._pipe(sr, cw), return_exceptions=True)
        except asyncio.CancelledError:     # the proxy stopped under an open connection
            for w in (cw, sw):
                w.close()


async def timed_run(work: Path, hosts: dict[str, dict], steps: int) -> float:
    """Seconds of one run of `steps` shell steps on every host (after a warm-up run that
    connects), audit writes included."""
    cfg = work / "eagle.yaml"
    (work / "eagle.db").unlink(missing_ok=True)
    cfg.write_text(yaml.safe_dump({"audit_db": str(work / "eagle.db"), "hosts": hosts}))
    svc = await Services.open(load_settings(cfg))
    body = "\n".join(f"  - {{name: s{i}, skill: shell, with: {{command: 'true'}}}}" for i in range(steps))
    book = parse_playbook(f"name: steps\nsteps:\n{body}\n", "bench")
    try:
        await svc.engine.run(RunRequest(playbook=book, hosts=list(hosts)))
        t0 = time.perf_counter()
        out = await svc.engine.run(RunRequest(playbook=book, hosts=list(hosts)))
        took = time.perf_counter() - t0
        assert out.status == "succeeded", out.error
        return took
    finally:
        await svc.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rtt-ms", default="0,20,50")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--hosts", type=int, default=16, help="hosts of the fan-out (all the same sshd)")
    ap.add_argument("--fanout-steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eagle-bench-rtt-"))
    os.chmod(work, 0o755)
    server = start_sshd(work / "sshd")
    try:
        print(f"`true` steps over the real sshd behind a delay proxy; median of {args.rounds} rounds [min-max]")
        for rtt in [int(x) for x in args.rtt_ms.split(",")]:
            proxy = DelayProxy(server.port, rtt / 2000.0)
            await proxy.start()
            kh = work / f"known_hosts-{proxy.port}"
            kh.write_text(f"[127.0.0.1]:{proxy.port} {server.host_pub}\n")
            try:
                def host(**extra: object) -> dict:
                    return dict(server.host_config(port=proxy.port, known_hosts=str(kh)), **extra)

                one = [await timed_run(work, {"box": host()}, args.steps) for _ in range(args.rounds)]
                fan = [await timed_run(work, {f"h{i:02d}": host(address="127.0.0.1") for i in range(args.hosts)},
                                       args.fanout_steps) for _ in range(args.rounds)]
                per = [t / args.steps * 1000 for t in one]
                print(f"  RTT {rtt:3d} ms  {statistics.median(per):7.1f} ms/step "
                      f"[{min(per):.1f}-{max(per):.1f}]   fan-out {args.hosts} hosts x {args.fanout_steps} steps: "
                      f"{statistics.median(fan):5.2f} s [{min(fan):.2f}-{max(fan):.2f}]", flush=True)
            finally:
                await proxy.stop()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
