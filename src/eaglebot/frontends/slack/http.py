"""Slack's front door: every request is checked before Bolt sees it.

Bolt answers a malformed `X-Slack-Request-Timestamp` or an unparsable signed body with a
500 and a traceback; here a missing or bad signature header is 401, an oversized body 413,
a correctly signed but malformed body 400 — each with one line in the log, never a trace.
The signature is Slack's v0 HMAC-SHA256 over the raw body, with 5 minutes of clock skew.
Then, in HTTP and Socket Mode alike (`GuardedApp.screen`), a body whose shape is not
Slack's is 400 (payload.py) and a request already answered within those 5 minutes is answered
200 with nothing done (replay.py); both leave a `rejected` event.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
from typing import Any, Awaitable, Callable, Mapping
from urllib.parse import parse_qs

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.request.internals import parse_body
from slack_bolt.response import BoltResponse
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from eaglebot import __version__
from eaglebot.frontends.slack.ack_gate import AckGate
from eaglebot.frontends.slack.payload import shape_problem
from eaglebot.frontends.slack.replay import MemorySeen, SeenRequests, request_keys

log = logging.getLogger("eaglebot.slack")

MAX_SKEW_S = 5 * 60
MAX_BODY = 256 * 1024   # a slash command is < 16 KiB; a button payload with its message < 100 KiB
_TS = re.compile(r"^\d{1,12}$")
_SIG = re.compile(r"^v0=[0-9a-f]{64}$")


def check_request(body: bytes, headers: Mapping[str, str], secret: str) -> tuple[int, str] | None:
    """None when the request may go to Bolt, else (HTTP status, reason)."""
    ts = headers.get("X-Slack-Request-Timestamp", "")
    sig = headers.get("X-Slack-Signature", "")
    if not _TS.match(ts) or not _SIG.match(sig):
        return 401, "missing or malformed signature headers"
    if not valid_signature(secret, body, ts, sig):
        return 401, "invalid signature or stale timestamp"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return 400, "the body is not UTF-8"
    ctype = headers.get("Content-Type", "")
    try:
        if ctype.startswith("application/json"):
            if not isinstance(json.loads(text), dict):
                return 400, "the JSON body is not an object"
        else:
            form = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=200)
            if "payload" in form and not isinstance(json.loads(form["payload"][0]), dict):
                return 400, "the payload is not a JSON object"
            if not {"payload", "command", "type", "ssl_check"} & set(form):
                return 400, "neither a command nor a payload"
    except (ValueError, RecursionError):
        return 400, "malformed body"
    return None


def valid_signature(secret: str, body: bytes, ts: str, sig: str, now: float | None = None) -> bool:
    """Slack's v0 signature over the raw bytes. Written here (not slack_sdk's SignatureVerifier)
    because that one decodes the body as UTF-8 first and raises on a body that is not."""
    if abs((time.time() if now is None else now) - int(ts)) > MAX_SKEW_S:
        return False
    mac = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest("v0=" + mac, sig)


Reject = Callable[[str, str, str], None]   # (actor, what was asked, why): records a `rejected` event


def describe(body: object) -> tuple[str, str]:
    """(actor, what) of a request for its `rejected` event, read defensively: the body may be
    exactly the malformed thing being refused."""
    if not isinstance(body, dict):
        return "", "a Slack request"
    user = body.get("user")
    actor = body.get("user_id") if "command" in body else (user.get("id") if isinstance(user, dict) else None)
    if "command" in body:
        what = f"{body.get('command')} {body.get('text') or ''}"
    else:
        actions = body.get("actions")
        ids = [a.get("action_id") for a in actions if isinstance(a, dict)] if isinstance(actions, list) else []
        what = f"{body.get('type') or 'payload'} {' '.join(str(i) for i in ids[:5])}"
    return (actor if isinstance(actor, str) else ""), what.strip()[:300]


class _NotThatWarning(logging.Filter):
    """Bolt reads SLACK_BOT_TOKEN from the environment even when it is given a client, and then
    warns that the token will be unused. Here that is by design: Bolt's client carries no token
    and `authorize` hands each request the bot token. No argument avoids it (authorize warns
    alike), so exactly that line is dropped; every other Bolt warning stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "`token` will be unused" not in record.getMessage()


_QUIET = _NotThatWarning()


