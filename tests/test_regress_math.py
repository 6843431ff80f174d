"""Regression math on synthetic series (pure functions)."""
from __future__ import annotations

import random

from eaglebot.history.attribution import attribution, attribution_text, parse_launch_args
from eaglebot.history.keydiff import key_changes_from_diff
from eaglebot.history.regress import judge, robust_sigma


def around(center: float, pct: float, n: int, seed: int = 7) -> list[float]:
    rnd = random.Random(seed)
    return [center * (1 + rnd.uniform(-pct, pct) / 100) for _ in range(n)]


def test_throughput_drop_from_90_to_54_8_is_a_regression():
    j = judge("output_throughput", 54.8, around(90, 2, 10), better="higher", unit="tok/s")
    assert j.verdict == "regression"
    assert 85 < j.reference < 95
    assert j.delta_pct < -35
    assert "below the median" in j.reason and "tok/s" in j.reason


def test_noisy_three_percent_series_raises_no_alarm():
    hist = around(90, 3, 10, seed=1)
    for v in around(90, 3, 20, seed=2):
        assert judge("output_throughput", v, hist).verdict == "ok"


def test_change_above_min_pct_but_within_noise_is_not_flagged():
    hist = [80, 100, 85, 95, 90, 82, 98, 88, 93, 86]  # very noisy: ~±10%
    j = judge("output_throughput", 84.0, hist)
    assert abs(j.delta_pct) > 5
    assert j.verdict == "ok" and "sigma" in j.reason


def test_change_beyond_sigmas_but_under_min_pct_is_not_flagged():
    hist = [100.0, 100.1, 99.9, 100.0, 100.05, 99.95]
    j = judge("output_throughput", 98.0, hist)  # ~20 sigma, but only 2%
    assert j.verdict == "ok"


def test_acceptance_length_jump_is_an_improvement():
    j = judge("accept_length", 4.7, around(1.8, 3, 8), better="higher")
    assert j.verdict == "improvement"
    r = j.as_regression("gpu-01")
    assert r.kind == "improvement" and r.host == "gpu-01" and r.delta_pct > 100


def test_too_little_history_says_insufficient_history():
    j = judge("output_throughput", 10.0, [90, 91, 89, 90], min_history=5)
    assert j.verdict == "insufficient"
    assert "insufficient history" in j.reason and "4 prior runs" in j.reason
    assert j.as_regression("h") is None


def test_lower_is_better_metric_direction():
    hist = around(40, 2, 10)  # TTFT ms
    assert judge("median_ttft_ms", 80.0, hist, better="lower").verdict == "regression"
    assert judge("median_ttft_ms", 20.0, hist, better="lower").verdict == "improvement"
    assert judge("output_throughput", 80.0, around(40, 2, 10), better="higher").verdict == "improvement"


def test_identical_history_uses_percentage_alone():
    hist = [90.0] * 6
    assert robust_sigma(hist) == 0
    assert judge("x", 90.0, hist).verdict == "ok"
    assert judge("x", 88.0, hist).verdict == "ok"          # 2.2% < 5%
    assert judge("x", 80.0, hist).verdict == "regression"  # 11% and no spread


def test_mad_zero_falls_back_to_mean_absolute_deviation():
    hist = [90.0] * 6 + [60.0, 120.0]  # MAD 0, but the series is not constant
    s = robust_sigma(hist)
    assert s > 0
    assert judge("x", 84.0, hist).verdict == "ok"  # 6.7% but well within the spread


def test_zero_median_does_not_divide_by_zero():
    j = judge("errors", 3.0, [0.0] * 6, better="lower")
    assert j.verdict == "regression"


UNIFIED = """--- a/config.json
+++ b/config.json
@@ -10,9 +10,9 @@
   "eagle_config": {
     "eagle_aux_hidden_state_layer_ids": [
+      -1,
       2,
-      30,
-      58
+      30
     ],
     "use_aux_hidden_state": true
"""


def test_key_level_change_from_a_partial_unified_diff():
    kc = key_changes_from_diff(UNIFIED)
    assert kc == {"eagle_config.eagle_aux_hidden_state_layer_ids": ([2, 30, 58], [-1, 2, 30])}


def test_key_level_change_from_before_after_json():
    import json

    diff = json.dumps({"before": {"a": {"b": 1}, "c": 2}, "after": {"a": {"b": 3}, "c": 2}})
    assert key_changes_from_diff(diff) == {"a.b": (1, 3)}


def test_key_level_change_from_a_whole_file_diff():
    import difflib
    import json

    before = json.dumps({"x": 1, "y": {"z": [1, 2]}}, indent=2).splitlines(keepends=True)
    after = json.dumps({"x": 1, "y": {"z": [1, 3]}}, indent=2).splitlines(keepends=True)
    diff = "".join(difflib.unified_diff(before, after, "a", "b", n=100))
    assert key_changes_from_diff(diff) == {"y.z": ([1, 2], [1, 3])}


