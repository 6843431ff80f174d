"""One approval, one decision (issue 46 item 2): every click is a check-and-set of the
`approvals` row (the first writer wins, on SQLite and on a real PostgreSQL), and the waiting
run follows the row. Approve and Deny sent at the same instant to two replicas (the one that
waits and another), 12 times per backend: the run, the GPU holder and the row always agree,
and the losing click is told who decided what. Two approvers on one replica: one decision,
no InvalidStateError."""
from __future__ import annotations

import asyncio
import logging
import threading

import pytest
from support.slack_harness import open_harness, start_foreign_gpu_holder

from eaglebot.frontends.slack.blocks import APPROVE_ACTION, DENY_ACTION
from eaglebot.store import Store, open_store

TRIES = 12


def _open(backend: str, request, tmp_path):
    """A factory of independent connections to one store of `backend`."""
    if backend == "sqlite":
        path = tmp_path / "eagle.db"
        return lambda: Store(path)
    url = request.getfixturevalue("pg_url")
    return lambda: open_store(url)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_decisions_at_once_on_two_connections_one_wins(backend, request, tmp_path):
    opener = _open(backend, request, tmp_path)
    a, b = opener(), opener()
    try:
        rid = a.start_run(["gpu-01"], {"playbook": "p", "hosts": ["gpu-01"], "inputs": {}, "variables": {},
                                       "actor": "UALICE", "origin": "slack"})
        for i in range(TRIES):
            aid = a.approval_requested(rid, i, "gpu-01", "kill", "kill 42", [])
            gate = threading.Barrier(2)
            won: dict[str, bool] = {}

            def click(store, decision: str, who: str) -> None:
                gate.wait()
                won[who] = store.approval_decided(aid, decision, who)

            threads = [threading.Thread(target=click, args=(a, "approved", "UBOSS")),
                       threading.Thread(target=click, args=(b, "denied", "UCAROL"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(won.values()) == [False, True]
            winner = next(w for w, ok in won.items() if ok)
            row = b.get_approval(aid)
            assert (row["status"], row["decided_by"]) == \
                ({"UBOSS": "approved", "UCAROL": "denied"}[winner], winner)
    finally:
        a.close()
        b.close()


def _new_approval(fake, seen: set[str]):
    """The newest Approve/Deny message not seen yet: its action value."""
    for c in reversed(fake.ok_calls_to("chat.postMessage")):
        for blk in c.blocks():
            if blk.get("type") == "actions":
                value = blk["elements"][0]["value"]
                if value not in seen:
                    return value
    return None


def _answers(fake, names: set[str]) -> list[str]:
    return [c.all_text() for c in fake.calls_to("response_url") if c.args.get("_name") in names]


@pytest.mark.e2e
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_approve_and_deny_at_once_on_two_replicas_the_run_follows_the_row(backend, request, tmp_path, fake):
    db = str(tmp_path / "eagle.db") if backend == "sqlite" else request.getfixturevalue("pg_url")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    access = {"operators": ["UALICE"], "approvers": ["UBOSS", "UCAROL"], "viewers": ["*"]}
    waiting = await open_harness(tmp_path / "a", fake, audit_db=db, access=access)
    other = await open_harness(tmp_path / "b", fake, audit_db=db, access=access)
    other.n = 10_000   # its response_url names must not collide with the first replica's
    seen: set[str] = set()
    holder = None
    outcomes = []
    try:
        for i in range(TRIES):
            if holder is None or holder.poll() is not None:
                holder = start_foreign_gpu_holder(tmp_path / "a" / "sim-state")
            await waiting.command("guarded local")
            value = await fake.wait_for(lambda: _new_approval(fake, seen))
            seen.add(value)
            # alternate which replica gets which button; both are sent at once
            approve_on, deny_on = (waiting, other) if i % 2 == 0 else (other, waiting)
            n0 = (approve_on.n + 1, deny_on.n + 1)
            statuses = await asyncio.gather(approve_on.click(APPROVE_ACTION, value, user="UBOSS"),
                                            deny_on.click(DENY_ACTION, value, user="UCAROL"))
            assert statuses == [200, 200]
            run = await waiting.wait_run(await waiting.last_run_id())
            [row] = await waiting.query("select status, decided_by from approvals where run_id = $1", [run["id"]])
            assert (row["status"], row["decided_by"]) in {("approved", "UBOSS"), ("denied", "UCAROL")}
            approved = row["status"] == "approved"
            assert run["status"] == ("succeeded" if approved else "failed"), (i, row, run["status"])
            if approved:
                assert holder.wait(10) is not None   # the approved step killed it
            else:
                assert holder.poll() is None
            # the losing click is answered with the stored decision and its author
            loser = f"c{n0[1]}" if approved else f"c{n0[0]}"
            said = await fake.wait_for(lambda: _answers(fake, {loser}))
            who = "<@UBOSS>" if approved else "<@UCAROL>"
            assert f"it was {row['status']} by {who}" in said[0], said
            outcomes.append(row["status"])
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait()
        await waiting.close()
        await other.close()
    assert len(outcomes) == TRIES


async def test_two_approvers_on_one_replica_decide_once_without_a_traceback(harness, fake, stranger, caplog):
    harness = await harness(access={"operators": ["UALICE"], "approvers": ["UBOSS", "UCAROL"], "viewers": ["*"]})
    await harness.command("guarded local")
    value = await fake.wait_for(lambda: _new_approval(fake, set()))
    n = harness.n
    with caplog.at_level(logging.ERROR):
        await asyncio.gather(harness.click(DENY_ACTION, value, user="UBOSS"),
                             harness.click(APPROVE_ACTION, value, user="UCAROL"))
        run = await harness.wait_run(await harness.last_run_id())
    [row] = await harness.query("select status, decided_by from approvals")
    assert run["status"] == ("succeeded" if row["status"] == "approved" else "failed")
    assert (stranger.poll() is None) == (row["status"] == "denied")
    said = await fake.wait_for(lambda: _answers(fake, {f"c{n + 1}", f"c{n + 2}"}))
    assert len(said) == 1 and f"it was {row['status']} by <@{row['decided_by']}>" in said[0]
    assert not [r for r in caplog.records if "InvalidStateError" in (r.exc_text or r.getMessage())]
