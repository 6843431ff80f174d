"""The HTTP front door says how long it keeps an idle connection (issue 46, LOW): `Keep-Alive:
timeout=5` on every answer that keeps its connection, so a client that reuses one knows when
it is closed (it got resets after 5 s idle without a word)."""
from __future__ import annotations

import aiohttp
from aiohttp import web
from support.sshd import free_port

from eaglebot.frontends.service.http_guard import KEEPALIVE_S, listen


async def test_answers_that_keep_the_connection_say_for_how_long():
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hi")

    app = web.Application()
    app.router.add_get("/", hello)
    port = free_port()
    listener = await listen(app, "127.0.0.1", port, cap=16)
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/") as r:
                assert r.status == 200 and r.headers.get("Keep-Alive") == f"timeout={KEEPALIVE_S:g}"
            async with s.get(f"http://127.0.0.1:{port}/", headers={"Connection": "close"}) as r:
                assert r.status == 200 and "Keep-Alive" not in r.headers
    finally:
        await listener.close()
