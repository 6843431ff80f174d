"""The Slack surface over real HTTP (signed requests) and Socket Mode, against a fake Web API:
signatures, the run's thread as Slack shows it, retries and outages, edit pacing, a real
process killed (or not) after a click. What a command decides is tests/test_slack_handlers.py's,
said through the chat test bot (eaglebot.testing.chat)."""
from __future__ import annotations

import asyncio
import time

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

from support.slack_harness import CHANNEL, approval_message, command_body, signed_headers

from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack.client import make_client
from eaglebot.frontends.slack.coalescer import UpdateCoalescer


def posts(fake, *, thread_ts=None, top=False):
    out = [c for c in fake.ok_calls_to("chat.postMessage")]
    if top:
        out = [c for c in out if not c.args.get("thread_ts")]
    if thread_ts:
        out = [c for c in out if c.args.get("thread_ts") == thread_ts]
    return out


async def run_rows(h):
    return await h.services.store.call(lambda s: s.history(limit=100))


# -- request verification -------------------------------------------------------------------

async def test_forged_signature_is_rejected_with_401(harness, fake):
    h = await harness()
    body = command_body("hello")
    status, _ = await h.post(body, signed_headers(body, secret="not-the-signing-secret"))
    assert status == 401
    assert await run_rows(h) == []
    assert fake.calls_to("chat.postMessage") == []


async def test_request_with_an_old_timestamp_is_rejected(harness, fake):
    h = await harness()
    body = command_body("hello")
    status, _ = await h.post(body, signed_headers(body, timestamp=int(time.time()) - 10 * 60))
    assert status == 401
    assert await run_rows(h) == []


# -- runs -----------------------------------------------------------------------------------

async def test_slash_run_posts_parent_progress_in_thread_and_final_summary(harness, fake):
    h = await harness()
    status, ack = await h.command("hello greeting=hi")
    assert status == 200 and ack == {}
    parent = (await fake.wait_for(lambda: posts(fake, top=True)))[0]
    assert "hello" in parent.all_text() and "<@UALICE>" in parent.all_text() and "running" in parent.all_text()
    rid = await h.last_run_id()
    run = await h.wait_run(rid)
    assert run["status"] == "succeeded" and run["origin"] == "slack" and run["actor"] == "UALICE"
    parent_ts = run["thread_ts"]
    assert run["channel"] == CHANNEL and parent_ts == parent.answer["ts"]
    summary = await fake.wait_for(lambda: [c for c in posts(fake, thread_ts=parent_ts) if "finished" in c.all_text()])
    text = summary[0].all_text()
    assert "<@UALICE>" in text and "succeeded" in text and "greet" in text and f"/eagle show {rid}" in text
    # the parent message is edited to the final status
    await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.update")
                                 if c.args["ts"] == parent_ts and "succeeded" in c.all_text()])
    progress = [c for c in posts(fake, thread_ts=parent_ts) if c.args["text"] == "progress"]
    assert len(progress) == 1


async def test_cancel_stops_a_run_and_its_always_steps_still_run(harness, fake):
    h = await harness()
    await h.command("slow")
    await fake.wait_for(lambda: posts(fake, top=True))
    rid = await h.last_run_id()
    await h.command("status")
    st = await fake.wait_for(lambda: h.responses())
    assert f"#{rid}" in st[0].all_text() and "local (run" in st[0].all_text()
    await h.command(f"cancel {rid}")
    run = await h.wait_run(rid)
    assert run["status"] == "cancelled"
    steps = {s["name"]: s["status"] for s in await h.services.store.call(lambda s: s.steps(rid))}
    assert steps["cleanup note"] == "ok" and steps["after"] == "skipped"


# -- approvals ------------------------------------------------------------------------------

