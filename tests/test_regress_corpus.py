"""The labelled regression corpus and its scorer, on a small sample (the whole scoring is
tests/bench/bench_regressions.py): the corpus is what its seeded generator writes, its labels
are sane, and the product's detector, replayed night by night through the post-run check on
a real store, does on one series of each kind what the benchmark counts."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from support import regress_corpus as rc

from eaglebot.config import RegressionConfig
from eaglebot.store import Store

GEN = Path(__file__).parent / "data" / "regressions" / "generate.py"


def _generator():
    spec = importlib.util.spec_from_file_location("corpus_generate", GEN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_corpus_is_what_its_seeded_generator_writes_with_every_family_and_both_splits():
    gen = _generator()
    stored = json.loads(rc.CORPUS.read_text())
    assert stored["seed"] == gen.SEED and stored["series"] == gen.generate()
    series = stored["series"]
    assert len(series) >= 80 and all(20 <= len(s["values"]) <= 120 for s in series)
    assert {s["family"] for s in series} == set(gen.FAMILIES)
    assert {s["split"] for s in series} == {"tune", "test"}
    for s in series:
        for c in s["changes"]:
            assert 0 < c["start"] <= c["end"] < len(s["values"])
            assert c["worse"] == ((c["size_pct"] < 0) == (s["better"] == "higher"))
    sizes = [abs(c["size_pct"]) for s in series if s["family"] == "step" for c in s["changes"]]
    assert min(sizes) < 5 and max(sizes) > 30                  # steps of 3-40%, up and down


def test_scoring_matches_alerts_with_changes_and_counts_quiet_nights():
    s = {"values": [100.0] * 40, "better": "higher",
         "changes": [{"start": 20, "end": 20, "size_pct": -12.0, "kind": "step", "worse": True}]}
    sc = rc.score(s, [21])
    assert (sc.tp, sc.fp, sc.fn, sc.delays, sc.big_steps_fast) == (1, 0, 0, [1], 1)
    assert sc.quiet_nights == 40 - rc.FIRST_JUDGED - (rc.MARGIN + 1)
    sc = rc.score(s, [8, 21, 24])                  # one false alert before, one duplicate after
    assert (sc.tp, sc.fp, sc.fn) == (1, 2, 0)
    sc = rc.score(s, [])
    assert (sc.tp, sc.fn, sc.big_steps, sc.big_steps_fast) == (0, 1, 1, 0)
    small = {**s, "changes": [{**s["changes"][0], "size_pct": -3.0}]}
    assert rc.score(small, [23]).fp == 0 and rc.score(small, []).fn == 0   # under the floor: optional


def _one(family: str, pick=lambda s: True) -> dict:
    return next(s for s in rc.load() if s["family"] == family and pick(s))


def test_the_product_detector_on_one_series_of_each_kind(tmp_path):
    cfg = RegressionConfig()
    quiet = rc.Score()
    for s in rc.load():
        if s["family"] == "noise" and s["noise_sd_pct"] > 2.5:        # the noisiest quiet series: ±5-8%
            quiet.add(rc.score(s, rc.product_alerts(s, cfg, tmp_path)))
    assert quiet.quiet_nights > 500 and quiet.false_per_100_quiet <= 1.0
    outlier = _one("outlier")
    assert rc.product_alerts(outlier, cfg, tmp_path) == []      # one bad night is a suspect, not an incident
    big = _one("step", lambda s: s["changes"][0]["worse"] and abs(s["changes"][0]["size_pct"]) >= 10)
    alerts = rc.product_alerts(big, cfg, tmp_path)
    start = big["changes"][0]["start"]
    assert alerts and start <= alerts[0] <= start + 1                # within 2 runs
    drift = _one("drift")
    sc = rc.score(drift, rc.product_alerts(drift, cfg, tmp_path))
    assert (sc.tp, sc.fp) == (1, 0)
    missing = _one("missing")
    sc = rc.score(missing, rc.product_alerts(missing, cfg, tmp_path))
    assert (sc.tp, sc.fp) == (1, 0)


def test_a_drop_with_a_gpu_health_change_is_attributed_to_the_gpu(tmp_path):
    s = _one("gpu")
    r = rc.replay(s, RegressionConfig(), tmp_path)
    start = s["changes"][0]["start"]
    gpu = next(iter(s["health"][str(start)]))
    assert r.alerts and start <= r.alerts[0] <= start + 1
    if r.alerts[0] == start + 1:                       # the first bad night was a suspect
        assert any("suspect" in n for n in r.notes[start])
    [reason] = r.reasons[r.alerts[0]]
    assert f"GPU {gpu} HW thermal slowdown" in reason and rc.gpu_attributed(s, r)
