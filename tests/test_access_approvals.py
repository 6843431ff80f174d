"""Access closed by default, no self-approval, and pending approvals that survive a restart
(`eagle serve` as a real process, killed for real, against the fake Slack Web API)."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import sys
import time

import aiohttp
import yaml

from support.helpers import eagle
from support.slack_harness import (CHANNEL, PLAYBOOKS, SECRET, TOKEN, action_body, command_body,
                           approval_message, signed_headers)
from support.sshd import free_port

from eaglebot.config import AccessConfig
from eaglebot.frontends.chat.access import authorize, authorize_approval, command_class
from eaglebot.frontends.chat.grammar import Command, parse
from eaglebot.frontends.slack import blocks as bk
from eaglebot.sim import install_sim_bin


# -- pure access rules --------------------------------------------------------------------------

def test_without_an_access_section_slack_users_may_view_but_operate_nothing():
    access = AccessConfig()
    views = [parse(t) for t in ("history", "show 3", "status", "logs gpu-01", "schedule", "trend bench gpu-01 x")]
    for cmd in views + [Command("diff", ("1", "2"))]:
        assert authorize(access, cmd, "UANY", configured=False) is None, cmd
    operations = [parse(t) for t in ("relaunch gpu-01", "cancel 3", "rerun 3", "baseline set 3", "schedule pause n",
                                     "schedule resume n")]
    for cmd in operations + [Command("ack", ("3", "tput", "why")), Command("sweep", ("bench",))]:
        why = authorize(access, cmd, "UANY", configured=False)
        assert why and "access.operators in eagle.yaml" in why and "no `access` section" in why, cmd
    assert "access.approvers in eagle.yaml" in authorize_approval(access, "UANY", "UOTHER", configured=False)


def test_a_new_command_word_is_classified_by_its_set():
    assert command_class(Command("diff", ("1", "2"))) == "view"
    assert command_class(Command("bisect", ("1", "2", "h"))) == "operate"
    assert command_class(parse("schedule")) == "view"
    assert command_class(parse("schedule resume nightly")) == "operate"
    assert command_class(parse("help")) == "free"


def test_requester_cannot_approve_their_own_run_unless_self_approval_is_on():
    access = AccessConfig(operators=["UA"], approvers=["UA", "UB"])
    assert "cannot approve its confirm steps yourself" in authorize_approval(access, "UA", "UA")
    assert authorize_approval(access, "UB", "UA") is None
    assert authorize_approval(AccessConfig(approvers=["UA"], self_approval=True), "UA", "UA") is None


# -- doctor ------------------------------------------------------------------------------------

def test_doctor_warns_when_access_is_not_configured(tmp_path):
    (tmp_path / "eagle.yaml").write_text(yaml.safe_dump({"audit_db": "eagle.db"}))
    res = eagle("doctor", config=tmp_path / "eagle.yaml")
    assert "no `access` section" in res.stdout + res.stderr


# -- restart ------------------------------------------------------------------------------------

async def _serve(cfg, fake, port):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    env.update(SLACK_BOT_TOKEN=TOKEN, SLACK_API_URL=fake.base_url, SLACK_SIGNING_SECRET=SECRET)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "eaglebot", "serve", "--config", str(cfg),
                                                "--http", str(port), env=env, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            assert proc.returncode is None and time.monotonic() < deadline, "eagle serve did not start"
            await asyncio.sleep(0.1)


async def test_a_pending_approval_expires_visibly_after_a_restart_and_kills_nothing(tmp_path, fake, stranger):
    sim = install_sim_bin(tmp_path / "sim-bin", tmp_path / "sim-state")
    pdir = tmp_path / "playbooks"
    pdir.mkdir()
    (pdir / "guarded.yaml").write_text(yaml.safe_dump(PLAYBOOKS["guarded"]))
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({
        "audit_db": "eagle.db", "playbooks_dir": "playbooks", "slack": {"channel": CHANNEL},
        "access": {"operators": ["UALICE"], "approvers": ["UBOSS"]},
        "hosts": {"local": {"transport": "local", "vars": {"nvidia_smi": sim["nvidia_smi"]}}}}))
    port = free_port()
    first = await _serve(cfg, fake, port)
    async with aiohttp.ClientSession() as s:
        try:
            body = command_body("guarded", user="UALICE", response_url=fake.response_url("g"))
            async with s.post(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                              headers=signed_headers(body)) as r:
                assert r.status == 200
            msg, key = await fake.wait_for(lambda: approval_message(fake))
            ts = msg.answer["ts"]
            db = sqlite3.connect(tmp_path / "eagle.db")
            deadline = time.monotonic() + 20
            while not db.execute("select message_ts from approvals where message_ts = ?", [ts]).fetchone():
                assert time.monotonic() < deadline, "the approval message was not recorded"
                await asyncio.sleep(0.05)
        finally:
            first.send_signal(signal.SIGKILL)       # the bot dies: no clean shutdown
            await first.wait()
        port2 = free_port()
        second = await _serve(cfg, fake, port2)
        try:
            update = await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.update")
                                                  if c.args.get("ts") == ts and "expired" in c.all_text()])
            assert "the bot restarted; nothing was killed" in update[0].all_text()
            assert not [b for b in update[0].blocks() if b.get("type") == "actions"]   # the buttons are gone
            thread = await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.postMessage")
                                                  if "interrupted" in c.all_text() and c.args.get("thread_ts")])
            assert "nothing was killed" in thread[0].all_text()
            # a stale button, clicked on the new process, kills nothing
            body = action_body(bk.APPROVE_ACTION, key, user="UBOSS", response_url=fake.response_url("late"))
            async with s.post(f"http://127.0.0.1:{port2}/slack/events", data=body.encode(),
                              headers=signed_headers(body)) as r:
                assert r.status == 200
            late = await fake.wait_for(lambda: [c for c in fake.calls_to("response_url")
                                                if c.args.get("_name") == "late"])
            assert "no longer waiting" in late[0].all_text()
        finally:
            second.send_signal(signal.SIGTERM)
            await asyncio.wait_for(second.wait(), 60)
    assert stranger.poll() is None
    row = db.execute("select a.status, a.decided_by, r.status from approvals a join runs r on r.id = a.run_id").fetchall()
    assert row == [("expired", "restart", "interrupted")]
    assert db.execute("select count(*) from events where kind = 'approval_expired'").fetchone()[0] == 1