async def test_an_approval_clicked_over_http_kills_the_stranger_for_real(harness, fake, stranger):
    """The card over Slack's wire and a real process killed after the click; who may click and
    a deny are tests/test_slack_handlers.py's (through the chat test bot)."""
    h = await harness()
    await h.command("guarded")
    msg, key = await fake.wait_for(lambda: approval_message(fake))
    text = msg.all_text()
    assert "<@UBOSS>" in text and f"pid {stranger.pid}" in text and "sleep 300" in text
    assert "kill 1 GPU process the bot did not start" in text
    rid = await h.last_run_id()
    assert await h.click(bk.APPROVE_ACTION, key, user="UBOSS") == 200
    run = await h.wait_run(rid)
    assert run["status"] == "succeeded"
    assert stranger.wait(10) is not None              # approved: really killed
    approvals = await h.query("select * from approvals where run_id = $1", [rid])
    assert [(a["status"], a["decided_by"]) for a in approvals] == [("approved", "UBOSS")]
    await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.update")
                                 if c.args["ts"] == msg.answer["ts"] and "Approved by <@UBOSS>" in c.all_text()])


async def test_no_answer_within_the_timeout_means_deny(harness, fake, stranger):
    h = await harness(access={"operators": ["*"], "approvers": ["UBOSS"], "viewers": ["*"],
                              "approval_timeout_s": 0.5})
    await h.command("guarded")
    run = await h.wait_run(await h.last_run_id())
    assert run["status"] == "failed"
    a = await h.query("select status from approvals")
    assert a == [{"status": "timeout"}]
    assert stranger.poll() is None
    await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.update") if "Expired at" in c.all_text()])


# -- Slack faults -----------------------------------------------------------------------------

async def test_rate_limited_calls_are_retried_after_retry_after(harness, fake):
    h = await harness()
    fake.fail("chat.postMessage", "429", times=1, retry_after="0")
    await h.command("hello")
    await fake.wait_for(lambda: posts(fake, top=True))
    first = fake.calls_to("chat.postMessage")
    assert first[0].status == 429 and first[1].status == 200
    rid = await h.last_run_id()
    await h.wait_run(rid)
    # the retried post became the run's thread (recorded right after Slack answers it, which
    # may be after a run as short as `hello` is over)
    for _ in range(200):
        thread_ts = (await h.services.store.call(lambda s: s.get_run(rid)))["thread_ts"]
        if thread_ts:
            break
        await asyncio.sleep(0.05)
    assert thread_ts == first[1].answer["ts"]


async def test_a_run_finishing_during_a_slack_outage_is_complete_in_the_audit_store(harness, fake):
    h = await harness()
    fake.fail("*", "500", times=10_000)
    status, _ = await h.command("hello greeting=outage")
    assert status == 200
    run = await h.wait_run(await h.last_run_id())
    assert run["status"] == "succeeded"
    steps = await h.services.store.call(lambda s: s.steps(run["id"]))
    assert [s["status"] for s in steps] == ["ok", "ok"] and "outage" in steps[0]["output"]
    assert fake.calls_to("chat.postMessage") and not fake.ok_calls_to("chat.postMessage")
    fake.heal()


async def test_a_channel_the_bot_is_not_in_gets_an_invite_hint(harness, fake):
    h = await harness()
    fake.fail("chat.postMessage", "not_in_channel", times=100)
    await h.command("hello")
    hint = (await fake.wait_for(lambda: h.responses()))[0]
    assert "/invite @eaglebot" in hint.all_text() and hint.args["response_type"] == "ephemeral"
    run = await h.wait_run(await h.last_run_id())
    assert run["status"] == "succeeded"
    result = await fake.wait_for(lambda: [c for c in h.responses() if "finished" in c.all_text()])
    assert result[0].args["response_type"] == "ephemeral"


