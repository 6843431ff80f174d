"""The speed-up's reference (issue 42 item 3), decided from a real store: the newest
no-speculation bench of the same target, TP size and benchmark shape on the host, never a
speculative one, another shape, a failed step or the run itself; under 1 it is a warning."""
from __future__ import annotations

from eaglebot.engine.steps import AuditReads
from eaglebot.sdk import SkillContext
from eaglebot.skills.bench_serving import Params, _speedup, reference_key, speedup_words
from eaglebot.store import Store
from eaglebot.store.aio import AsyncStore
from eaglebot.store.rows import NewRun, StepEnd

INFO = {"model_path": "/models/llama", "tp_size": 1, "quantization": None}


def bench_step(store: Store, host: str, key: str, spec: str | None, tok_s: float, status: str = "ok") -> int:
    rid = store.create_run(NewRun(playbook="bench", hosts=[host], inputs={}, variables={}, actor="t", origin="cli"))
    sid = store.step_started(rid, 0, host, "benchmark", "bench.serving", {})
    store.step_finished(sid, StepEnd(run_id=rid, host=host, status=status, summary="", duration_ms=1, attempts=1,
                                     data={"config": {"class": f"spec={spec or 'none'} {key}", "reference_key": key,
                                                      "speculative_algorithm": spec},
                                           "output_throughput": tok_s}))
    store.finish_run(rid, "succeeded" if status == "ok" else "failed", exit_code=0 if status == "ok" else 1)
    return rid


async def test_the_reference_is_the_newest_no_speculation_bench_of_the_same_shape(tmp_path):
    store = Store(tmp_path / "eagle.db")
    key = reference_key(INFO, Params())
    assert key == "target=/models/llama tp=1 bench=in1024/out256/c8/n64"
    other = reference_key(INFO, Params(max_concurrency=16))
    older = bench_step(store, "gpu-01", key, None, 88.0)
    ref = bench_step(store, "gpu-01", key, None, 90.0)
    bench_step(store, "gpu-01", key, "EAGLE3", 141.0)               # speculative: never the reference
    bench_step(store, "gpu-01", other, None, 150.0)                 # another benchmark shape
    bench_step(store, "gpu-02", key, None, 70.0)                    # another host
    bench_step(store, "gpu-01", key, None, 60.0, status="failed")   # a failed bench
    astore = AsyncStore(store)
    try:
        ctx = SkillContext(host=None, host_name="gpu-01", vars={}, run_id=99,  # type: ignore[arg-type]
                           step_idx=0, step_name="b", audit=AuditReads(astore))
        got = await _speedup(ctx, key, 141.3)
        assert got == {"value": round(141.3 / 90.0, 4), "reference_run": ref, "reference_tok_s": 90.0} and ref > older
        assert await _speedup(ctx, reference_key({**INFO, "tp_size": 2}, Params()), 141.3) is None
    finally:
        await astore.aclose()


def test_a_speedup_under_1_is_a_warning_that_names_both_numbers():
    part, warn = speedup_words("EAGLE3", 1.57 * 90, {"value": 1.57, "reference_run": 1, "reference_tok_s": 90.0})
    assert part == "speed-up 1.57x over the target alone (90.0 tok/s, run #1)" and warn is None
    _, warn = speedup_words("EAGLE3", 777.6, {"value": 0.5214, "reference_run": 12, "reference_tok_s": 1491.4})
    assert warn == ("EAGLE3 is slower than the target alone: 777.6 tok/s against 1491.4 tok/s without speculation "
                    "(run #12), a speed-up of 0.52x")
