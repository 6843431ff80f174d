"""Slack 429 and 5xx storms while runs go on: every ack still answers, no audit row is lost,
no step is left `running`, host locks are freed, and the audit chain stays intact."""
from __future__ import annotations

import sqlite3

import pytest

from support.slack_harness import open_harness


def _new_run(h, seen: int) -> int | None:
    conn = sqlite3.connect(h.services.settings.db_path)
    try:
        top = conn.execute("select max(id) from runs").fetchone()[0]
    finally:
        conn.close()
    return top if top and top > seen else None


@pytest.mark.parametrize("kind", ["429", "500", "503"])
async def test_runs_survive_a_slack_storm_with_nothing_lost(tmp_path, fake, kind):
    h = await open_harness(tmp_path, fake)
    try:
        fake.fail("*", kind, times=100_000, retry_after="0")
        ids = []
        for i in range(4):
            status, _ = await h.command(f"hello greeting=storm{i}")
            assert status == 200  # acked although every Web API call fails
            ids.append(await fake.wait_for(lambda: _new_run(h, len(ids))))
            await h.wait_run(ids[-1])  # one host: one run at a time
        for i, rid in enumerate(ids):
            run = await h.wait_run(rid)
            assert run["status"] == "succeeded"
            steps = await h.services.store.call(lambda s: s.steps(rid))
            assert [s["status"] for s in steps] == ["ok", "ok"]
            assert f"storm{i}" in steps[0]["output"]
        assert await h.services.store.call(lambda s: s.locks()) == []
        assert (await h.services.store.call(lambda s: s.audit_verify()))["ok"]
        failed = fake.calls_to("chat.postMessage")
        assert failed and not fake.ok_calls_to("chat.postMessage")
        fake.heal()
        status, _ = await h.command("hello greeting=after")
        assert status == 200
        await fake.wait_for(lambda: fake.ok_calls_to("chat.postMessage"))
        run = await h.wait_run(await h.last_run_id())
        assert run["status"] == "succeeded"
    finally:
        fake.heal()
        await h.close()