async def test_edits_are_coalesced_per_message_and_capped_per_minute(fake):
    client = make_client_for(fake)
    co = UpdateCoalescer(client, per_message_s=1.0, per_minute=3)
    for i in range(20):
        co.update("C1", "1.1", f"v{i}", [bk.section(f"v{i}")])
    await co.flush("C1", "1.1")
    edits = fake.calls_to("chat.update")
    assert len(edits) == 1 and edits[0].args["text"] == "v19"
    for ts in ("2.2", "3.3", "4.4"):
        co.update("C1", ts, "x", [bk.section("x")])
    await fake.wait_for(lambda: len(fake.calls_to("chat.update")) >= 3)
    await co.flush("C1", "4.4", timeout=0.5)
    assert len(fake.calls_to("chat.update")) == 3  # the budget of the minute is spent; the rest waits
    await co.aclose(timeout=0.1)


def make_client_for(fake):
    from eaglebot.config import Settings

    return make_client(Settings(slack={"api_url": fake.base_url}), "xoxb-test", backoff_s=0.01)


# -- Socket Mode ------------------------------------------------------------------------------

async def test_socket_mode_acks_over_the_websocket_and_runs(harness, fake):
    h = await harness()
    handler = AsyncSocketModeHandler(h.bot.app, "xapp-1-test-app-token", web_client=h.bot.ctx.client)
    try:
        await handler.connect_async()
        opened = fake.calls_to("apps.connections.open")
        assert opened and opened[0].headers["Authorization"] == "Bearer xapp-1-test-app-token"
        payload = {"command": "/eagle", "text": "hello gpu-01; rm -rf /", "user_id": "UALICE",
                   "channel_id": CHANNEL, "team_id": "T0EAGLE", "response_url": fake.response_url("s1"),
                   "api_app_id": "AEAGLE", "trigger_id": "1.2.3"}
        ack = await fake.ws_send({"envelope_id": "e1", "type": "slash_commands",
                                  "accepts_response_payload": True, "payload": payload})
        assert "not a host name" in ack["payload"]["text"]
        payload.update(text="hello greeting=socket", response_url=fake.response_url("s2"), trigger_id="1.2.4")
        ack = await fake.ws_send({"envelope_id": "e2", "type": "slash_commands",
                                  "accepts_response_payload": True, "payload": payload})
        assert "payload" not in ack or not ack["payload"]
        summary = await fake.wait_for(lambda: [c for c in posts(fake) if "finished" in c.all_text()])
        assert "succeeded" in summary[0].all_text()
    finally:
        await handler.close_async()


# -- schedules, uploads ------------------------------------------------------------------------

async def test_schedule_hooks_post_runs_messages_and_uploads_to_the_configured_channel(harness, fake, tmp_path):
    from eaglebot.config import ScheduleConfig
    from eaglebot.engine.runner import RunRequest

    h = await harness()
    hooks = h.bot.hooks
    cfg = ScheduleConfig(name="nightly", playbook="hello", cron="0 3 * * *", channel="CNIGHT")
    observer = hooks.observer(cfg)
    outcome = await h.services.engine.run(RunRequest("hello", actor="schedule:nightly", origin="schedule",
                                                     schedule="nightly"), observer)
    assert outcome.status == "succeeded"
    [summary] = await fake.wait_for(lambda: [c for c in posts(fake) if c.args["channel"] == "CNIGHT"
                                             and "finished" in c.all_text()])
    # a scheduled run's summary ends with the audit chain's head, the anchor kept outside the DB
    head = (await h.services.store.call(lambda s: s.audit_head()))["hash"]
    assert summary.args["blocks"][-1]["elements"][0]["text"] == f"audit head: `{head}`"
    assert (await h.services.store.call(lambda s: s.audit_verify(head)))["ok"]
    ts = await hooks.post("CNIGHT", "missed fire of nightly at 03:00")
    assert ts
    png = tmp_path / "plot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 100)
    await hooks.upload("CNIGHT", ts, png, "trend")
    done = (await fake.wait_for(lambda: fake.calls_to("files.completeUploadExternal")))[0]
    assert done.args["channel_id"] == "CNIGHT" and done.args["thread_ts"] == ts
    assert fake.calls_to("upload")[0].args["size"] == 108
