"""Trend plots: dates on the x axis, change points, open incidents and the baseline marked."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from support.history_seed import seed_run

from eaglebot.frontends.plot import render_trend
from eaglebot.history.trend import load_trend
from eaglebot.store import Store


def test_trend_marks_the_change_point_the_open_incident_and_the_baseline(tmp_path):
    store = Store(tmp_path / "eagle.db")
    day0 = datetime(2026, 10, 1, 3, 0, tzinfo=timezone.utc)
    ids = []
    for i in range(24):
        v = (100.0 if i < 14 else 88.0) * (1 + ((i * 7) % 5 - 2) / 200)
        at = (day0 + timedelta(days=i)).isoformat().replace("+00:00", "Z")
        ids.append(seed_run(store, "bench", "gpu-01", metrics={"output_throughput": v}, started_at=at))
    store.set_baseline(ids[2], "t")
    store.open_incident(playbook="bench", host="gpu-01", metric="output_throughput", run_id=ids[14],
                        ref_before_run=ids[14], reference=100.0, unit="tok/s", better="higher")
    trend = load_trend(store, "bench", "gpu-01", "output_throughput", limit=30)
    assert [c["run_id"] for c in trend.change_points] == [ids[14]]
    assert trend.change_points[0]["delta_pct"] < -10
    assert [i["opened_run"] for i in trend.incidents] == [ids[14]]
    assert trend.baseline is not None and trend.baseline["run_id"] == ids[2]
    out = render_trend(trend, tmp_path / "trend.png")
    assert out.read_bytes()[:4] == b"\x89PNG" and out.stat().st_size > 10_000


def test_the_trend_is_drawn_by_run_with_long_pauses_marked_and_a_burst_labelled_once():
    from eaglebot.frontends.plot import _tick_labels, gaps

    day0 = datetime(2026, 10, 1, 3, 0, tzinfo=timezone.utc)
    when = [day0 + timedelta(days=i) for i in range(4)]
    when += [day0 + timedelta(days=3, hours=8, minutes=5 * k) for k in range(5)]   # a burst on Oct 04
    when += [day0 + timedelta(days=14 + i) for i in range(3)]                       # after 10 days without runs
    assert [(i, round(s / 86400)) for i, s in gaps(when)] == [(8, 11)]
    labels = _tick_labels(when, most=4)
    assert labels.count("Oct 04") == 1 and labels[3] == "Oct 04"   # the burst's day is labelled first
    assert sum(1 for t in labels if t) <= 5 and all(t in ("", *{w.strftime("%b %d") for w in when}) for t in labels)
    assert gaps(when[:4]) == []   # nightly runs: no pause to mark


def test_a_configuration_class_change_is_a_new_segment_not_a_change_point(tmp_path):
    """Issue 42: the no-speculation reference, then EAGLE-3 benches: two segments, no change
    point across them, the band drawn from the EAGLE segment alone."""
    from eaglebot.sdk import Metric
    from eaglebot.store.rows import NewRun, StepEnd

    store = Store(tmp_path / "eagle.db")
    ids = []
    for i, (cls, v) in enumerate([("spec=none", 90.0), ("spec=none", 90.4)] + [("spec=EAGLE3", 141.0)] * 10):
        rid = store.create_run(NewRun(playbook="bench", hosts=["gpu-01"], inputs={}, variables={}, actor="t",
                                      origin="cli"))
        sid = store.step_started(rid, 0, "gpu-01", "bench", "bench.serving", {})
        m = Metric("output_throughput", v * (1 + ((i * 7) % 5 - 2) / 300), "tok/s", "higher", config=cls)
        store.step_finished(sid, StepEnd(run_id=rid, host="gpu-01", status="ok", summary="", duration_ms=1,
                                         attempts=1, metrics=[m]))
        store.finish_run(rid, "succeeded", exit_code=0)
        ids.append(rid)
    trend = load_trend(store, "bench", "gpu-01", "output_throughput")
    assert trend.segments == [{"run_id": ids[2], "config": "spec=EAGLE3", "was": "spec=none"}]
    assert trend.change_points == []
    assert trend.band is not None and 138 < trend.band[1] < trend.band[0] < trend.band[2] < 144   # not down to 90
    out = render_trend(trend, tmp_path / "trend.png")
    assert out.read_bytes()[:4] == b"\x89PNG"
