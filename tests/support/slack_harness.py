"""The Slack app over real HTTP on 127.0.0.1, against the fake Web API, for tests of the Slack
surface (signatures, retries, acks, payload shapes) and the bench; what a command decides is
tested through the chat test bot (eaglebot.testing.chat, tests/test_slack_handlers.py).

Requests are built and signed exactly as Slack does (frontends/slack/inmemory.py, which the
chat bot uses too); the audit store is a real SQLite file; playbooks are written into a
temporary playbooks_dir.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from eaglebot.config import load_settings
from eaglebot.frontends.services import Services
from eaglebot.sim import gpu_state, install_sim_bin
from eaglebot.frontends.slack.app import SlackBot, build_app
from eaglebot.frontends.slack import inmemory
from eaglebot.frontends.slack.client import make_client

from support.fakes.slack_api import FakeSlackAPI

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TOKEN = "xoxb-0000000000-test-token"
CHANNEL = "C0EAGLE"

PLAYBOOKS = {
    "hello": {
        "name": "hello", "description": "say hello",
        "inputs": {"greeting": {"type": "str", "default": "hello"}, "times": {"type": "int", "default": 1, "min": 1, "max": 5}},
        "steps": [{"name": "greet", "skill": "shell", "with": {"command": "echo {{ greeting }}", "changed": False}}],
        "always": [{"skill": "audit.note", "with": {"message": "done"}}],
    },
    "slow": {
        "name": "slow", "description": "waits until cancelled",
        "inputs": {"seconds": {"type": "float", "default": 60}},
        "steps": [{"name": "nap", "skill": "wait", "with": {"seconds": "{{ seconds }}"}},
                  {"name": "after", "skill": "shell", "with": {"command": "echo after"}}],
        "always": [{"name": "cleanup note", "skill": "audit.note", "with": {"message": "always ran"}}],
    },
    "fails": {
        "name": "fails", "description": "a step that fails with a log",
        "steps": [{"name": "boom", "skill": "shell",
                   "with": {"command": "echo starting with hf_abcdefghijklmnopqrstuvwxyz0123; "
                                           "echo 'Scheduler hit an exception: boom' >&2; exit 3"}},
                  {"name": "never", "skill": "shell", "with": {"command": "echo never"}}],
    },
    "marker": {
        "name": "marker", "description": "touches a file (to prove what ran)",
        "inputs": {"path": {"type": "str"}},
        "steps": [{"name": "touch", "skill": "shell", "with": {"command": "touch {{ path }}"}}],
    },
    "guarded": {
        "name": "guarded", "description": "asks before killing foreign processes",
        "steps": [{"name": "kill strangers", "skill": "gpu.cleanup", "confirm": True, "with": {"grace_s": 1}},
                  {"name": "after", "skill": "shell", "with": {"command": "echo after approval"}}],
    },
}


def _sim_gpu(sim_state: Path) -> None:
    if not (sim_state / "gpus.json").exists():
        gpu_state.init_state(sim_state, 1)


def start_foreign_gpu_holder(sim_state: Path) -> subprocess.Popen:
    """A real process the bot did not start, listed by the SIMULATED nvidia-smi as holding GPU 0."""
    _sim_gpu(sim_state)
    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    gpu_state.add_holder(sim_state, p.pid, 0, 4096)
    return p


def approval_message(fake):
    """The posted message with Approve/Deny buttons and its action value, or None yet."""
    for c in fake.ok_calls_to("chat.postMessage"):
        for b in c.blocks():
            if b.get("type") == "actions":
                return c, b["elements"][0]["value"]
    return None


def signed_headers(body: str, *, secret: str = SECRET, timestamp: int | None = None,
                   content_type: str = "application/x-www-form-urlencoded") -> dict[str, str]:
    return inmemory.signed_headers(body, secret, timestamp=timestamp, content_type=content_type)


def command_body(text: str, *, user: str = "UALICE", channel: str = CHANNEL, response_url: str = "") -> str:
    return inmemory.command_body(text, user=user, channel=channel, response_url=response_url)


def action_body(action_id: str, value: str, *, user: str, channel: str = CHANNEL, response_url: str = "",
                message_ts: str = "1700000001.000100") -> str:
    return inmemory.action_body(action_id, value, user=user, channel=channel, response_url=response_url,
                                message_ts=message_ts)


@dataclass
class SlackHarness:
    fake: FakeSlackAPI
    services: Services
    bot: SlackBot
    runner: web.AppRunner
    url: str
    session: aiohttp.ClientSession
    n: int = 0

    async def post(self, body: str, headers: dict[str, str]) -> tuple[int, str]:
        async with self.session.post(self.url, data=body.encode(), headers=headers) as r:
            return r.status, await r.text()

    async def command(self, text: str, *, user: str = "UALICE", channel: str = CHANNEL) -> tuple[int, dict]:
        """A signed slash command; returns the HTTP status and the ack's JSON ({} when empty)."""
        self.n += 1
        body = command_body(text, user=user, channel=channel, response_url=self.fake.response_url(f"c{self.n}"))
        status, raw = await self.post(body, signed_headers(body))
        if not raw.strip():
            return status, {}
        return status, (json.loads(raw) if raw.lstrip().startswith("{") else {"text": raw})

    def responses(self, n: int | None = None) -> list:
        """What the app sent to the response_url of command number n (default: the last one)."""
        name = f"c{self.n if n is None else n}"
        return [c for c in self.fake.calls if c.method == "response_url" and c.args.get("_name") == name]

    async def click(self, action_id: str, value: str, *, user: str) -> int:
        self.n += 1
        body = action_body(action_id, value, user=user, response_url=self.fake.response_url(f"c{self.n}"))
        status, _ = await self.post(body, signed_headers(body))
        return status

    async def wait_run(self, run_id: int, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            run = await self.services.store.call(lambda s: s.get_run(run_id))
            if run and run["status"] != "running":
                return run
            if time.monotonic() > deadline:
                raise AssertionError(f"run #{run_id} still running after {timeout}s")
            await asyncio.sleep(0.05)

    async def last_run_id(self, timeout: float = 30.0) -> int:
        """The newest run's id, once the command's background task has created it."""
        deadline = time.monotonic() + timeout
        while True:
            rows = await self.services.store.call(lambda s: s.history(limit=1))
            if rows:
                return rows[0]["id"]
            if time.monotonic() > deadline:
                raise AssertionError("no run was created")
            await asyncio.sleep(0.02)

    async def query(self, sql: str, args: list | None = None) -> list[dict]:
        """Read the audit store on its own thread (the test must not share the connection)."""
        return await self.services.store.call(lambda s: list(s.db.query(sql, args or [])))

    async def close(self) -> None:
        await self.session.close()
        await self.runner.cleanup()
        await self.bot.aclose(grace_s=10)
        await self.services.close()


async def open_harness(tmp_path: Path, fake: FakeSlackAPI, *, access: dict | str | None = None,
                       playbooks: dict | None = None, backoff_s: float = 0.01, **extra: Any) -> SlackHarness:
    sim = install_sim_bin(tmp_path / "sim-bin", tmp_path / "sim-state")
    _sim_gpu(tmp_path / "sim-state")
    pdir = tmp_path / "playbooks"
    pdir.mkdir(exist_ok=True)
    for name, pb in (playbooks or PLAYBOOKS).items():
        (pdir / f"{name}.yaml").write_text(yaml.safe_dump(pb, sort_keys=False))
    cfg = {"audit_db": str(tmp_path / "eagle.db"), "playbooks_dir": str(pdir),
           "slack": {"channel": CHANNEL, "api_url": fake.base_url, "progress_interval_s": 1.0},
           "access": access or {"operators": ["UALICE"], "approvers": ["UBOSS"], "viewers": ["*"]},
           "hosts": {"local": {"transport": "local", "vars": {"nvidia_smi": sim["nvidia_smi"]}}}}
    if access == "none":          # eagle.yaml without an access section (closed by default)
        del cfg["access"]
    cfg.update(extra)
    (tmp_path / "eagle.yaml").write_text(yaml.safe_dump(cfg))
    settings = load_settings(tmp_path / "eagle.yaml")
    services = await Services.open(settings)
    client = make_client(settings, TOKEN, backoff_s=backoff_s)
    bot = build_app(services, client=client, signing_secret=SECRET)
    runner = web.AppRunner(bot.app.web_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return SlackHarness(fake, services, bot, runner, f"http://127.0.0.1:{port}/slack/events",
                        aiohttp.ClientSession())
