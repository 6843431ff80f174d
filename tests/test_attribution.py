"""Attribution over fingerprints built by apply_steps: ranked, SGLang's launch grammar,
config values from config.patch's JSON Patch record, env, GPU health."""
from __future__ import annotations

import random

from support.history_seed import seed_run

from eaglebot.history.attribution import attribution_sentence, state_changes
from eaglebot.history.fingerprint import apply_steps, empty_state
from eaglebot.facts.sglang.cmdline import build_launch_args, launch_flags
from eaglebot.store.rows import NewRun, StepEnd

BASE_ARGS = ["--model-path", "/m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "5",
             "--cuda-graph-bs-decode", "1", "2", "4", "--disable-radix-cache", "--tp=2"]


def launch(args, env=None, version="0.5.23"):
    return {"skill": "server.launch", "params": {}, "data": {"launch_args": args, "sglang_version": version,
                                                              "env": env or {}}}


def patch(before, after, key="eagle_config.eagle_aux_hidden_state_layer_ids", path="/d/config.json"):
    return {"skill": "config.patch", "params": {"path": path, "set": {key: after}},
            "data": {"path": path, "keys": [key], "values": {key: {"before": before, "after": after}},
                     "json_patch": [{"op": "replace", "path": "/" + key.replace(".", "/"), "value": after}]}}


def health(**gpus):
    return {"skill": "gpu.health", "params": {}, "data": {}, "health": gpus}


def state(*steps):
    st = empty_state()
    for s in steps:
        st = apply_steps(st, [s], [])
        if s["skill"] == "gpu.health":   # issue 12 records it in apply_steps; built here as it will look
            st["health"] = s["health"]
    return st


def test_sglang_launch_grammar_keeps_every_value_of_a_multi_value_flag():
    flags = launch_flags(BASE_ARGS)
    assert flags["--cuda-graph-bs-decode"] == ["1", "2", "4"]
    assert flags["--disable-radix-cache"] is True and flags["--tp-size"] == "2"
    assert launch_flags(build_launch_args(flags)) == flags


def test_a_multi_value_flag_change_is_attributed_with_before_and_after():
    bad = [a if a not in ("2", "4") else {"2": "8", "4": "16"}[a] for a in BASE_ARGS]
    changes = state_changes(state(launch(BASE_ARGS)), state(launch(bad)))
    assert [c.text() for c in changes] == ["launch --cuda-graph-bs-decode 1 2 4 → 1 8 16"]


def test_ranking_names_the_capture_layers_before_env_and_versions():
    a = state(launch(BASE_ARGS, {"NCCL_MIN_NCHANNELS": "4"}), patch([2, 30, 58], [2, 30, 58]))
    b = state(launch(BASE_ARGS, {"NCCL_MIN_NCHANNELS": "8"}, version="0.5.24"), patch([2, 30, 58], [-1, 2, 30]))
    changes = state_changes(a, b)
    assert [c.kind for c in changes] == ["config", "sglang", "env"]
    text = attribution_sentence(changes)
    assert text.startswith("most likely eagle_config.eagle_aux_hidden_state_layer_ids [2, 30, 58] → [-1, 2, 30]")
    assert "sglang 0.5.23 → 0.5.24" in text and "env NCCL_MIN_NCHANNELS 4 → 8" in text


def test_a_key_first_patched_after_the_good_run_uses_the_recorded_before_value():
    a = state(launch(BASE_ARGS))
    b = state(launch(BASE_ARGS), patch([2, 30, 58], [1, 30, 58]))
    [c] = state_changes(a, b)
    assert (c.before, c.after) == ([2, 30, 58], [1, 30, 58])


def test_gpu_health_where_recorded_is_named_first():
    ok = {"0": {"verdict": "ok", "reasons": []}, "1": {"verdict": "ok", "reasons": []}}
    hot = {"0": {"verdict": "ok", "reasons": []}, "1": {"verdict": "fail", "reasons": ["HW thermal slowdown"]}}
    a = state(launch(BASE_ARGS, {"NCCL_ALGO": "Ring"}), health(**ok))
    b = state(launch(BASE_ARGS, {"NCCL_ALGO": "Tree"}), health(**hot))
    changes = state_changes(a, b, since_run=52)
    assert changes[0].text() == "GPU 1 HW thermal slowdown since run #52"
    assert attribution_sentence(changes).startswith("most likely GPU 1 HW thermal slowdown since run #52")


