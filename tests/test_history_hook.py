"""history_hook on a seeded audit store: judgement, fingerprint, attribution, baselines."""
from __future__ import annotations

from support.history_seed import seed_run

from eaglebot.history.hook import history_hook
from eaglebot.engine.runner import RunOutcome, StepRecord
from eaglebot.sdk import FileChange, Metric
from eaglebot.store.rows import NewRun, StepEnd

UNIFIED = """--- a/config.json
+++ b/config.json
@@ -3,7 +3,7 @@
   "eagle_config": {
     "eagle_aux_hidden_state_layer_ids": [
-      2,
-      30,
-      58
+      -1,
+      2,
+      30
     ]
"""
LAUNCH_OLD = {"launch_args": ["--model-path", "/m", "--speculative-num-steps", "3"], "sglang_version": "0.5.23",
              "effective": {"speculative_num_steps": 3}}
LAUNCH_NEW = {"launch_args": ["--model-path", "/m", "--speculative-num-steps", "3"], "sglang_version": "0.5.23",
              "effective": {"speculative_num_steps": 3}}


async def new_run(svc, playbook: str, host: str, metrics: list[Metric], failed: bool = False) -> RunOutcome:
    rid = await svc.store.call(lambda s: s.create_run(NewRun(playbook=playbook, hosts=[host], inputs={}, variables={}, actor="t",
                                     origin="cli")))
    steps = [StepRecord(host, 0, "steps", "bench", "bench.serving", "failed" if failed else "ok")]
    return RunOutcome(rid, playbook, [host], "running", 0, steps=steps, metrics=[(host, m) for m in metrics])


async def test_regression_names_the_config_change_since_the_last_good_run(services):
    svc = await services()
    s = svc.store.sync
    seed_run(s, "relaunch", "gpu-01", launch=LAUNCH_OLD, package_versions={"torch": "2.14.0"},
             metrics={"output_throughput": 90.0})
    good = None
    for v in (90.5, 89.4, 91.0, 90.2, 89.8):
        good = seed_run(s, "relaunch", "gpu-01", metrics={"output_throughput": v})
    # a patch + relaunch run of another playbook, then the nightly bench sees the drop
    seed_run(s, "patch-config", "gpu-01",
             patch={"path": "/d/config.json", "set": {"eagle_config.eagle_aux_hidden_state_layer_ids": [-1, 2, 30]}},
             change=FileChange("/d/config.json", "aa", "bb", UNIFIED, "/d/config.json.eagle-7-0.bak"),
             package_versions={"torch": "2.14.1"})
    suspect = await new_run(svc, "relaunch", "gpu-01", [Metric("output_throughput", 54.8, "tok/s")])
    assert await history_hook(svc.engine, suspect, None) == []     # one bad night: a suspect
    sid = s.step_started(suspect.run_id, 0, "gpu-01", "bench", "bench.serving", {})
    s.step_finished(sid, StepEnd(run_id=suspect.run_id, host="gpu-01", status="ok", summary="", duration_ms=1, attempts=1,
                    metrics=[Metric("output_throughput", 54.8, "tok/s")]))
    s.finish_run(suspect.run_id, "succeeded", exit_code=0)
    out = await new_run(svc, "relaunch", "gpu-01", [Metric("output_throughput", 55.0, "tok/s")])
    regs = await history_hook(svc.engine, out, None)
    assert [r.kind for r in regs] == ["regression"]
    r = regs[0]
    # the good run is the one before the drop's first night, not the suspect night
    assert r.metric == "output_throughput" and r.host == "gpu-01" and r.value == 55.0
    assert 89 < r.reference < 91 and r.delta_pct < -35
    assert (f"changed since last good run #{good}: "
            "eagle_config.eagle_aux_hidden_state_layer_ids [2, 30, 58] → [-1, 2, 30]") in r.reason
    assert "torch 2.14.0 → 2.14.1" in r.reason
    fp = (await svc.store.call(lambda s: s.get_run(out.run_id)))["fingerprint"]
    assert fp["gpu-01"]["launch_args"] == LAUNCH_OLD["launch_args"]
    assert fp["gpu-01"]["files"] == {"/d/config.json": "bb"}
    assert fp["gpu-01"]["config"]["/d/config.json"] == {"eagle_config.eagle_aux_hidden_state_layer_ids": [-1, 2, 30]}


