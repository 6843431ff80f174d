"""Approval cards tell the truth (issue 24): who may approve (never the requester when
self-approval is off) and how it ended (approved, denied, cancelled by X, expired at T).
The cards' words here; the cards in a conversation (who denied, who cancelled) are
tests/test_slack_handlers.py's, through the chat test bot."""
from __future__ import annotations

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
