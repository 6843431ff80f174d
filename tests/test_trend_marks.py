"""Trend plots: dates on the x axis, change points, open incidents and the baseline marked."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from history_seed import seed_run

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
