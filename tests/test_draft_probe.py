"""draft.probe's reading of the server's per-request speculative stats (src/eaglebot/facts/spec/draft_accept.py),
on the REAL meta_info of SGLang 0.5.17 on an H200 (dummy weights: nothing accepted) and on the
shapes a wrong input and a weak draft give."""
from __future__ import annotations

import json
from pathlib import Path

from eaglebot.facts.spec import draft_accept as da

# captured on a real H200 (SGLang 0.5.17, --load-format dummy): /health, /generate, /server_info ...
REAL = Path(__file__).parent / "fixtures" / "sglang" / "0.5.17/h200-real"


def real_probes() -> dict:
    return json.loads((REAL / "probes.json").read_text())


def generate_output(metas: list, wall_s: float = 4.0) -> str:
    return "prompt 3: timed out\n" + json.dumps({"metas": metas, "wall_s": wall_s})


def test_real_0517_meta_info_with_dummy_weights_reads_as_unknown_never_a_crash():
    probes = real_probes()
    meta = probes["generate"]["body"]["meta_info"]
    info = json.loads((REAL / "server_info.json").read_text())
    stats = da.parse_generate(generate_output([meta] * 7 + [None]))
    assert stats.answered == 7 and stats.verify_ct == 7 * 63 and stats.histogram == [7 * 63]
    assert stats.positions(3) == [0.0]
    r = da.classify(stats, [0.747], info["speculative_num_steps"], info["speculative_eagle_topk"],
                    info["speculative_num_draft_tokens"], info["load_format"])
    assert r.verdict == "unknown" and r.summary.startswith("unknown: the server runs dummy weights (load_format=dummy)")
    assert r.numbers["accept_length"] == round(64 / 63, 3) and r.numbers["first"] == 0.0
    # the same numbers on real weights and a declared accuracy: nothing accepted is wrong inputs
    assert da.classify(stats, [0.747], 3, 1, 4, "auto").verdict == "wrong inputs"
    # and with no proxy to compare with, unknown with the numbers
    r = da.classify(stats, None, 3, 1, 4, "auto")
    assert r.verdict == "unknown" and "position 1 accepted 0%" in r.summary and "draft_train_accuracy" in r.summary


def test_the_histogram_gives_per_position_acceptance():
    s = da.Stats(answered=1, completion_tokens=0, verify_ct=100, histogram=[20, 16, 16, 48])
    assert [round(p, 3) for p in s.positions(3)] == [0.8, 0.8, 0.75]
    # SGLang's histogram ends at the longest acceptance it saw: the positions after it accepted nothing
    assert da.Stats(verify_ct=10, histogram=[5, 5]).positions(3) == [0.5, 0.0]


def test_wrong_inputs_weak_draft_and_as_expected_are_told_apart():
    def stats(hist: list[int]) -> da.Stats:
        n = sum(hist)
        return da.Stats(answered=8, completion_tokens=n + sum(k * c for k, c in enumerate(hist)), verify_ct=n,
                        histogram=hist)

    acc = [0.75, 0.72, 0.70]
    # first position far below training, the later ones near zero: the signature of other hidden states
    wrong = da.classify(stats([870, 125, 5]), acc, 3, 1, 4)
    assert wrong.verdict == "wrong inputs" and wrong.summary.startswith("wrong inputs: position 1 accepted 13% (training 75%)")
    # low but smooth: every position a similar share of its proxy
    weak = da.classify(stats([600, 160, 96, 144]), acc, 3, 1, 4)
    assert weak.verdict == "weak draft", weak
    good = da.classify(stats([250, 150, 120, 480]), acc, 3, 1, 4)
    assert good.verdict == "as expected" and "(~2.67 expected at steps=3 topk=1)" in good.summary, good
    assert da.classify(da.Stats(), acc, 3, 1, 4).verdict == "unknown"
    assert "no speculative stats" in da.classify(da.Stats(answered=2, completion_tokens=9), acc, 3, 1, 4).summary


def test_without_a_histogram_the_accept_length_stands_for_every_position():
    s = da.Stats(answered=8, completion_tokens=400, verify_ct=380)     # accept length 1.05
    r = da.classify(s, [0.75], 3, 1, 4)
    assert r.verdict == "wrong inputs" and r.numbers["positions"] == [] and r.numbers["first"] < 0.1


def test_expected_length_is_specforges_simulated_acc_len_plus_the_bonus_token():
    assert round(da.expected_length([0.8, 0.5], 2), 3) == round(1 + 0.8 + 0.4, 3)
    assert round(da.expected_length([0.5], 3), 3) == 1.875


