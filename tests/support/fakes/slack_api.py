"""A local fake of Slack's Web API (and its Socket Mode WebSocket, and response_url).

An aiohttp server on 127.0.0.1 that records every call (method, arguments from the
query string, form or JSON body, and headers) and answers like Slack: `ok`, `ts`,
`channel`. Tell it to fail: `fail("chat.update", "429")`, `fail("*", "500", times=50)`,
`fail("chat.postMessage", "not_in_channel")`.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from aiohttp import WSMsgType, web

from eaglebot.frontends.slack.inmemory import message_texts, web_api_answer


@dataclass
class Call:
    method: str                      # Web API method, or "response_url", "upload"
    args: dict[str, Any]
    headers: dict[str, str]
    status: int = 200
    answer: dict[str, Any] = field(default_factory=dict)   # what the fake replied
    at: float = field(default_factory=time.monotonic)

    def blocks(self) -> list[dict]:
        b = self.args.get("blocks") or []
        return json.loads(b) if isinstance(b, str) else b

    def all_text(self) -> str:
        """The message's text and every text inside its blocks, for assertions."""
        return "\n".join(message_texts(self.args))


@dataclass
class Fault:
    method: str
    kind: str            # "429", "500", or a Slack error code answered with ok=false
    times: int
    retry_after: str = "0"


class FakeSlackAPI:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.faults: list[Fault] = []
        self.ws_received: list[dict] = []
        self._ws: web.WebSocketResponse | None = None
        self._ws_ready = asyncio.Event()
        self._ts = itertools.count(1)
        self._files = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.root = ""

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> "FakeSlackAPI":
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/response/{name}", self._response_url)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/ws", self._websocket)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.root = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._runner:
            await self._runner.cleanup()

    @property
    def base_url(self) -> str:
        return f"{self.root}/api/"

    @property
    def ws_url(self) -> str:
        return f"{self.root.replace('http://', 'ws://')}/ws"

    def response_url(self, name: str = "r1") -> str:
        return f"{self.root}/response/{name}"

    # -- control --------------------------------------------------------------------------
    def fail(self, method: str, kind: str, times: int = 1, retry_after: str = "0") -> None:
        self.faults.append(Fault(method, kind, times, retry_after))

    def heal(self) -> None:
        self.faults.clear()

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def ok_calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls_to(method) if c.status == 200]

    async def wait_for(self, pred: Callable[[], Any], timeout: float = 120.0) -> Any:   # generous: busy machines
        deadline = time.monotonic() + timeout
        while True:
            got = pred()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s; calls: "
                                     f"{[(c.method, c.status) for c in self.calls]}")
            await asyncio.sleep(0.02)

    # -- Web API ----------------------------------------------------------------------------
    async def _args(self, request: web.Request) -> dict[str, Any]:
        args: dict[str, Any] = dict(request.query)
        ctype = request.content_type
        if request.can_read_body:
            if ctype == "application/json":
                body = await request.json()
                if isinstance(body, dict):
                    args.update(body)
            elif ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
                form = await request.post()
                args.update({k: (v if isinstance(v, str) else "<file>") for k, v in form.items()})
            else:
                raw = await request.read()
                if raw:
                    args["_raw"] = raw.decode(errors="replace")
        return args

    def _fault_for(self, method: str) -> Fault | None:
        for f in self.faults:
            if f.times > 0 and (f.method == method or (f.method == "*" and method not in ("auth.test",))):
                f.times -= 1
                return f
        return None

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await self._args(request)
        call = Call(method, args, dict(request.headers))
        self.calls.append(call)
        fault = self._fault_for(method)
        if fault is not None:
            if fault.kind == "429":
                call.status = 429
                return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                         headers={"Retry-After": fault.retry_after})
            if fault.kind.isdigit():
                call.status = int(fault.kind)
                return web.Response(status=call.status, text="upstream connect error")
            call.status = 299  # answered 200 with ok=false
            return web.json_response({"ok": False, "error": fault.kind})
        if method in ("chat.postMessage", "chat.update") and (too_long := self._too_long(call)):
            call.status = 299   # Slack answers 200 with ok=false
            call.answer = {"ok": False, "error": too_long}
            return web.json_response(call.answer)
        call.answer = self._answer(method, args)
        return web.json_response(call.answer)

    BLOCKS_TEXT_LIMIT = 12_000   # Slack rejects about here (bolt-js #2509: ~12k; #2867: 11,341)

    def _too_long(self, call: Call) -> str | None:
        """Slack's own answers for messages over its size limits."""
        blocks = call.blocks()
        if len(blocks) > 50:
            return "invalid_blocks"
        for b in blocks:
            if b.get("type") == "section" and len((b.get("text") or {}).get("text") or "") > 3000:
                return "invalid_blocks"
            if b.get("type") == "header" and len((b.get("text") or {}).get("text") or "") > 150:
                return "invalid_blocks"
        if len(call.all_text()) - len(str(call.args.get("text") or "")) > self.BLOCKS_TEXT_LIMIT:
            return "msg_blocks_too_long"
        return None

    def _answer(self, method: str, a: dict[str, Any]) -> dict[str, Any]:
        if method == "auth.test":
            return {"ok": True, "url": "https://eagle-test.slack.com/", "team": "Eagle Test", "user": "eaglebot",
                    "team_id": "T0EAGLE", "user_id": "UBOT", "bot_id": "BBOT"}
        if method == "apps.connections.open":
            return {"ok": True, "url": self.ws_url}
        return web_api_answer(method, a, self._ts, self._files, self.root)

    async def _response_url(self, request: web.Request) -> web.Response:
        args = await self._args(request)
        args["_name"] = request.match_info["name"]
        self.calls.append(Call("response_url", args, dict(request.headers)))
        return web.Response(text="ok")

    async def _upload(self, request: web.Request) -> web.Response:
        data = await request.read()
        self.calls.append(Call("upload", {"file_id": request.match_info["file_id"], "size": len(data)},
                               dict(request.headers)))
        return web.Response(text="OK - 1")

    # -- Socket Mode ----------------------------------------------------------------------------
    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._ws = ws
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1,
                                      "connection_info": {"app_id": "AEAGLE"}}))
        self._ws_ready.set()
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                try:
                    self.ws_received.append(json.loads(msg.data))
                except ValueError:
                    self.ws_received.append({"_raw": msg.data})
        return ws

    async def ws_send(self, envelope: dict, timeout: float = 30.0) -> dict:
        """Send an envelope to the connected app; return its ack (same envelope_id)."""
        await asyncio.wait_for(self._ws_ready.wait(), timeout)
        assert self._ws is not None
        await self._ws.send_str(json.dumps(envelope))
        eid = envelope["envelope_id"]
        return await self.wait_for(lambda: next((m for m in self.ws_received if m.get("envelope_id") == eid), None),
                                   timeout)
