"""Slack without its servers, for tests: requests built and signed in memory as Slack builds
them, and a Web API client and response_url client that record what the app sends and answer
as Slack does (`ok`, a `ts`) without a socket.

The app under test is the product's own (`build_app`), and a request goes through its
`GuardedApp.answer_bytes`: the signature check, the screen and Bolt's dispatch the HTTP face
runs. eaglebot.testing's chat bot is built on these; tests/support/slack_harness.py keeps the real
HTTP surface (ports, retries, timing).
"""
from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from urllib.parse import urlencode

from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse
from slack_sdk.web.file_upload_v2_result import FileUploadV2Result
from slack_sdk.webhook.async_client import AsyncWebhookClient
from slack_sdk.webhook.webhook_response import WebhookResponse

TEAM = "T0EAGLE"
APP = "AEAGLE"
# auth.test's answer for the app's `authorize` (so no request asks for it)
IDENTITY = {"ok": True, "url": "https://eagle-test.slack.com/", "team": "Eagle Test", "user": "eaglebot",
            "team_id": TEAM, "user_id": "UBOT", "bot_id": "BBOT"}


def message_texts(args: dict[str, Any]) -> list[str]:
    """A message's fallback text, then every `text` inside its blocks (a JSON string or a list), in order."""
    b = args.get("blocks") or []
    out = [str(args.get("text") or "")]

    def walk(v: object) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "text" and isinstance(x, str):
                    out.append(x)
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(json.loads(b) if isinstance(b, str) else b)
    return out


@dataclass
class Sent:
    """One thing the app sent: a Web API call (`method` "chat.postMessage", ...), an answer to
    a response_url (`method` "response_url", `url` set) or an uploaded file's bytes ("upload")."""

    method: str
    args: dict[str, Any]
    answer: dict[str, Any] = field(default_factory=dict)
    url: str | None = None

    @property
    def blocks(self) -> list[dict[str, Any]]:
        b = self.args.get("blocks") or []
        return json.loads(b) if isinstance(b, str) else list(b)

    @property
    def text(self) -> str:
        """The fallback text and every text in the blocks, one per line (what a reader sees)."""
        return "\n".join(t for t in message_texts(self.args) if t)

    @property
    def buttons(self) -> list[dict[str, Any]]:
        """The buttons in the message's actions blocks (action_id, value, text)."""
        return [e for b in self.blocks if b.get("type") == "actions" for e in b.get("elements", [])
                if e.get("type") == "button"]


class SlackRecord:
    """Everything the app sent, in order, and Slack's answers to it. `listeners` are called
    with each `Sent` (the chat bot wakes on an approval card)."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.listeners: list[Callable[[Sent], None]] = []
        self._ts = itertools.count(1)
        self._files = itertools.count(1)

    def add(self, sent: Sent) -> Sent:
        self.sent.append(sent)
        for listener in self.listeners:
            listener(sent)
        return sent

    def answer(self, method: str, a: dict[str, Any]) -> dict[str, Any]:
        """Slack's answer to a successful call (the fields the app reads)."""
        if method == "auth.test":
            return dict(IDENTITY)
        return web_api_answer(method, a, self._ts, self._files, "memory:/")

def web_api_answer(method: str, a: dict[str, Any], stamps: Iterator[int], file_ids: Iterator[int],
                   upload_root: str) -> dict[str, Any]:
    """Slack's answer to a successful Web API call, the fields the app reads: a fresh `ts` per message
    (from `stamps`), a file id per upload URL (from `file_ids`) under `upload_root` (this client and tests/support/fakes/slack_api.py's server)."""
    if method == "chat.postMessage":
        ts = f"{1700000000 + next(stamps)}.000100"
        return {"ok": True, "channel": a.get("channel"), "ts": ts,
                "message": {"text": a.get("text"), "ts": ts, "thread_ts": a.get("thread_ts")}}
    if method == "chat.update":
        return {"ok": True, "channel": a.get("channel"), "ts": a.get("ts"), "text": a.get("text")}
    if method == "chat.postEphemeral":
        return {"ok": True, "message_ts": f"{1700000000 + next(stamps)}.000200"}
    if method == "files.getUploadURLExternal":
        fid = f"F{next(file_ids):05d}"
        return {"ok": True, "upload_url": f"{upload_root}/upload/{fid}", "file_id": fid}
    if method == "files.completeUploadExternal":
        files = a.get("files")
        listed = json.loads(files) if isinstance(files, str) else (files or [])
        return {"ok": True, "files": [{"id": f.get("id"), "title": f.get("title")} for f in listed]}
    return {"ok": True}