def test_attribution_names_config_launch_version_and_package_changes():
    good = {"launch_args": ["--model-path", "/m", "--speculative-num-steps", "3"], "sglang_version": "0.5.22",
            "effective": {"speculative_num_steps": 3, "speculative_eagle_topk": 1},
            "config": {}, "files": {}, "packages": {"torch": "2.14.0"}}
    now = {"launch_args": ["--model-path", "/m", "--speculative-num-steps", "5", "--enable-x"],
           "sglang_version": "0.5.23", "effective": {"speculative_num_steps": 5, "speculative_eagle_topk": 4},
           "config": {}, "files": {}, "packages": {"torch": "2.14.1"}}
    items = attribution(good, now, [{"path": "/d/config.json", "diff": UNIFIED}], [])
    text = attribution_text(41, items, "gpu-01")
    assert text.startswith("changed since last good run #41: "
                           "eagle_config.eagle_aux_hidden_state_layer_ids [2, 30, 58] → [-1, 2, 30]")
    assert "launch --speculative-num-steps 3 → 5" in text
    assert "launch --enable-x (unset) → (on)" in text
    assert "effective speculative_eagle_topk 1 → 4" in text
    assert "effective speculative_num_steps" not in text  # already named by the launch argument
    assert "sglang 0.5.22 → 0.5.23" in text and "torch 2.14.0 → 2.14.1" in text


def test_attribution_with_nothing_changed_or_no_good_run():
    assert "nothing recorded changed" in attribution_text(3, [], "h")
    assert "no earlier good run" in attribution_text(None, [], "h")


def test_parse_launch_args_pairs_flags_with_values():
    assert parse_launch_args(["--tp", "2", "--x=1", "--flag", "--port", "30000"]) == {
        "--tp-size": "2", "--x": "1", "--flag": True, "--port": "30000"}


def test_greedy_outputs_are_compared_token_by_token_and_each_difference_is_a_tie_or_lossy():
    from eaglebot.facts.bench import correctness

    ref = [[1, 2, 3], [4, 5, 6], [7, 8], [9]]
    m = correctness.compare(ref, [[1, 2, 3], [4, 5, 9], [7, 8], None])
    assert (m.matched, m.total, m.rate) == (2, 4, 0.5)
    d = m.diffs[0]
    assert (d.prompt, d.token, d.want, d.got) == (1, 2, 6, 9) and m.first_diff_text() == "prompt 1 token 2: 6 (reference) vs 9, no margin recorded"
    assert [d.kind for d in m.diffs] == ["unexplained", "unexplained"]
    short = correctness.compare([[1, 2, 3]], [[1, 2]])
    assert short.first_diff_text() == "prompt 0 token 2: 3 (reference) vs (end), no margin recorded"
    assert correctness.compare(ref, ref).diffs == ()
    # the reference's top-2 per position ([top-1 id, logprob, top-2 id, logprob]): a tie at 0.0 and one
    # bf16 step (0.0625) explain a divergence, two steps (0.125) still do, 0.1875 does not
    row = lambda a, la, b, lb: [a, la, b, lb]  # noqa: E731
    ref = [[1, 2, 3], [4, 5, 6], [7, 8], [9, 10], [11]]
    top2 = [[row(1, -0.1, 5, -0.1), row(2, -0.5, 8, -0.5), row(3, -1.0, 7, -3.0)],
            [row(4, -0.2, 1, -4.0), row(5, -0.9, 2, -0.9625), row(6, -0.1, 9, -5.0)],
            [row(7, -0.3, 3, -0.425), row(8, -0.2, 9, -2.2)],
            [row(9, -0.3, 3, -0.4875), row(10, -0.2, 9, -2.2)], None]
    m = correctness.compare(ref, [[1, 8, 0], [4, 2, 6], [7, 9], [9, 3], None], top2)
    assert [(d.prompt, d.token, d.margin, d.kind) for d in m.diffs] == [
        (0, 1, 0.0, "tie"), (1, 1, 0.0625, "tie"), (2, 1, 2.0, "lossy"), (3, 1, 2.0, "lossy"),
        (4, 0, None, "unexplained")]
    assert (m.count("tie"), m.count("lossy"), m.rate, m.exact_rate) == (2, 2, 0.4, 0.0)
    assert m.diffs[0].text() == "prompt 0 token 1: 2 (reference) vs 8, the reference's runner-up, top-2 margin 0 nats"
    m = correctness.compare([[7, 8], [9, 10]], [[3, 0], [3, 0]], [[row(7, -0.3, 3, -0.425)], [row(9, -0.3, 3, -0.4875)]])
    assert [(d.margin, d.kind) for d in m.diffs] == [(0.125, "tie"), (0.1875, "lossy")]
    assert correctness.top2_rows([[[-0.5, 17, None], [-0.75, 4, None]], [[-0.1, 3, None]], None]) == [
        [17, -0.5, 4, -0.75], None, None]
    texts = correctness.prompts(0, 32)
    assert texts == correctness.prompts(0, 32) and len(set(texts)) == 32 and texts != correctness.prompts(1, 32)
    assert correctness.reference_key("/m", texts, 32) != correctness.reference_key("/m", texts, 64)