class GuardedApp(AsyncApp):
    """Bolt's AsyncApp that checks a request before any listener sees it: its HTTP face
    (`web_app()`, used by `eagle serve --http`) checks the signature and the body; every
    request, Socket Mode's too, has its shape checked and is answered once."""

    def __init__(self, *, client: AsyncWebClient, signing_secret: str,
                 authorize: Callable[..., Awaitable[AuthorizeResult]], reject: Reject,
                 seen: SeenRequests | None = None, acks: AckGate | None = None) -> None:
        bolt_log = logging.getLogger("slack_bolt.AsyncApp")   # (slack_bolt.logger.get_bolt_logger's name)
        if _QUIET not in bolt_log.filters:
            bolt_log.addFilter(_QUIET)
        super().__init__(
            client=client, signing_secret=signing_secret, authorize=authorize,
            raise_error_for_unhandled_request=False,
            # The listeners only parse, check access, ack and spawn: running them inline answers
            # Slack sooner than Bolt's background-listener mode, which polls for the ack every 10 ms.
            process_before_response=True,
        )
        self.eagle_signing_secret = signing_secret
        self.eagle_reject = reject
        self.eagle_seen: SeenRequests = seen or MemorySeen()
        self.eagle_acks = acks or AckGate()

    def _rejected(self, body: object, why: str) -> None:
        actor, what = describe(body)
        self.eagle_reject(actor, what, why)

    def _malformed(self, body: object, why: str) -> tuple[int, str]:
        log.warning("refused a Slack request: %s (HTTP 400)", why)
        self._rejected(body, why)
        return 400, "malformed request"

    async def screen(self, raw_body: str, body: dict[str, Any] | None,
                     retry: str | None = None) -> tuple[int, str] | None:
        """None when a signed request may go to Bolt, else the (HTTP status, text) to answer.
        `body` is the parsed body (None: it did not parse). Run before Bolt builds its request
        object, which itself reads `team`, `user`, `authorizations`... and raises on the wrong types."""
        if body is None:
            return self._malformed(None, "the body is not an object")
        problem = shape_problem(body)
        if problem is not None:
            return self._malformed(body, problem)
        if not await self.eagle_seen.claim(request_keys(raw_body, body)):
            log.warning("answered a replayed Slack request with nothing (Slack retry: %s)", retry or "no")
            self._rejected(body, "replayed request")
            return 200, ""
        return None

    async def answer_bytes(self, body: bytes, headers: Mapping[str, str], query: str = "") -> BoltResponse:
        """The answer to one request as Slack sends it over HTTP (its raw body and headers):
        checked, screened, then Bolt's own dispatch. The HTTP face serves it; eaglebot.testing's
        chat bot calls it in memory, so a test runs exactly this path without a socket."""
        # read per request: a reload may bring a new SLACK_SIGNING_SECRET
        bad = check_request(body, headers, self.eagle_signing_secret)
        if bad is not None:
            log.warning("refused a Slack request: %s (HTTP %s)", bad[1], bad[0])
            if bad[0] == 400:   # signed, so someone who holds the secret sent it: worth an audit row
                self._rejected(None, bad[1])
            return BoltResponse(status=bad[0], body=bad[1])
        text = body.decode("utf-8")   # (check_request made sure it is)
        try:
            parsed = parse_body(text, headers.get("Content-Type"))
        except (ValueError, RecursionError):
            parsed = None
        screened = await self.screen(text, parsed, headers.get("X-Slack-Retry-Num"))
        if screened is not None:
            return BoltResponse(status=screened[0], body=screened[1])
        try:
            return await self.async_dispatch(AsyncBoltRequest(body=text, query=query, headers=dict(headers)))
        except Exception as e:  # Bolt choked on a body we let through: still one line
            log.warning("refused a Slack request Bolt could not read: %s", type(e).__name__)
            return BoltResponse(status=400, body="malformed request")

    def web_app(self, path: str = "/slack/events", port: int = 3000) -> web.Application:
        async def handle(request: web.Request) -> web.StreamResponse:
            with self.eagle_acks.request():
                return await answer(request)

        async def answer(request: web.Request) -> web.StreamResponse:
            if request.content_length is not None and request.content_length > MAX_BODY:
                return web.Response(status=413, text="request body too large")
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                return web.Response(status=413, text="request body too large")
            except ConnectionResetError:   # cut while its body trickled in (frontends/service/http_guard.py)
                return web.Response(status=408, text="request body too slow")
            resp = await self.answer_bytes(body, request.headers, request.query_string)
            return await to_aiohttp_response(resp)

        async def healthz(request: web.Request) -> web.StreamResponse:
            # a load balancer's or systemd's liveness check: no credential asked, nothing secret said
            return web.json_response({"status": "ok", "service": "eaglebot", "version": __version__})

        app = web.Application(client_max_size=MAX_BODY)
        app.add_routes([web.post(path, handle), web.get("/healthz", healthz)])
        return app


class GuardedSocketModeHandler(AsyncSocketModeHandler):
    """Socket Mode through the same screen as HTTP. Its envelopes need no signature (the
    connection is authenticated); a refused or replayed one is still acked, so Slack does
    not deliver it again."""

    app: GuardedApp

    # (type: ignore as in Bolt's own aiohttp handler, which narrows the client the same way)
    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        if await self.app.screen("", req.payload) is not None:
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        await super().handle(client, req)
