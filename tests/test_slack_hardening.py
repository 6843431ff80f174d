"""Hostile HTTP requests to the Slack app: bad headers are 401, oversized bodies 413,
signed but malformed bodies 400 — never a 500, never a run, and the bot keeps answering."""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from urllib.parse import urlencode

import pytest

from support.fakes.slack_api import FakeSlackAPI
from support.slack_harness import SECRET, command_body, open_harness



@pytest.fixture
async def h(tmp_path):
    fake = await FakeSlackAPI().start()
    harness = await open_harness(tmp_path, fake)
    yield harness
    await harness.close()
    await fake.stop()


async def _post_bytes(h, body: bytes, headers: dict[str, str]) -> int:
    async with h.session.post(h.url, data=body, headers=headers) as r:
        await r.read()
        return r.status


def _sign(body: bytes, ts: str | None = None, ctype: str = "application/x-www-form-urlencoded") -> dict[str, str]:
    ts = ts or str(int(time.time()))
    sig = "v0=" + hmac.new(SECRET.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig, "Content-Type": ctype}


BAD_HEADERS = [
    {"X-Slack-Request-Timestamp": "yesterday"},
    {"X-Slack-Request-Timestamp": ""},
    {"X-Slack-Request-Timestamp": "1e9"},
    {"X-Slack-Request-Timestamp": "-5"},
    {"X-Slack-Request-Timestamp": "9" * 40},
    {"X-Slack-Signature": "v0=nothex"},
    {"X-Slack-Signature": ""},
    {"X-Slack-Signature": "v1=" + "0" * 64},
]


@pytest.mark.parametrize("override", BAD_HEADERS, ids=[f"{list(o)[0]}={list(o.values())[0][:12]}" for o in BAD_HEADERS])
async def test_a_malformed_or_missing_signature_header_is_401(h, override):
    body = command_body("hello").encode()
    headers = {**_sign(body), **override}
    assert await _post_bytes(h, body, headers) == 401
    missing = {k: v for k, v in _sign(body).items() if k not in override}
    assert await _post_bytes(h, body, missing) == 401
    assert await h.services.store.call(lambda s: s.history(limit=5)) == []


async def test_an_oversized_body_is_413(h):
    body = command_body("hello greeting=" + "x" * 300_000).encode()
    assert await _post_bytes(h, body, _sign(body)) == 413
    assert await h.services.store.call(lambda s: s.history(limit=5)) == []


MALFORMED = [
    ("not utf-8", b"command=/eagle&text=\xff\xfe", "application/x-www-form-urlencoded"),
    ("payload not json", b"payload=%7Bnot-json", "application/x-www-form-urlencoded"),
    ("payload a list", ("payload=" + json.dumps([1, 2])).encode(), "application/x-www-form-urlencoded"),
    ("no command", urlencode({"x": "y"}).encode(), "application/x-www-form-urlencoded"),
    ("json array", b"[1,2,3]", "application/json"),
    ("json garbage", b"{\"a\":", "application/json"),
    ("deep json", b"[" * 100_000 + b"]" * 100_000, "application/json"),
]


@pytest.mark.parametrize("what,body,ctype", MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_a_signed_but_malformed_body_is_400(h, what, body, ctype):
    assert await _post_bytes(h, body, _sign(body, ctype=ctype)) == 400
    # ...and the bot is still there for everyone else
    status, ack = await h.command("hello local bogus")
    assert status == 200 and "unexpected argument 'bogus'" in json.dumps(ack)


async def test_the_ack_never_echoes_a_token(h):
    token = "hf_" + "A1b2C3d4" * 5
    status, ack = await h.command(f"hello local {token}")
    assert status == 200
    text = json.dumps(ack)
    assert "unexpected argument" in text
    assert token not in text and token[:19] not in text


async def test_an_alias_bomb_in_a_slash_command_is_refused_and_everyone_is_still_acked(tmp_path):
    from support.slack_harness import PLAYBOOKS
    fake = await FakeSlackAPI().start()
    books = dict(PLAYBOOKS)
    books["envy"] = {"name": "envy", "inputs": {"env": {"type": "dict"}},
                     "steps": [{"skill": "audit.note", "with": {"message": "{{ env }}"}}]}
    h = await open_harness(tmp_path, fake, playbooks=books)
    try:
        parts = ["a0: &a0 [x,x,x,x,x,x,x,x,x]"] + [
            f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 8)]
        status, _ = await h.command("envy local 'env={" + ", ".join(parts) + "}'")
        assert status == 200
        bomb_reply = h.n
        status, _ = await h.command("hello local greeting=next", user="UALICE")
        assert status == 200
        reply = await fake.wait_for(lambda: h.responses(bomb_reply))
        assert "not allowed in inputs" in reply[0].all_text()
        run = await h.wait_run(await h.last_run_id())
        assert run["status"] in ("succeeded", "failed")
        assert len(json.dumps(await h.query("select inputs from runs"))) < 20_000
    finally:
        await h.close()
        await fake.stop()