class RecordingWebClient(AsyncWebClient):
    """slack_sdk's client, its every call answered from `record` instead of Slack's servers
    (slack_sdk still builds each call's arguments); every answer is a success."""

    def __init__(self, record: SlackRecord, token: str = "xoxb-in-memory"):
        super().__init__(token=token, base_url="memory://slack/api/")
        self.record = record

    async def api_call(self, api_method: str, *, http_verb: str = "POST", data: object = None,
                       params: dict[str, object] | None = None, json: dict[str, object] | None = None,
                       **_: object) -> AsyncSlackResponse:   # (files, headers, auth: nothing to send them to)
        args = {**(params or {}), **(data if isinstance(data, dict) else {}), **(json or {})}
        answer = self.record.answer(api_method, args)
        self.record.add(Sent(api_method, args, answer))
        return AsyncSlackResponse(client=self, http_verb=http_verb, api_url=self.base_url + api_method,
                                  req_args=args, data=answer, headers={}, status_code=200)

    async def _upload_file(self, *, url: str, data: bytes, **_: object) -> FileUploadV2Result:
        self.record.add(Sent("upload", {"size": len(data)}, url=url))
        return FileUploadV2Result(status=200, body="OK")


class RecordingWebhook(AsyncWebhookClient):
    """The response_url client, its answers recorded (Slack answers "ok")."""

    def __init__(self, url: str, record: SlackRecord):
        super().__init__(url)
        self.record = record

    async def _perform_http_request(self, *, body: dict[str, Any], headers: dict[str, str]) -> WebhookResponse:
        self.record.add(Sent("response_url", dict(body), {"ok": True}, url=self.url))
        await asyncio.sleep(0)   # a real answer yields to the loop too
        return WebhookResponse(url=self.url, status_code=200, body="ok", headers={})


def signed_headers(body: str, secret: str, *, timestamp: int | None = None,
                   content_type: str = "application/x-www-form-urlencoded") -> dict[str, str]:
    """Slack's headers for `body`: its v0 signature with `secret` at `timestamp` (now)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    sig = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    assert sig is not None   # (None only without a timestamp or a body)
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig, "Content-Type": content_type}


def trigger_id() -> str:
    """Slack's trigger_id: unique per user action (the app answers each one once)."""
    return f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}"


def command_body(text: str, *, user: str, channel: str, response_url: str = "", command: str = "/eagle") -> str:
    """A slash command's form body, as Slack posts it."""
    return urlencode({
        "token": "legacy-verification-token", "team_id": TEAM, "team_domain": "eagle-test",
        "channel_id": channel, "channel_name": "gpu-ops", "user_id": user, "user_name": user.lower(),
        "command": command, "text": text, "api_app_id": APP, "is_enterprise_install": "false",
        "response_url": response_url, "trigger_id": trigger_id()})


def action_body(action_id: str, value: str, *, user: str, channel: str, response_url: str = "",
                message_ts: str = "1700000001.000100") -> str:
    """A button click's form body (block_actions), as Slack posts it."""
    payload = {
        "type": "block_actions", "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "api_app_id": APP, "token": "legacy", "team": {"id": TEAM, "domain": "eagle-test"},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel},
        "channel": {"id": channel, "name": "gpu-ops"}, "message": {"ts": message_ts, "text": "approval"},
        "response_url": response_url, "trigger_id": trigger_id(),
        "actions": [{"action_id": action_id, "block_id": f"eagle_approval_{value}", "value": value,
                     "type": "button", "action_ts": str(time.time())}],
    }
    return urlencode({"payload": json.dumps(payload)})
