"""Ack latency of /eagle over real HTTP on loopback (a script, not a test).

The bot runs in its own process, as it does in production: by default the real `eagle serve
--http PORT` (its default config but for a temporary audit store, a `local` host and access
for everyone; SLACK_API_URL pointed at the fake Web API), with --harness the Bolt app built
in-process by tests/support/slack_harness.py. This process plays Slack: it sends --n correctly
signed slash commands (`/eagle help` by default), --concurrency in flight, and answers the
bot's follow-up Web API and response_url calls with the fake Web API (on its own thread). It
prints p50 / p90 / p99 / max of the time from sending a command to receiving its ack, and the
bot's CPU time over the burst (its /proc stat: user + system, children excluded).
Targets: issue 13 p99 < 100 ms; issue 36 p99 < 60 ms for 200 `/eagle help`, 50 in flight, on
a quiet 2-core machine. It also prints the bot process's resident memory, idle and at its
peak under the load (issue 13: `eagle serve` RSS idle and under 200 concurrent runs).
--python runs `eagle serve` under another interpreter (another tree's virtualenv: before/after).

    .venv/bin/python tests/bench/bench_ack.py [--n 200] [--concurrency 50] [--text help] [--harness] [--python PY]
"""
from __future__ import annotations

import argparse
import contextlib
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

import aiohttp  # noqa: E402

from support.fakes.slack_api import FakeSlackAPI  # noqa: E402
from support.slack_harness import SECRET, TOKEN, command_body, open_harness, signed_headers  # noqa: E402
from support.sshd import free_port  # noqa: E402

EVERYONE = {"operators": ["*"], "approvers": ["*"], "viewers": ["*"]}


# -- the bot's process ---------------------------------------------------------------------

async def serve(api_url: str, workdir: str, playbooks: dict | None = None) -> None:
    fake = FakeSlackAPI()
    fake.root = api_url.rstrip("/").rsplit("/api", 1)[0]  # only its URLs are used here
    h = await open_harness(Path(workdir), fake, access=EVERYONE, **({"playbooks": playbooks} if playbooks else {}))
    print(f"URL {h.url}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    deadline = time.monotonic() + 60
    while (h.bot.ctx.tasks or h.bot.ctx.runs) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await h.close()


# -- the Slack side ------------------------------------------------------------------------

def start_fake() -> tuple[FakeSlackAPI, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    fake = FakeSlackAPI()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(fake.start())
        ready.set()
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    ready.wait(10)
    return fake, loop


async def load(url: str, fake: FakeSlackAPI, n: int, concurrency: int, text: str) -> tuple[list[float], dict, float]:
    sem = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def one(i: int, record: bool = True) -> None:
            body = command_body(text if record else "help", user="UBENCH", response_url=fake.response_url(f"b{i}"))
            headers = signed_headers(body)
            async with sem:
                t0 = time.perf_counter()
                async with session.post(url, data=body.encode(), headers=headers) as r:
                    await r.read()
                    if record:
                        latencies.append((time.perf_counter() - t0) * 1000)
                        statuses[r.status] = statuses.get(r.status, 0) + 1

        await one(-1, record=False)  # warm-up: the app's one auth.test, the connection
        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return latencies, statuses, time.perf_counter() - t0


@contextlib.contextmanager
def bot_process(script: str, fake: FakeSlackAPI) -> Iterator[tuple[str, subprocess.Popen, Path, Callable[[], None]]]:
    """`script --serve` in its own process (the bot): its URL, the process, its folder and a
    `stop` (closes its stdin and waits; also done when the block ends, before the folder goes)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        bot = subprocess.Popen([sys.executable, script, "--serve", fake.base_url, "--dir", d],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

        def stop() -> None:
            if not bot.stdin.closed:
                bot.stdin.close()
            bot.wait(90)

        try:
            line = bot.stdout.readline()
            if not line.startswith("URL "):
                raise SystemExit("the bot did not start")
            yield line.split()[1], bot, Path(d), stop
        finally:
            stop()


@contextlib.contextmanager
def eagle_serve(python: str, fake: FakeSlackAPI) -> Iterator[tuple[str, subprocess.Popen]]:
    """The real `eagle serve --http PORT` in a temporary folder: its URL and process (stopped
    with SIGTERM, as systemd does, when the block ends)."""
    import yaml

    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "eagle.yaml"
        cfg.write_text(yaml.safe_dump({"audit_db": "eagle.db", "hosts": {"local": {"transport": "local"}},
                                       "access": EVERYONE}))
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "EAGLE_CONFIG"))}
        env.update(SLACK_BOT_TOKEN=TOKEN, SLACK_API_URL=fake.base_url, SLACK_SIGNING_SECRET=SECRET)
        bot = subprocess.Popen([python, "-m", "eaglebot", "serve", "--config", str(cfg), "--http", str(port)],
                               cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if bot.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("eagle serve did not start")
                    time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/slack/events", bot
        finally:
            bot.send_signal(signal.SIGTERM)
            bot.wait(90)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def latency_report(latencies: list[float], statuses: dict[int, int], n: int, label: str) -> int:
    """Print p50/p90/p99/max/mean of `latencies` (ms) and PASS/FAIL (p99 < 100 ms, n answers
    of 200); the exit code."""
    xs = sorted(latencies)

    def p(q: float) -> float:
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]

    print(f"{label} ms: p50 {p(0.50):.1f}  p90 {p(0.90):.1f}  p99 {p(0.99):.1f}  max {xs[-1]:.1f}  "
          f"mean {statistics.mean(xs):.1f}")
    ok = p(0.99) < 100 and statuses.get(200) == n
    print("PASS: p99 < 100 ms" if ok else "FAIL: p99 >= 100 ms or non-200 answers")
    return 0 if ok else 1


def _status_kib(pid: int, field: str) -> int:
    """A field of /proc/PID/status in KiB (VmRSS: resident now; VmHWM: its peak)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--text", default="help", help="the /eagle text to send")
    ap.add_argument("--harness", action="store_true", help="the in-process Bolt app of tests/support/slack_harness.py")
    ap.add_argument("--python", default=sys.executable, help="the interpreter `eagle serve` runs under")
    ap.add_argument("--serve", metavar="API_URL", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        asyncio.run(serve(a.serve, a.dir))
        return 0

    fake, _loop = start_fake()
    with contextlib.ExitStack() as stack:
        if a.harness:
            url, bot, _, _stop = stack.enter_context(bot_process(__file__, fake))
        else:
            url, bot = stack.enter_context(eagle_serve(a.python, fake))
        idle_kib = _status_kib(bot.pid, "VmRSS")
        cpu0 = cpu_s(bot.pid)
        latencies, statuses, wall = asyncio.run(load(url, fake, a.n, a.concurrency, a.text))
        cpu = cpu_s(bot.pid) - cpu0
        peak_kib = _status_kib(bot.pid, "VmHWM")
        print(f"`eagle serve` RSS: idle {idle_kib / 1024:.1f} MiB, peak under the load {peak_kib / 1024:.1f} MiB")
    print(f"{'harness' if a.harness else 'eagle serve --http'} under {a.python}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"/eagle {a.text!r}: {a.n} signed requests, {a.concurrency} in flight, {wall:.2f}s wall, "
          f"bot CPU {cpu * 1000:.0f} ms ({cpu * 1000 / a.n:.2f} ms a request, the warm-up's included), "
          f"HTTP statuses {statuses}")
    return latency_report(latencies, statuses, a.n, "ack latency")


if __name__ == "__main__":
    sys.exit(main())
