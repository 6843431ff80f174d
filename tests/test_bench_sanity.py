"""bench.serving's sanity checks: a draft model that accepts nothing and a run that completed
only part of its requests, on the pure check and end to end against the SIMULATED SGLang."""
from __future__ import annotations

import json

from eaglebot.engine.runner import RunRequest
from eaglebot.facts.bench.sanity import check
from test_server_skills import FAST, failed_step, local_host, open_svc  # noqa: F401  (local_host: fixture)


def test_accept_length_at_or_under_1_05_fails_only_with_speculative_decoding():
    assert check([64], 64, speculative="EAGLE3", accept_length=1.0).failure == (
        "accept length 1.00 with EAGLE3 (<= 1.05): the draft model accepts nothing: check the draft path and "
        "algorithm")
    assert check([64], 64, speculative="EAGLE3", accept_length=1.05).failure is not None
    ok = check([64], 64, speculative="EAGLE3", accept_length=1.06)
    assert (ok.failure, ok.warnings) == (None, [])
    assert check([64], 64, speculative=None, accept_length=None).failure is None
    unknown = check([64], 64, speculative="EAGLE", accept_length=None)
    assert unknown.failure is None and unknown.warnings == [
        "speculative decoding (EAGLE) is on but the accept length is unknown"]


def test_missing_requests_warn_with_both_numbers_and_fail_under_90_percent():
    w = check([2900], 3000, speculative=None, accept_length=None)
    assert w.failure is None and w.warnings == [
        "only 2900 of 3000 benchmark requests completed (97%); the numbers describe the part that finished"]
    f = check([3000, 1648], 3000, speculative=None, accept_length=None)
    assert f.failure == ("only 1648 of 3000 benchmark requests completed (55%), under 90%: the numbers would "
                         "describe the part that finished")
    assert check([2700], 3000, speculative=None, accept_length=None).failure is None
    assert check([30], 40, speculative=None, accept_length=None, min_completed_fraction=0.5).failure is None


async def test_an_eagle_run_whose_draft_accepts_nothing_fails_and_records_no_numbers(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    env = dict(FAST, EAGLE_SIM_ACCEPT_LEN="1.0", EAGLE_SIM_COMPLETE_FRACTION="0.95")
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
        "env": json.dumps(env), "bench_prompts": "20", "bench_input_len": "64", "bench_output_len": "64",
        "spec_check": "warn"}))     # past the launch's own check, which warns (spec_live's tests)
    bad = failed_step(out)
    assert bad.skill == "bench.serving"
    assert "gpu: speculation is not really on: the per-request histogram has no mass beyond 0 accepted drafts " \
           "([63]); accept length 1.02 (<= 1.05)" in out.warnings
    assert bad.summary.startswith("accept length 1.00 with EAGLE3 (<= 1.05): the draft model accepts nothing")
    assert any("only 19 of 20 benchmark requests completed (95%)" in w for w in out.warnings)
    assert [m for m in svc.store.sync.metrics(out.run_id) if m["name"] == "output_throughput"] == []


async def test_a_bench_that_completed_half_its_requests_fails_with_both_numbers(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    env = dict(FAST, EAGLE_SIM_COMPLETE_FRACTION="0.5")
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
        "env": json.dumps(env), "bench_prompts": "20", "bench_input_len": "64", "bench_output_len": "64"}))
    bad = failed_step(out)
    assert bad.skill == "bench.serving" and bad.summary.startswith(
        "only 10 of 20 benchmark requests completed (50%), under 90%")


def test_ngram_accepting_nothing_on_random_prompts_is_a_warning_not_a_refusal():
    """NGRAM drafts from n-gram repeats in each request's own context; random benchmark prompts have none."""
    s = check([8], 8, speculative="NGRAM", accept_length=1.0)
    assert s.failure is None and s.warnings == [
        "accept length 1.00 with NGRAM on this benchmark: its drafts come from n-gram repeats in each request's "
        "context, which random prompts do not have; the greedy probe after it says whether speculation is on"]
    assert (check([8], 8, speculative="DFLASH", accept_length=1.0).failure or "").startswith(
        "accept length 1.00 with DFLASH (<= 1.05)")
