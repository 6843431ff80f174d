"""`/metrics` exposes the latest bench results per host (issue 42 item 6): scraped over HTTP on
loopback from a real `Metrics` endpoint on a real store, parsed with prometheus_client's parser."""
from __future__ import annotations

import aiohttp
from support.history_seed import seed_run
from prometheus_client.parser import text_string_to_metric_families
from support.sshd import free_port

from eaglebot.frontends.service.metrics import Metrics
from eaglebot.store import Store
from eaglebot.store.aio import AsyncStore
from eaglebot.store.rows import NewRun


async def test_metrics_expose_the_latest_bench_result_per_host_playbook_and_metric(tmp_path):
    store = Store(tmp_path / "eagle.db")
    seed_run(store, "bench", "gpu-01", metrics={"output_throughput": 141.0, "speedup_vs_reference": 1.57})
    newest = seed_run(store, "bench", "gpu-01", metrics={"output_throughput": 119.0, "median_ttft_ms": 30.5,
                                                          "speedup_vs_reference": 1.32, "completed": 64.0})
    other = seed_run(store, "bench", "gpu-02", metrics={"output_throughput": 150.0, "greedy_match_rate": 1.0})
    seed_run(store, "bench", "gpu-02", metrics={"output_throughput": 10.0}, status="failed")   # not a result
    tune = store.create_run(NewRun(playbook="tune", hosts=["gpu-02"], inputs={}, variables={}, actor="t",
                                   origin="cli"))
    child = seed_run(store, "tune-measure", "gpu-02", metrics={"output_throughput": 99.0})
    store.db.execute("update runs set parent_run_id = $1 where id = $2", [tune, child])   # a tune's cell
    astore = AsyncStore(store)
    m = Metrics(astore)
    port = free_port()
    listener = await m.serve("127.0.0.1", port)
    try:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as r:
            assert r.status == 200
            text = await r.text()
    finally:
        await listener.close()
        await astore.aclose()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    values = {(s.labels["host"], s.labels["playbook"], s.labels["metric"]): s.value
              for s in fams["eagle_bench_result"].samples}
    assert values == {("gpu-01", "bench", "output_throughput"): 119.0,
                      ("gpu-01", "bench", "speedup_vs_reference"): 1.32,
                      ("gpu-01", "bench", "median_ttft_ms"): 30.5,
                      ("gpu-02", "bench", "output_throughput"): 150.0,
                      ("gpu-02", "bench", "greedy_match_rate"): 1.0}     # `completed` is no series; cells are not
    runs = {(s.labels["host"], s.labels["metric"]): s.value for s in fams["eagle_bench_result_run"].samples}
    assert runs[("gpu-01", "output_throughput")] == newest and runs[("gpu-02", "output_throughput")] == other
    assert all(set(s.labels) == {"host", "playbook", "metric"} for s in fams["eagle_bench_result"].samples)
