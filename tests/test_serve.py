"""`eagle serve` as a real process: HTTP mode and Socket Mode against the fake Slack."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time


from support.slack_harness import CHANNEL, PLAYBOOKS, SECRET, TOKEN, command_body, signed_headers
from support.sshd import free_port

import aiohttp
import yaml


def write_config(tmp_path):
    pdir = tmp_path / "playbooks"
    pdir.mkdir()
    (pdir / "hello.yaml").write_text(yaml.safe_dump(PLAYBOOKS["hello"]))
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": "eagle.db", "playbooks_dir": "playbooks",
                                   "access": {"operators": ["UALICE"], "viewers": ["*"], "approvers": ["UALICE"]}}))
    return cfg


async def start_serve(cfg, fake, *args, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    full.update(SLACK_BOT_TOKEN=TOKEN, SLACK_API_URL=fake.base_url, **env)
    return await asyncio.create_subprocess_exec(sys.executable, "-m", "eaglebot", "serve", "--config", str(cfg),
                                                *args, env=full, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)


async def wait_serving(port: int, proc, timeout: float = 30) -> None:
    """Until `eagle serve --http PORT` accepts connections (it must not have exited)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert proc.returncode is None and time.monotonic() < deadline, "eagle serve did not start"
            await asyncio.sleep(0.1)


async def stop(proc) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, err.decode(errors="replace")


async def test_eagle_serve_http_binds_loopback_answers_signed_commands_and_stops_cleanly(tmp_path, fake):
    cfg = write_config(tmp_path)
    port = free_port()
    proc = await start_serve(cfg, fake, "--http", str(port), SLACK_SIGNING_SECRET=SECRET)
    try:
        await wait_serving(port, proc)
        body = command_body("hello greeting=served", response_url=fake.response_url("x"))
        async with aiohttp.ClientSession() as s:
            async with s.post(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                              headers=signed_headers(body)) as r:
                assert r.status == 200
        summary = await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.postMessage")
                                               if "finished" in c.all_text()])
        assert "succeeded" in summary[0].all_text()
        # a liveness check for a load balancer or systemd: no credential, nothing secret in the answer
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert r.status == 200 and r.content_type == "application/json"
                text = await r.text()
        from eaglebot import __version__
        assert yaml.safe_load(text) == {"status": "ok", "service": "eaglebot", "version": __version__}
        assert TOKEN not in text and SECRET not in text
    finally:
        rc, err = await stop(proc)
    assert rc == 0, err
    assert TOKEN not in err and SECRET not in err


async def test_eagle_serve_socket_mode_connects_with_the_app_token(tmp_path, fake):
    cfg = write_config(tmp_path)
    proc = await start_serve(cfg, fake, SLACK_APP_TOKEN="xapp-1-serve-test-token")
    try:
        ack = await fake.ws_send({"envelope_id": "s1", "type": "slash_commands", "accepts_response_payload": True,
                                  "payload": {"command": "/eagle", "text": "hello", "user_id": "UALICE",
                                              "channel_id": CHANNEL, "team_id": "T0EAGLE",
                                              "response_url": fake.response_url("s1")}})
        assert ack["envelope_id"] == "s1"
        await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.postMessage")
                                     if "finished" in c.all_text()])
        assert fake.calls_to("apps.connections.open")[0].headers["Authorization"] == "Bearer xapp-1-serve-test-token"
    finally:
        rc, err = await stop(proc)
    assert rc == 0, err


async def test_eagle_serve_without_tokens_says_what_to_set(tmp_path, fake):
    cfg = write_config(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "eaglebot", "serve", "--config", str(cfg),
                                                env=env, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2 and "SLACK_BOT_TOKEN is not set" in err.decode()
