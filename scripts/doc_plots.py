"""Draw docs/trend.png with eaglebot's own trend renderer (`eagle trend` draws the same way)
from a seeded history: nightly bench runs, a burst of manual runs one afternoon, a 10-day
pause, then a drop of ~11% that opened an incident. Run: .venv/bin/python scripts/doc_plots.py

docs/sweep-simulated.png is a real sweep on the SIMULATED server (what
tests/test_tuning_sim.py sweeps, `eagle sweep ... --out docs/sweep-simulated.png`)."""
from __future__ import annotations

import random
import sys
import tempfile
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

root = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root / "tests"))

from support.history_seed import seed_run  # noqa: E402

from eaglebot.frontends.plot import render_trend  # noqa: E402
from eaglebot.history.trend import load_trend  # noqa: E402
from eaglebot.store import Store  # noqa: E402


def main() -> None:
    rng = random.Random(4)
    t0 = datetime(2026, 10, 1, 3, 0, tzinfo=timezone.utc)
    times = [t0 + timedelta(days=i) for i in range(8)]
    times += [t0 + timedelta(days=7, hours=11, minutes=7 * k) for k in range(6)]
    times += [t0 + timedelta(days=17 + i) for i in range(10)]
    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "eagle.db")
        ids = [seed_run(store, "bench", "gpu-01", started_at=at.isoformat().replace("+00:00", "Z"),
                        metrics={"output_throughput": (1510.0 if i < 15 else 1338.0) * (1 + rng.uniform(-.012, .012))})
               for i, at in enumerate(sorted(times))]
        store.set_baseline(ids[2], "doc")
        store.open_incident(playbook="bench", host="gpu-01", metric="output_throughput", run_id=ids[15],
                            ref_before_run=ids[15], reference=1510.0, unit="tok/s", better="higher")
        trend = replace(load_trend(store, "bench", "gpu-01", "output_throughput", limit=30),
                        flagged={ids[15], ids[16]})
        print(render_trend(trend, root / "docs" / "trend.png"))
        store.close()


if __name__ == "__main__":
    main()
