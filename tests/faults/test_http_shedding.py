"""`eagle serve --http` sheds slow clients (issue 35, item 5): a real `eagle serve` process
under a low open-files limit (256, as `prlimit` sets it), more trickling connections than it
has descriptors: it answers `/eagle help` and runs `/eagle hello` (posting to Slack's API, which
needs descriptors of its own) while they hang, cuts every one of them (a head late, a body
late, over the cap), and never runs out of descriptors. The numbers of the full attack (1,100
connections, a byte every 8 s, systemd's default limit) are tests/bench/bench_trickle.py's."""
from __future__ import annotations

import asyncio
import shutil
import sys

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.slack_harness import SECRET, TOKEN, command_body, signed_headers
from support.sshd import free_port
from test_ops_serve import finished, write_config
from test_serve import stop, wait_serving

LIMIT = 256    # open files: the connection cap is then 128 (64 kept for the bot, two bursts of 32 accepts)


async def _serve(cfg, fake, port: int, mport: int):
    import os

    assert shutil.which("prlimit"), "util-linux's prlimit is needed (it is in every Debian/Ubuntu base image)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    env.update(SLACK_BOT_TOKEN=TOKEN, SLACK_API_URL=fake.base_url, SLACK_SIGNING_SECRET=SECRET)
    return await asyncio.create_subprocess_exec(
        "prlimit", f"--nofile={LIMIT}:{LIMIT}", sys.executable, "-m", "eaglebot", "serve", "--config", str(cfg),
        "--http", str(port), env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)


async def _trickler(port: int, first: bytes) -> asyncio.StreamReader:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(first)
    await writer.drain()
    reader._eagle_writer = writer  # type: ignore[attr-defined]  # kept alive with its reader
    return reader


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Until the server closes (EOF, or a reset); never sends more."""
    try:
        while await reader.read(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    return True


async def _help(port: int, fake, name: str) -> str:
    """`/eagle help`, acked 200; the help as it reaches the user (through the response_url)."""
    body = command_body("help", response_url=fake.response_url(name))
    async with aiohttp.ClientSession() as s:
        async with s.post(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                          headers=signed_headers(body)) as r:
            assert r.status == 200
            ack = await r.text()
    if "playbooks" in ack:
        return ack
    calls = await fake.wait_for(lambda: [c for c in fake.calls if c.method == "response_url"
                                         and c.args.get("_name") == name], timeout=60)
    return calls[0].all_text()


@pytest.mark.e2e  # a real serve under a trickle attack
async def test_more_trickling_clients_than_descriptors_are_shed_and_the_bot_answers(tmp_path, fake):
    mport = free_port()
    cfg, _ = write_config(tmp_path, {"local": {"transport": "local"}}, metrics_port=mport)
    port = free_port()
    proc = await _serve(cfg, fake, port, mport)
    held: list[asyncio.StreamReader] = []
    try:
        await wait_serving(port, proc)
        # twice the descriptors it has, each with a byte of a request head and nothing more
        for i in range(2 * LIMIT):
            held.append(await _trickler(port, b"P"))
        # a head in full, then a body that never comes
        held.append(await _trickler(port, b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\nab"))
        assert "playbooks" in await _help(port, fake, "help1")
        body = command_body("hello", response_url=fake.response_url("under-attack"))
        async with aiohttp.ClientSession() as s:
            async with s.post(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                              headers=signed_headers(body)) as r:
                assert r.status == 200
        # the run's summary went out through Slack's API: the bot's own sockets still open
        await fake.wait_for(lambda: finished(fake, 1), timeout=60)
        # every slow connection is cut by the server (late head, late body, or over the cap)
        assert all(await asyncio.wait_for(asyncio.gather(*(_closed_by_server(r) for r in held)), 120))
        assert "playbooks" in await _help(port, fake, "help2")
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{mport}/metrics") as r:
                text = await r.text()
        shed = {s.labels["reason"]: s.value for fam in text_string_to_metric_families(text)
                for s in fam.samples if s.name == "eagle_http_shed_total"}
        assert shed.get("over the connection cap", 0) >= LIMIT, shed
        assert shed.get("its request's body was not in within 10s") == 1, shed
        assert sum(shed.values()) >= 2 * LIMIT + 1 - 128, shed
    finally:
        for r in held:
            r._eagle_writer.close()  # type: ignore[attr-defined]
        rc, err = await stop(proc)
    assert rc == 0, err
    assert "Too many open files" not in err and "Traceback" not in err, err[-2000:]
    assert err.count("shed ") <= 3, err[-2000:]   # one line a minute, not one per connection


@pytest.mark.parametrize("first", [b"POST /slack/events HTTP/1.1\r\nHost: x\r\n", b"G"])
async def test_a_head_that_does_not_come_in_time_is_cut(tmp_path, fake, first):
    cfg, _ = write_config(tmp_path, {"local": {"transport": "local"}})
    port, proc = free_port(), None
    try:
        proc = await _serve(cfg, fake, port, free_port())
        await wait_serving(port, proc)
        reader = await _trickler(port, first)
        assert await asyncio.wait_for(_closed_by_server(reader), 60)
        reader._eagle_writer.close()  # type: ignore[attr-defined]
        assert "playbooks" in await _help(port, fake, "help")
    finally:
        if proc is not None:
            rc, err = await stop(proc)
            assert rc == 0, err