async def test_launch_argument_change_is_attributed(services):
    svc = await services(regression={"confirm_runs": 1})
    s = svc.store.sync
    for v in (90, 91, 89, 90, 90.5):
        seed_run(s, "bench", "local", metrics={"output_throughput": v}, launch=LAUNCH_OLD)
    new_launch = dict(LAUNCH_NEW, launch_args=["--model-path", "/m", "--speculative-num-steps", "5"],
                      sglang_version="0.5.24", effective={"speculative_num_steps": 5})
    seed_run(s, "relaunch", "local", launch=new_launch)
    out = await new_run(svc, "bench", "local", [Metric("output_throughput", 60.0, "tok/s")])
    [r] = await history_hook(svc.engine, out, None)
    assert "launch --speculative-num-steps 3 → 5" in r.reason
    assert "sglang 0.5.23 → 0.5.24" in r.reason


async def test_insufficient_history_flags_nothing_and_is_noted(services):
    svc = await services()
    for v in (90, 91, 89):
        seed_run(svc.store.sync, "bench", "local", metrics={"output_throughput": v})
    out = await new_run(svc, "bench", "local", [Metric("output_throughput", 20.0, "tok/s")])
    assert await history_hook(svc.engine, out, None) == []
    notes = list(svc.store.sync.db.query("select message from events where run_id = $1", [out.run_id]))
    assert "insufficient history: 3 prior runs (need 5)" in notes[0]["message"]


async def test_failed_and_dry_runs_are_not_judged(services):
    svc = await services()
    for v in (90, 91, 89, 90, 90, 91):
        seed_run(svc.store.sync, "bench", "local", metrics={"output_throughput": v})
    out = await new_run(svc, "bench", "local", [Metric("output_throughput", 20.0)], failed=True)
    assert await history_hook(svc.engine, out, None) == []
    assert (await svc.store.call(lambda s: s.get_run(out.run_id)))["fingerprint"] is not None
    out2 = await new_run(svc, "bench", "local", [Metric("output_throughput", 20.0)])
    out2.dry_run = True
    assert await history_hook(svc.engine, out2, None) == []


async def test_ttft_rise_is_a_regression_and_acceptance_jump_an_improvement(services):
    svc = await services(regression={"confirm_runs": 1})
    for ttft, acc in ((40, 1.8), (41, 1.82), (39, 1.79), (40.5, 1.81), (39.5, 1.8), (40.2, 1.78)):
        seed_run(svc.store.sync, "bench", "local", metrics={"median_ttft_ms": ttft, "accept_length": acc},
                 better={"median_ttft_ms": "lower"})
    out = await new_run(svc, "bench", "local", [Metric("median_ttft_ms", 90.0, "ms", "lower"),
                                                Metric("accept_length", 4.7)])
    regs = {r.metric: r for r in await history_hook(svc.engine, out, None)}
    assert regs["median_ttft_ms"].kind == "regression"
    assert regs["accept_length"].kind == "improvement"


async def test_baseline_starts_the_history_window(services):
    svc = await services(regression={"confirm_runs": 1})
    s = svc.store.sync
    for v in (50, 51, 49, 50, 50.5, 49.5):  # an old, slow era
        seed_run(s, "bench", "local", metrics={"output_throughput": v})
    base = seed_run(s, "bench", "local", metrics={"output_throughput": 90})
    s.set_baseline(base, "t")
    out = await new_run(svc, "bench", "local", [Metric("output_throughput", 55.0)])
    # only 1 run since the baseline: not enough to judge (the old era would call 55 normal)
    assert await history_hook(svc.engine, out, None) == []
    s.finish_run(out.run_id, "succeeded", exit_code=0)
    for v in (90, 91, 89, 90):
        seed_run(s, "bench", "local", metrics={"output_throughput": v})
    out = await new_run(svc, "bench", "local", [Metric("output_throughput", 55.0)])
    [r] = await history_hook(svc.engine, out, None)
    assert r.kind == "regression" and f"since baseline #{base}" in r.reason
