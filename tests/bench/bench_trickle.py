"""The trickle attack on `eagle serve --http` (a script, not a test; issue 35, item 5).

A real `eagle serve --http` process under systemd's default open-files limit (1,024, soft and
hard: `prlimit --nofile=1024:1024`, so it cannot raise its own), on loopback. 1,100 attacker
connections each send one byte of a request head every 8 s and, as slowloris does, open a
new connection at their next tick when the bot has cut them (`--reconnect now`: at once).
Meanwhile a user sends `/eagle help` every 100 ms (each on a new connection)
and `/eagle hello` every 5 s (its summary goes out through Slack's API: the bot's own sockets).
Measured: the ack latency of `/eagle help` (p50/p99/max) and of its answer through the
response_url, failed requests, runs whose summary never reached Slack, the most descriptors
the bot held, connections it shed, and `Too many open files` lines in its log.
Targets: help answered throughout, p99 < 1 s, no descriptor exhaustion.

    .venv/bin/python tests/bench/bench_trickle.py [--seconds 60] [--attackers 1100] [--limit 1024]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp  # noqa: E402
import yaml  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bench_ack import start_fake  # noqa: E402
from support.fakes.slack_api import FakeSlackAPI  # noqa: E402
from support.slack_harness import PLAYBOOKS, SECRET, TOKEN, command_body, signed_headers  # noqa: E402
from support.sshd import free_port  # noqa: E402


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


class Attack:
    def __init__(self, port: int, n: int, every_s: float, at_once: bool):
        self.port, self.n, self.every_s, self.at_once = port, n, every_s, at_once
        self.opened = self.cut = self.refused = 0
        self.stop = asyncio.Event()

    async def one(self) -> None:
        while not self.stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                self.refused += 1
                await asyncio.sleep(0.1)
                continue
            self.opened += 1
            try:
                head = b"POST /slack/events HTTP/1.1\r\n"
                i = 0
                while not self.stop.is_set():
                    writer.write(head[i % len(head):i % len(head) + 1])
                    await writer.drain()
                    i += 1
                    try:   # the bot cutting it shows as EOF or a reset while we wait
                        if await asyncio.wait_for(reader.read(1), self.every_s) == b"":
                            break
                    except asyncio.TimeoutError:
                        continue
            except (ConnectionError, OSError):
                pass
            finally:
                self.cut += 1
                writer.close()
            if not self.at_once:
                await asyncio.sleep(self.every_s)

    async def run(self) -> None:
        await asyncio.gather(*(self.one() for _ in range(self.n)), return_exceptions=True)


async def probe(port: int, fake: FakeSlackAPI, fake_loop: asyncio.AbstractEventLoop, seconds: float,
                attack: Attack, bot_pid: int) -> dict:
    url = f"http://127.0.0.1:{port}/slack/events"
    acks: list[float] = []
    answers: list[float] = []
    failures: list[str] = []
    runs = 0
    fds_max = 0
    sent: dict[str, float] = {}
    end = time.monotonic() + seconds
    i = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True),
                                     timeout=aiohttp.ClientTimeout(total=10)) as s:
        while time.monotonic() < end:
            i += 1
            text = "hello" if i % 50 == 0 else "help"
            name = f"p{i}"
            body = command_body(text, response_url=fake.response_url(name))
            t0 = time.monotonic()
            sent[name] = t0
            try:
                async with s.post(url, data=body.encode(), headers=signed_headers(body)) as r:
                    await r.read()
                    if r.status != 200:
                        failures.append(f"HTTP {r.status}")
                    elif text == "help":
                        acks.append((time.monotonic() - t0) * 1000)
                    else:
                        runs += 1
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                failures.append(type(e).__name__)
            try:
                fds_max = max(fds_max, len(os.listdir(f"/proc/{bot_pid}/fd")))
            except OSError:
                pass
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
        await asyncio.sleep(5)   # the last answers through the response_url
    for c in list(fake.calls):
        if c.method == "response_url" and c.args.get("_name") in sent and "playbooks" in c.all_text():
            answers.append((c.at - sent[c.args["_name"]]) * 1000)
    summaries = len([c for c in fake.ok_calls_to("chat.postMessage") if "finished" in c.all_text()])
    return {"acks": acks, "answers": answers, "failures": failures, "runs": runs, "summaries": summaries,
            "fds_max": fds_max, "helps": i - i // 50}


async def scrape(mport: int) -> dict[str, float]:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{mport}/metrics") as r:
            text = await r.text()
    return {smp.labels["reason"]: smp.value for fam in text_string_to_metric_families(text)
            for smp in fam.samples if smp.name == "eagle_http_shed_total"}


async def bench(seconds: float, attackers: int, limit: int, every_s: float, at_once: bool) -> int:
    fake, fake_loop = start_fake()
    d = Path(tempfile.mkdtemp(prefix="eagle-trickle-"))
    (d / "playbooks").mkdir()
    (d / "playbooks" / "hello.yaml").write_text(yaml.safe_dump(PLAYBOOKS["hello"]))
    port, mport = free_port(), free_port()
    (d / "eagle.yaml").write_text(yaml.safe_dump({
        "audit_db": "eagle.db", "playbooks_dir": "playbooks", "metrics_port": mport,
        "access": {"operators": ["UALICE"], "viewers": ["*"], "approvers": ["UALICE"]}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    env.update(SLACK_BOT_TOKEN=TOKEN, SLACK_API_URL=fake.base_url, SLACK_SIGNING_SECRET=SECRET)
    err = open(d / "serve.log", "w")
    bot = subprocess.Popen(["prlimit", f"--nofile={limit}:{limit}", sys.executable, "-m", "eaglebot", "serve",
                            "--config", str(d / "eagle.yaml"), "--http", str(port)], env=env,
                           stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                assert bot.poll() is None and time.monotonic() < deadline, "eagle serve did not start"
                await asyncio.sleep(0.1)
        attack = Attack(port, attackers, every_s, at_once)
        task = asyncio.create_task(attack.run())
        await asyncio.sleep(min(10.0, seconds / 4))   # every attacker connected and trickling
        result = await probe(port, fake, fake_loop, seconds, attack, bot.pid)
        shed = await scrape(mport)
        attack.stop.set()
        await asyncio.wait_for(task, 60)
    finally:
        bot.send_signal(signal.SIGTERM)
        bot.wait(90)
        err.close()
    log = (d / "serve.log").read_text(errors="replace")
    emfile = log.count("Too many open files")
    acks, answers = result["acks"], result["answers"]
    print(f"{attackers} attackers, a byte every {every_s:g} s, reconnecting {'at once' if at_once else 'at the next tick'} "
          f"when cut; the bot under "
          f"--nofile={limit}:{limit}; {seconds:g} s measured")
    print(f"attacker connections opened {attack.opened}, cut by the bot {attack.cut}, refused by the kernel "
          f"{attack.refused}; shed by the bot: {dict(sorted(shed.items()))}")
    print(f"/eagle help: {len(acks)} of {result['helps']} acked 200; ack ms p50 {_pct(acks, .5):.1f} "
          f"p99 {_pct(acks, .99):.1f} max {max(acks, default=float('nan')):.1f}; answer via response_url ms "
          f"p50 {_pct(answers, .5):.1f} p99 {_pct(answers, .99):.1f} ({len(answers)} answers)")
    print(f"/eagle hello: {result['runs']} runs started, {result['summaries']} summaries posted to Slack; "
          f"failed requests {len(result['failures'])} {sorted(set(result['failures']))}")
    print(f"descriptors held by the bot: at most {result['fds_max']} of {limit}; "
          f"'Too many open files' in its log: {emfile}; log {len(log) / 1024:.0f} KiB")
    ok = (len(acks) == result["helps"] and _pct(acks, .99) < 1000 and emfile == 0 and not result["failures"]
          and result["summaries"] >= result["runs"] and result["fds_max"] < limit)
    print("PASS: help answered throughout, p99 < 1 s, no descriptor exhaustion" if ok else "FAIL")
    shutil.rmtree(d, ignore_errors=True)
    fake_loop.call_soon_threadsafe(fake_loop.stop)
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--attackers", type=int, default=1100)
    ap.add_argument("--limit", type=int, default=1024)
    ap.add_argument("--every", type=float, default=8.0, help="seconds between an attacker's bytes")
    ap.add_argument("--reconnect", choices=["tick", "now"], default="tick")
    a = ap.parse_args()
    return asyncio.run(bench(a.seconds, a.attackers, a.limit, a.every, a.reconnect == "now"))


if __name__ == "__main__":
    sys.exit(main())