async def test_the_change_point_attribution_names_the_planted_change_not_everything_since(services):
    """Three changes land on different nights; only the capture-layer patch moves the series.
    The change point is found at that run and only its change is named first."""
    from eaglebot.engine.runner import RunOutcome, StepRecord
    from eaglebot.history.hook import history_hook
    from eaglebot.sdk import Metric

    svc = await services()
    s = svc.store.sync
    rng = random.Random(5)
    cfg = svc.settings.regression
    cfg.min_history = 5
    launch_data = {"launch_args": BASE_ARGS, "sglang_version": "0.5.23", "env": {"NCCL_MIN_NCHANNELS": "4"}}
    noisy = [8.0, -7.5, 6.0, -6.5, 7.0, -8.0, 6.5, -7.0]     # +-8% nightly noise: MAD alone cannot judge

    def val(level, i):
        return level * (1 + noisy[i % len(noisy)] / 100 + rng.uniform(-0.5, 0.5) / 100)

    for i in range(10):
        seed_run(s, "nightly", "gpu-01", metrics={"output_throughput": val(100, i)}, launch=launch_data)
    seed_run(s, "nightly", "gpu-01", metrics={"output_throughput": val(100, 3)},
             launch=dict(launch_data, env={"NCCL_MIN_NCHANNELS": "8"}))        # harmless
    planted = s.create_run(NewRun(playbook="nightly", hosts=["gpu-01"], inputs={}, variables={}, actor="t", origin="cli"))
    sid = s.step_started(planted, 0, "gpu-01", "patch", "config.patch", patch([2, 30, 58], [-1, 2, 30])["params"])
    s.step_finished(sid, StepEnd(run_id=planted, host="gpu-01", status="changed", summary="", duration_ms=1, attempts=1,
                    data=patch([2, 30, 58], [-1, 2, 30])["data"]))
    sid = s.step_started(planted, 1, "gpu-01", "bench", "bench.serving", {})
    s.step_finished(sid, StepEnd(run_id=planted, host="gpu-01", status="ok", summary="", duration_ms=1, attempts=1,
                    metrics=[Metric("output_throughput", val(80, 0), "tok/s")]))
    s.finish_run(planted, "succeeded", exit_code=0)
    seed_run(s, "nightly", "gpu-01", metrics={"output_throughput": val(80, 1)},
             package_versions={"torch": "2.14.1"})                              # harmless, after the drop
    for i in range(2, 8):
        seed_run(s, "nightly", "gpu-01", metrics={"output_throughput": val(80, i)})
    rid = s.create_run(NewRun(playbook="nightly", hosts=["gpu-01"], inputs={}, variables={}, actor="t", origin="cli"))
    metric = Metric("output_throughput", val(80, 2), "tok/s")
    sid = s.step_started(rid, 0, "gpu-01", "bench", "bench.serving", {})
    s.step_finished(sid, StepEnd(run_id=rid, host="gpu-01", status="ok", summary="", duration_ms=1, attempts=1,
                    metrics=[metric]))
    out = RunOutcome(rid, "nightly", ["gpu-01"], "running", 0,
                     steps=[StepRecord("gpu-01", 0, "steps", "bench", "bench.serving", "ok")],
                     metrics=[("gpu-01", metric)])
    regs = [r for r in await history_hook(svc.engine, out, None) if r.kind == "regression"]
    [r] = regs
    assert f"beginning at run #{planted}" in r.reason
    assert (f"at run #{planted} vs #{planted - 1}: most likely eagle_config.eagle_aux_hidden_state_layer_ids "
            "[2, 30, 58] → [-1, 2, 30]") in r.reason
    assert "NCCL" not in r.reason and "torch" not in r.reason
