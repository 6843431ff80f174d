"""facts/spec/live.py: "speculation is really on" and the lossless-voiding knobs, on readings shaped as
SGLang 0.5.23's /server_info and /generate meta_info (the simulator's, tests/test_server_skills.py
drives them end to end)."""
from __future__ import annotations

from eaglebot.facts.spec import live
from eaglebot.facts.spec.draft_accept import Stats

INFO = {"version": "0.5.23", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
        "speculative_accept_threshold_single": 1.0, "speculative_accept_threshold_acc": 1.0,
        "load_format": "auto", "internal_states": [{"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                                                    "speculative_accept_threshold_single": 1.0,
                                                    "speculative_accept_threshold_acc": 1.0}]}
GOOD = Stats(answered=2, completion_tokens=128, verify_ct=40, histogram=[10, 12, 10, 8])
NOTHING = Stats(answered=2, completion_tokens=128, verify_ct=126, histogram=[126])


def test_each_broken_check_is_named_and_a_healthy_reading_is_on():
    assert live.really_on(INFO, GOOD).verdict == "on"
    off = live.really_on(INFO, NOTHING)
    assert off.verdict == "off" and off.failures == [
        "the per-request histogram has no mass beyond 0 accepted drafts ([126])", "accept length 1.02 (<= 1.05)"]
    step0 = dict(INFO, internal_states=[dict(INFO["internal_states"][0], speculative_num_steps=0)])
    assert live.really_on(step0, GOOD).failures == [
        "/server_info reports speculative_num_steps=0 (an adaptive step-0 tier: drafting disabled)"]
    none = dict(INFO, speculative_algorithm=None, internal_states=[{}])
    assert live.really_on(none, GOOD).failures == ["/server_info reports no speculative_algorithm"]
    weak = live.really_on(INFO, GOOD, own=4.0)          # 3.2 now, 4.0 before: 80% holds
    assert weak.verdict == "on" and weak.numbers["own_share"] == 0.8
    dropped = live.really_on(INFO, GOOD, own=4.5)
    assert dropped.failures == ["accept length 3.20 is 71% of this draft's own 4.50 under the same settings (< 80%)"]


def test_dummy_weights_accepting_nothing_is_unknown_not_an_alarm():
    v = live.really_on(dict(INFO, load_format="dummy"), NOTHING)
    assert v.verdict == "unknown (dummy weights)" and v.failures == []
    assert "dummy weights (load_format=dummy)" in v.summary


def test_lossy_knobs_at_launch_and_at_runtime():
    assert live.lossy_launch({"--speculative-accept-threshold-acc": "0.7", "--port": "1"},
                                  {"SGLANG_SIMULATE_ACC_LEN": "3"}) == [
        "SGLANG_SIMULATE_ACC_LEN=3 in the server's environment (fakes the acceptance)",
        "--speculative-accept-threshold-acc 0.7 (below 1: accepts drafts the target rejected)"]
    assert live.lossy_launch({"--speculative-accept-threshold-single": "1.0"}, {}) == []
    assert live.lossy_running({}, INFO) == []
    changed = dict(INFO, internal_states=[dict(INFO["internal_states"][0], speculative_accept_threshold_single=0.4)])
    assert live.lossy_running(None, changed) == [
        "internal_states[0].speculative_accept_threshold_single=0.4, changed at runtime (POST /set_internal_state; "
        "below 1: accepts drafts the target rejected)"]


def test_ngram_steps_are_accounting_so_zero_is_not_off():
    """NGRAM's speculative_num_steps is draft tokens // BFS breadth (0 for 8 tokens under breadth 10); its
    worker drafts `speculative_num_draft_tokens` all the same (ngram_worker.py)."""
    ngram = dict(INFO, speculative_algorithm="NGRAM", speculative_num_steps=0,
                 internal_states=[dict(INFO["internal_states"][0], speculative_algorithm="NGRAM", speculative_num_steps=0)])
    assert live.really_on(ngram, GOOD).verdict == "on"
