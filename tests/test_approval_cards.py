"""Approval cards tell the truth (issue 24): who may approve (never the requester when
self-approval is off) and how it ended (approved, denied, cancelled by X, expired at T).
The Bolt app over real HTTP with signed requests; the Web API is the local fake."""
from __future__ import annotations

from slack_harness import approval_message

from eaglebot.frontends.slack import blocks as bk
from eaglebot.sdk import ApprovalRequest


def test_the_card_never_offers_the_requester_when_self_approval_is_off():
    ar = ApprovalRequest(3, "gpu-01", "cleanup", "kill 1 process the bot did not start", [], 1)
    off = str(bk.approval_blocks(ar, "k", ["UBOSS", "UALICE"], 60, requester="UALICE", self_approval=False))
    assert "Only approvers can decide: <@UBOSS>." in off and "<@UALICE>" not in off
    on = str(bk.approval_blocks(ar, "k", ["UBOSS", "UALICE"], 60, requester="UALICE", self_approval=True))
    assert "<@UBOSS> <@UALICE>" in on
    assert bk.approvers_text(["*"], "UALICE", False) == "any approver but not <@UALICE>, who asked (self-approval is off)"
    alone = bk.approvers_text(["UALICE"], "UALICE", False)
    assert alone.startswith("nobody: the only approver, <@UALICE>, asked for this run")


def test_each_outcome_has_its_own_words():
    assert bk.decision_text("approved", "UBOSS") == "Approved by <@UBOSS>"
    assert bk.decision_text("denied", "UBOSS") == "Denied by <@UBOSS>"
    assert bk.decision_text("cancelled", "UBOB") == "Cancelled by <@UBOB>: the run was cancelled while it waited"
    assert bk.decision_text("expired", at="2026-12-01 10:00:00") == \
        "Expired at 2026-12-01 10:00:00 UTC with no decision: denied, nothing was done"


async def test_a_cancelled_approval_says_cancelled_by_whom_not_timed_out(harness, fake, stranger, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="eaglebot.audit")
    h = await harness(access={"operators": ["UALICE", "UBOSS"], "approvers": ["UBOSS", "UALICE"],
                              "viewers": ["*"]})
    await h.command("guarded", user="UALICE")
    msg, _key = await fake.wait_for(lambda: approval_message(fake))
    card = str(msg.args.get("blocks"))
    assert "Only approvers can decide: <@UBOSS>." in card and "<@UALICE>" not in card
    rid = await h.last_run_id()
    await h.command(f"cancel {rid}", user="UBOSS")
    run = await h.wait_run(rid)
    assert run["status"] == "cancelled"
    assert stranger.poll() is None
    update = await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.update")
                                          if c.args["ts"] == msg.answer["ts"] and "Cancelled by" in c.all_text()])
    assert "Cancelled by <@UBOSS>" in update[0].all_text() and "No decision" not in update[0].all_text()
    assert await h.query("select status from approvals") == [{"status": "cancelled"}]
    # the operators' log says what the store says (issue 34: it said "expired")
    decided = [r.getMessage() for r in caplog.records if r.name == "eaglebot.audit"
               and r.getMessage().startswith(f"approval for run #{rid} ")]
    assert decided == [f"approval for run #{rid} cancelled host=local step=\"kill strangers\" by=UBOSS"], decided


async def test_a_denied_card_names_who_denied(harness, fake, stranger):
    h = await harness()
    await h.command("guarded")
    msg, key = await fake.wait_for(lambda: approval_message(fake))
    await h.click(bk.DENY_ACTION, key, user="UBOSS")
    await h.wait_run(await h.last_run_id())
    await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.update")
                                 if c.args["ts"] == msg.answer["ts"] and "Denied by <@UBOSS>" in c.all_text()])
