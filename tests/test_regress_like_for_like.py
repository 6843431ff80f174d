"""Issue 42 end to end, as the new user ran it: the real `eagle` CLI over a real OpenSSH sshd on
loopback to a non-root login user, the SIMULATED GPU and SGLang (src/eaglebot/sim) on that host.

The greedy reference bench on the target alone (spec_algorithm=none), EAGLE-3 benches at one
speed, then a lasting lower speed (a relaunch with fewer speculative steps): the drop is flagged
by the second low run (exit 3, confirm_runs 2), the no-speculation run never joins the EAGLE
series' reference, and every EAGLE bench reports its speed-up against that reference run.
"""
from __future__ import annotations

import os
import statistics

import pytest
from support.helpers import eagle
from test_shipped_playbooks import FAST, open_home_host, run, why

from eaglebot.store import Store

BENCH = ["-e", "num_prompts=8", "-e", "input_len=64", "-e", "output_len=32", "-e", "correctness=false",
         "-e", "health=false"]


def relaunch(cfg, *extra: str) -> None:
    rc, doc = run(cfg, "relaunch", "-e", "bench_prompts=0", "-e", f"env={FAST}", *extra)
    assert rc == 0, why(doc)


def metric(doc: dict, name: str) -> float:
    [v] = [m["value"] for m in doc["metrics"] if m["name"] == name]
    return float(v)


@pytest.mark.e2e
def test_a_lasting_drop_after_a_reference_run_is_flagged_by_its_second_run_with_the_speedup(tmp_path_factory):
    with open_home_host(f"eaglereg{os.getpid()}", "regress", tmp_path_factory) as h:
        h.reset()
        cfg = h.config()
        relaunch(cfg, "-e", "spec_algorithm=none")
        rc, ref = run(cfg, "bench", *BENCH)
        assert rc == 0 and ref["regressions"] == [], why(ref)
        ref_id, ref_tok = ref["run_id"], metric(ref, "output_throughput")
        assert not any(m["name"] == "speedup_vs_reference" for m in ref["metrics"])

        relaunch(cfg, "-e", "spec_steps=3", "-e", "spec_topk=1", "-e", "spec_draft_tokens=4")
        fast = []
        for _ in range(6):
            rc, doc = run(cfg, "bench", *BENCH)
            assert rc == 0 and doc["regressions"] == [], why(doc)
            tok, speedup = metric(doc, "output_throughput"), metric(doc, "speedup_vs_reference")
            assert speedup == pytest.approx(tok / ref_tok, rel=1e-3) and speedup > 1.3
            [bench] = [s for s in doc["steps"] if s["skill"] == "bench.serving"]
            assert f"speed-up {speedup:.2f}x over the target alone ({ref_tok:.1f} tok/s, run #{ref_id})" \
                in bench["summary"]
            assert bench["data"]["speedup"]["reference_run"] == ref_id
            fast.append(tok)

        relaunch(cfg, "-e", "spec_steps=1", "-e", "spec_topk=1", "-e", "spec_draft_tokens=2")
        rc, first = run(cfg, "bench", *BENCH)
        assert rc == 0 and first["regressions"] == [], why(first)     # one bad night alone is a suspect
        assert any("suspect: output_throughput" in w for w in first["warnings"]), first["warnings"]
        assert metric(first, "speedup_vs_reference") < statistics.median(fast) / ref_tok
        rc, second = run(cfg, "bench", *BENCH)
        assert rc == 3, why(second)
        [r] = [r for r in second["regressions"] if r["metric"] == "output_throughput"]
        # the reference is the six EAGLE benches before the drop: the no-speculation run is not in it
        assert r["reference"] == pytest.approx(statistics.median(fast))
        assert f"of the 6 runs before the drop (run #{first['run_id']})" in r["reason"]
        assert "launch" in r["reason"] and "speculative-num-steps" in r["reason"]     # what changed
        assert r["delta_pct"] < -8

        store = Store(cfg.parent / "eagle.db")
        try:
            rows = store.metrics_for_runs([ref_id, first["run_id"]])
            classes = {rid: {m["config_class"] for m in ms if m["name"] == "output_throughput"}
                       for rid, ms in rows.items()}
            assert classes[ref_id] != classes[first["run_id"]] and all(c.startswith("spec=none ")
                                                                       for c in classes[ref_id])
        finally:
            store.close()
        shown = eagle("show", str(second["run_id"]), config=cfg, cwd=cfg.parent).stdout
        assert "speedup_vs_reference" in shown and "REGRESSION" in shown
