"""Block Kit rendering stays within Slack's limits whatever the run looks like."""
from __future__ import annotations

from eaglebot.frontends.slack import blocks as bk
from eaglebot.sdk import ApprovalRequest


def assert_within_limits(blocks):
    assert len(blocks) <= 50
    for b in blocks:
        if b["type"] == "section":
            if "text" in b:
                assert len(b["text"]["text"]) <= 3000
            assert len(b.get("fields") or []) <= 10
        if b["type"] == "header":
            assert len(b["text"]["text"]) <= 150
        if b["type"] == "context":
            assert len(b["elements"]) <= 10


def huge_view():
    return {
        "run_id": 7, "playbook": "p" * 300, "hosts": [f"gpu-{i:02d}" for i in range(40)], "actor": "UALICE",
        "status": "failed", "duration_s": 4000.0, "error": "E" * 5000,
        "steps": [{"host": f"gpu-{i % 40:02d}", "name": f"step {i}", "status": "failed" if i % 7 == 0 else "ok",
                   "summary": "s" * 400, "duration_ms": 1200, "multi_host": True,
                   "output_tail": "log line\n" * 3000} for i in range(300)],
        "metrics": [{"host": "gpu-01", "name": f"m{i}", "value": i * 1.5, "unit": "tok/s"} for i in range(30)],
        "warnings": ["speculative_num_draft_tokens is adjusted to speculative_num_steps + 1"] * 100,
        "regressions": [{"host": "gpu-01", "metric": "output_throughput", "value": 80.0, "reference": 90.0,
                         "delta_pct": -11.1, "reason": "below baseline", "kind": "regression"}] * 20,
        "plan": ["gpu-01: kill: would kill pid 1"] * 2000,
    }


def test_a_huge_run_summary_stays_within_block_kit_limits():
    blocks = bk.run_summary_blocks(huge_view())
    assert_within_limits(blocks)
    text = str(blocks)
    assert "REGRESSION" in text and "log tail" in text and "truncated" in text


def test_progress_and_parent_messages_stay_within_limits():
    view = huge_view()
    assert_within_limits(bk.run_progress_blocks(view))
    assert_within_limits(bk.run_parent_blocks(view))


def test_long_text_and_logs_are_cut_with_a_note():
    blocks = bk.text_blocks("line\n" * 100_000, title="T" * 500, code=True)
    assert_within_limits(blocks)
    assert "cut" in str(blocks[-1])


def test_text_from_hosts_cannot_mention_or_link():
    view = {"run_id": 1, "playbook": "x", "hosts": ["h"], "actor": "UALICE", "status": "failed",
            "error": "<!channel> <https://evil|click>", "steps": [
                {"host": "h", "name": "<@U999>", "status": "failed", "summary": "<!here>", "duration_ms": 1,
                 "output_tail": "<!everyone>"}]}
    text = str(bk.run_summary_blocks(view))
    for bad in ("<!channel>", "<!here>", "<!everyone>", "<@U999>", "<https://"):
        assert bad not in text


def test_a_denied_or_expired_card_says_what_the_refusal_left_untouched():
    ar = ApprovalRequest(3, "gpu-01", "plan the relaunch", "relaunch on gpu-01: the server on port 30000 (pid 898, "
                         "up 3 d) will be stopped; 1 GPU process ...", ["pid 11 user bob: python train.py"], 2,
                         "nothing was touched: the server on port 30000 (pid 898) still runs")
    for decision in ("denied", "expired"):
        text = str(bk.approval_decided_blocks(ar, decision, "UBOB", "2026-12-03 18:00:00"))
        assert "nothing was touched: the server on port 30000 (pid 898) still runs" in text
    assert "nothing was touched" not in str(bk.approval_decided_blocks(ar, "approved", "UBOB"))


def test_approval_buttons_say_exactly_what_will_happen():
    ar = ApprovalRequest(3, "gpu-01", "cleanup", "kill 2 processes the bot did not start",
                         ["pid 11 user bob: python train.py", "pid 12 user eve: python serve.py"], 1)
    blocks = bk.approval_blocks(ar, "k3y", ["UBOSS", "UCTO"], 900)
    assert_within_limits(blocks)
    text = str(blocks)
    assert "pid 11 user bob: python train.py" in text and "<@UBOSS>" in text and "15m00s" in text
    actions = [b for b in blocks if b["type"] == "actions"][0]["elements"]
    assert [(a["action_id"], a["value"]) for a in actions] == [(bk.APPROVE_ACTION, "k3y"), (bk.DENY_ACTION, "k3y")]