def test_the_real_pairs_histograms_against_its_own_history():
    """The real trained pair's /generate histograms (docs/gpu-validation.md, run 2; 16 prompts x 128
    tokens): the position-1 bar cannot tell the one-off list 0,2,4 from the trained 1,3,5, the draft's
    own accept length under 1,3,5 can; never `as expected` with a list training did not use."""
    def stats(hist: list[int]) -> da.Stats:
        n = sum(hist)
        return da.Stats(answered=16, completion_tokens=n + sum(k * c for k, c in enumerate(hist)), verify_ct=n,
                        histogram=hist)

    acc = [0.92, 0.93, 0.92]                  # the kit's training accuracy per position
    trained = da.classify(stats([68, 50, 29, 450]), acc, 3, 1, 4, "auto")
    off = da.classify(stats([121, 87, 47, 405]), acc, 3, 1, 4, "auto")
    assert [round(p, 3) for p in trained.numbers["positions"]] == [0.886, 0.905, 0.939]
    assert trained.verdict == off.verdict == "as expected"        # what the bands alone say
    own = da.Own(trained.numbers["accept_length"], [1, 3, 5], 12)
    judged = da.against_own(off, own, mismatch=True)
    assert judged.verdict == "measured drop" and judged.summary.startswith(
        f"measured drop: accept length {off.numbers['accept_length']:.2f} vs {own.accept_length:.2f} with [1, 3, 5] "
        f"in run 12 (-"), judged.summary
    assert "position 1 accepted 82% (training 92%)" in judged.summary and judged.numbers["own"]["run_id"] == 12
    assert -0.10 < judged.numbers["own"]["change"] < -0.04
    # no history: still not `as expected`; the same list, within noise: as it was
    assert da.against_own(off, None, mismatch=True).verdict == "capture mismatch"
    assert da.against_own(trained, own, mismatch=False).verdict == "as expected"
    assert da.against_own(trained, own, mismatch=True).verdict == "no measured drop"
    assert da.against_own(trained, None, mismatch=False) == trained


def test_the_histogram_is_read_by_the_servers_release():
    """0.5.17 sends spec_correct_drafts_histogram and its alias spec_accept_histogram (the real capture
    above); 0.5.23 only the first: the alias is read only where the release has it."""
    alias_only = generate_output([{"completion_tokens": 9, "spec_verify_ct": 4, "spec_accept_histogram": [1, 1, 2]}])
    assert da.parse_generate(alias_only, "0.5.17").histogram == [1, 1, 2]
    assert da.parse_generate(alias_only, "0.5.23").histogram == []
    both = generate_output([{"completion_tokens": 9, "spec_verify_ct": 4, "spec_correct_drafts_histogram": [0, 2, 2],
                             "spec_accept_histogram": [1, 1, 2]}])
    assert da.parse_generate(both, "0.5.17").histogram == da.parse_generate(both, "0.5.23").histogram == [0, 2, 2]
    assert da.histogram_keys(None) == da.histogram_keys("0.5.17") and da.histogram_keys("0.6.0") == (
        "spec_correct_drafts_histogram",)


async def test_an_answer_nested_200000_deep_fails_the_probe_with_a_sentence():
    """Whatever answers on the port (a hostile host's own server) may nest its JSON 200,000 deep
    (issue 46, LOW): /server_info and the prompts' answers each fail the step with one sentence,
    never a RecursionError."""
    import re

    from eaglebot.facts.host import ports
    from eaglebot.facts.sglang import release
    from eaglebot.skills import draft_probe
    from eaglebot.testing import Host, run_skill

    deep = "[" * 200_000 + "]" * 200_000
    host = Host("gpu-01").on(ports.TCP_TABLES_COMMAND, stdout="").on(re.compile("server_info"), stdout=f"{deep}\n200")
    res = await run_skill(draft_probe, host, {"port": 30000})
    assert res.status == "failed" and "/server_info on port 30000 is not JSON (or nested too deep" in res.summary
    info = json.dumps({"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3})
    host = (Host("gpu-01").on(ports.TCP_TABLES_COMMAND, stdout="").on(re.compile("server_info"), stdout=f"{info}\n200")
            .on(re.compile("max_new_tokens|-c "), stdout=f'{{"metas": {deep}, "wall_s": 1}}\n'))
    res = await run_skill(draft_probe, host, {"port": 30000})
    assert res.status == "failed" and "nested too deep to read" in res.summary, res.summary
    try:
        release.parse_server_info(deep)
        raise AssertionError("no error")
    except ValueError as e:
        assert "nested too deep" in str(e)

