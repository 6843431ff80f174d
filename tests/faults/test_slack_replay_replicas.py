"""One replay set for all replicas (issue 35, item 4): two real `eagle serve --http` replicas
on one store (an SQLite file; a real PostgreSQL), a signed slash command admitted by the one,
then the same request delivered to the other (the same bytes; Slack's retry with a new
timestamp and `X-Slack-Retry-Num`): answered once, one run, and a `rejected` event per copy.
The set is a table of the store, pruned and bounded."""
from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
import yaml

from support.helpers import eagle_json
from support.slack_harness import PLAYBOOKS, SECRET, command_body, signed_headers
from support.sshd import free_port
from test_serve import start_serve, stop, wait_serving

from eaglebot.store import Store, open_store


def _config(tmp_path, audit_db: str):
    pdir = tmp_path / "playbooks"
    pdir.mkdir()
    (pdir / "hello.yaml").write_text(yaml.safe_dump(PLAYBOOKS["hello"]))
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": audit_db, "playbooks_dir": "playbooks",
                                   "access": {"operators": ["UALICE"], "viewers": ["*"], "approvers": ["UALICE"]}}))
    return cfg


async def _post(port: int, body: str, headers: dict) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s:
        async with s.post(f"http://127.0.0.1:{port}/slack/events", data=body.encode(), headers=headers) as r:
            return r.status, await r.text()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_request_admitted_by_one_replica_is_answered_once_by_the_other(tmp_path, fake, request, backend):
    url = request.getfixturevalue("pg_server").fresh_db() if backend == "postgresql" else "eagle.db"
    cfg = _config(tmp_path, url)
    ports = [free_port(), free_port()]
    procs = [await start_serve(cfg, fake, "--http", str(p), SLACK_SIGNING_SECRET=SECRET) for p in ports]
    try:
        for p, proc in zip(ports, procs):
            await wait_serving(p, proc)
        body = command_body("hello greeting=once", response_url=fake.response_url("once"))
        headers = signed_headers(body)
        assert await _post(ports[0], body, headers) == (200, "")
        await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.postMessage") if "finished" in c.all_text()],
                            timeout=60)
        # the same bytes, captured and sent to the other replica
        assert await _post(ports[1], body, headers) == (200, "")
        # Slack's own retry (a new timestamp, so a new signature), to the other replica
        retry = {**signed_headers(body, timestamp=int(time.time()) + 1), "X-Slack-Retry-Num": "1",
                 "X-Slack-Retry-Reason": "http_timeout"}
        assert await _post(ports[1], body, retry) == (200, "")
        assert await _post(ports[0], body, retry) == (200, "")
        res, runs = eagle_json("history", config=cfg)
        assert res.returncode == 0 and len(runs) == 1, runs
        deadline = time.monotonic() + 30
        while True:   # the refusals are written after the answer
            store = open_store(url if backend == "postgresql" else tmp_path / "eagle.db")
            try:
                rejected = [e for e in store.events("rejected") if e["reason"] == "replayed request"]
            finally:
                store.close()
            if len(rejected) >= 3 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert len(rejected) == 3 and all("hello greeting=once" in e["text"] for e in rejected)
        parents = [c for c in fake.calls_to("chat.postMessage") if "thread_ts" not in c.args]
        assert len(parents) == 1
    finally:
        for proc in procs:
            rc, err = await stop(proc)
            assert rc == 0, err


def test_the_shared_set_forgets_after_its_window_and_stays_bounded(tmp_path):
    store = Store(tmp_path / "eagle.db")
    try:
        assert store.claim_requests(["a"], 0.2, 3)
        assert not store.claim_requests(["a"], 0.2, 3)
        other = Store(tmp_path / "eagle.db")   # another replica's connection
        try:
            assert not other.claim_requests(["a"], 0.2, 3)
        finally:
            other.close()
        time.sleep(0.25)
        assert store.claim_requests(["a"], 300, 3)
        for k in "bcdefg":
            assert store.claim_requests([k], 300, 3)
        keys = [k for (k,) in store.db.execute("select key from seen_requests order by key")]
        assert len(keys) == 3 and "g" in keys and "a" not in keys
        assert json.dumps(store.audit_verify()["ok"]) == "true"   # transient: no chain entry
    finally:
        store.close()
