"""Replayed and malformed signed Slack requests (issue 17, "Requests and input").

A correctly signed request re-sent within Slack's 5-minute window (a captured request, or
Slack's own retry) is answered 200 and does nothing; a signed body whose shape is not
Slack's is 400. Both leave a `rejected` event, never a second run, a 500 or a traceback.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from urllib.parse import parse_qs, urlencode

import pytest

from eaglebot.frontends.slack.http import GuardedSocketModeHandler
from eaglebot.frontends.slack.replay import MemorySeen
from support.slack_harness import CHANNEL, action_body, command_body, open_harness, signed_headers


@pytest.fixture
async def h(tmp_path, fake):
    harness = await open_harness(tmp_path, fake)
    yield harness
    await harness.close()


async def _rejections(h, reason: str, n: int, timeout: float = 10.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        rows = [e for e in await h.services.store.call(lambda s: s.events("rejected")) if e["reason"] == reason]
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        await asyncio.sleep(0.05)


async def _runs(h) -> list[dict]:
    return await h.query("select id, status from runs order by id")


async def test_a_replayed_slash_command_is_answered_once(h, fake):
    body = command_body("hello greeting=once", response_url=fake.response_url("once"))
    headers = signed_headers(body)
    assert (await h.post(body, headers))[0] == 200
    rid = await h.last_run_id()
    await h.wait_run(rid)
    status, text = await h.post(body, headers)          # the same bytes, the same signature
    assert status == 200 and text == ""
    rows = await _rejections(h, "replayed request", 1)
    assert len(rows) == 1 and rows[0]["actor"] == "UALICE" and "hello greeting=once" in rows[0]["text"]
    await asyncio.sleep(0.3)
    assert [r["id"] for r in await _runs(h)] == [rid]
    parents = [c for c in fake.calls_to("chat.postMessage") if "thread_ts" not in c.args]
    assert len(parents) == 1


async def test_a_slack_retry_with_a_new_timestamp_is_answered_once(h, fake):
    body = command_body("hello greeting=retry", response_url=fake.response_url("retry"))
    assert (await h.post(body, signed_headers(body)))[0] == 200
    retry = {**signed_headers(body, timestamp=int(time.time()) + 1), "X-Slack-Retry-Num": "1",
             "X-Slack-Retry-Reason": "http_timeout"}
    assert (await h.post(body, retry))[0] == 200
    await h.wait_run(await h.last_run_id())
    assert len(await _rejections(h, "replayed request", 1)) == 1
    assert len(await _runs(h)) == 1


async def test_a_trigger_id_reused_in_another_signed_body_is_not_a_replay(h, fake):
    """Slack never reuses a trigger_id, and a signed body cannot be altered: another body under
    the same trigger_id is another request (a client that reuses one is not refused)."""
    first = command_body("hello greeting=a")
    trigger = dict(x.split("=", 1) for x in first.split("&"))["trigger_id"]
    second = first.replace("greeting%3Da", "greeting%3Db")
    assert second != first and trigger in second
    for n, body in enumerate((first, second), 1):   # one after the other: `hello` locks its host
        assert (await h.post(body, signed_headers(body)))[0] == 200
        deadline = time.monotonic() + 10
        while len(await _runs(h)) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await h.wait_run(await h.last_run_id())
    assert [r["status"] for r in await _runs(h)] == ["succeeded", "succeeded"]
    assert await _rejections(h, "replayed request", 0) == []


async def test_a_replayed_button_click_is_answered_once(h, fake):
    body = action_body("eagle_approve", "no-such-approval", user="UBOSS", response_url=fake.response_url("click"))
    headers = signed_headers(body)
    assert (await h.post(body, headers))[0] == 200
    await fake.wait_for(lambda: [c for c in fake.calls if c.method == "response_url"])
    assert (await h.post(body, headers))[0] == 200
    assert len(await _rejections(h, "replayed request", 1)) == 1
    await asyncio.sleep(0.3)
    assert len([c for c in fake.calls if c.method == "response_url"]) == 1


async def test_a_replayed_socket_mode_envelope_is_answered_once(h, fake):
    handler = GuardedSocketModeHandler(h.bot.app, "xapp-1-test-app-token", web_client=h.bot.ctx.client)
    try:
        await handler.connect_async()
        payload = {"command": "/eagle", "text": "hello greeting=socket", "user_id": "UALICE",
                   "channel_id": CHANNEL, "team_id": "T0EAGLE", "response_url": fake.response_url("s1"),
                   "api_app_id": "AEAGLE", "trigger_id": "77.88.99"}
        for envelope in ("e1", "e2"):   # Slack re-delivers with a new envelope id
            ack = await fake.ws_send({"envelope_id": envelope, "type": "slash_commands",
                                      "accepts_response_payload": True, "payload": payload})
            assert ack["envelope_id"] == envelope
        await h.wait_run(await h.last_run_id())
        assert len(await _rejections(h, "replayed request", 1)) == 1
        assert len(await _runs(h)) == 1
        bad = json.loads(parse_qs(_payload(user="UBOSS"))["payload"][0])
        ack = await fake.ws_send({"envelope_id": "e3", "type": "interactive", "payload": bad})
        assert ack["envelope_id"] == "e3"      # acked (Slack must not re-deliver it), and refused
        assert len([e for e in await h.services.store.call(lambda s: s.events("rejected")) if "user" in e["reason"]]) == 1
    finally:
        await handler.close_async()


async def test_slacks_certificate_probe_is_never_a_replay(h):
    body = "ssl_check=1&token=legacy"
    for _ in range(3):
        assert (await h.post(body, signed_headers(body)))[0] == 200
    await asyncio.sleep(0.2)
    assert await h.services.store.call(lambda s: s.events("rejected")) == []


async def test_the_seen_set_forgets_after_its_window_and_stays_bounded():
    seen = MemorySeen(window_s=0.2, max_keys=3)
    assert await seen.claim(["a", "t1"])
    assert not await seen.claim(["a"]) and not await seen.claim(["b", "t1"])
    await asyncio.sleep(0.25)
    assert await seen.claim(["a"])
    for k in "cdefgh":
        assert await seen.claim([k])
    assert len(seen) == 3


def _payload(**change) -> str:
    body = json.loads(parse_qs(action_body("eagle_approve", "k", user="UBOSS"))["payload"][0])
    for k, v in change.items():
        if v is KeyError:
            body.pop(k)
        else:
            body[k] = v
    return urlencode({"payload": json.dumps(body)})


MALFORMED = {
    "actions a string": _payload(actions="eagle_approve"),
    "actions a list of strings": _payload(actions=["eagle_approve"]),
    "an action without action_id": _payload(actions=[{"value": "k"}]),
    "an action value a number": _payload(actions=[{"action_id": "eagle_approve", "value": 5}]),
    "actions missing": _payload(actions=KeyError),
    "user a string": _payload(user="UBOSS"),
    "user a list": _payload(user=["UBOSS"]),
    "user without id": _payload(user={"name": "boss"}),
    "user missing": _payload(user=KeyError),
    "container a string": _payload(container="C1"),
    "channel a list": _payload(channel=["C1"]),
    "view a string": _payload(view="v"),
    "team a number": _payload(team=7),
    "type a number": _payload(type=1),
    "authorizations a string": _payload(authorizations="x"),
    "trigger_id an object": _payload(trigger_id={"a": 1}),
    "command without user_id": urlencode({"command": "/eagle", "text": "hello"}),
}


@pytest.mark.parametrize("what", list(MALFORMED))
async def test_a_signed_malformed_payload_is_400_with_a_rejected_event(h, fake, what, caplog):
    body = MALFORMED[what]
    with caplog.at_level(logging.WARNING):
        status, _ = await h.post(body, signed_headers(body))
        await asyncio.sleep(0.2)
    assert status == 400
    rows = await h.services.store.call(lambda s: s.events("rejected"))
    assert len(rows) == 1 and rows[0]["reason"].startswith(("malformed", "neither"))
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert "Traceback" not in caplog.text
    assert await _runs(h) == []
    status, ack = await h.command("hello local bogus")     # the bot still answers everyone
    assert status == 200 and "unexpected argument" in json.dumps(ack)
