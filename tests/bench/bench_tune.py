"""`eagle tune` against the full grid: launches, wall time and how close it gets (a script, not a test).

    python tests/bench/bench_tune.py                       # the search on the landscape, 16 seeds, 7 batch sizes
    python tests/bench/bench_tune.py --e2e --seed 3        # also end to end on the SIMULATED server: eagle tune,
                                                           # then every cell of the grid launched and measured

The first part runs the product's search (tuning/tune_search.py) against the SIMULATED landscape
(sim/sglang_pkg/sglang/_landscape.py) with 1% benchmark noise, 3 repeats: per seed, the batch
sizes whose choice is within 2% of the grid's true best, the launches, and how many predicted
chains were within 5% of their verification. `--e2e` runs the real thing on the simulator (local
transport, real relaunches and bench_serving runs): `eagle tune` once, then the whole grid as a
sweep would run it (one relaunch and one tune-measure per cell), and compares launches, wall time
and the tok/s each batch size gets. Prints Markdown.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import test_tune_landscape as tl  # noqa: E402

from eaglebot.tuning import tune_model as M, tune_search as S  # noqa: E402


def search_table(seeds: list[int], sizes: list[int]) -> None:
    L = tl._landscape()
    grid = M.grid(list(range(1, 9)), [1, 2, 4, 8], [4, 8, 16, 32])
    print(f"search on the landscape: grid of {len(grid)} cells, batch sizes {sizes}, 1% noise, 3 repeats\n")
    print("| seed | within 2% of the grid's best | launches | predicted chains within 5% | stopped |")
    print("| --- | --- | --- | --- | --- |")
    tl.BATCH_SIZES[:] = sizes
    totals = []
    for seed in seeds:
        ls = L.make(seed)
        t0 = time.perf_counter()
        res = asyncio.run(S.search(S.Plan(sizes, grid, len(grid) // 5, reserve=1), tl._measure(ls, 0.01, seed=seed)))
        close = sum(L.tok_s(ls, b, res.best(b).cell) >= 0.98 * L.best(ls, b, grid)[1] for b in sizes)
        checked = [(c, b) for c, m in res.measured.items() if m.phase != "profile" and c in res.predicted for b in sizes]
        within = sum(abs(res.predicted[c][b] / res.measured[c].tok_s[b] - 1) <= 0.05 for c, b in checked)
        totals.append((close, res.launches, time.perf_counter() - t0))
        print(f"| {seed} | {close}/{len(sizes)} | {res.launches} (+1 flap test) of {len(grid)} | {within}/{len(checked)} "
              f"| {res.stopped.split(':')[0][:60]} |")
    print(f"\n{sum(c >= len(sizes) - 1 for c, _, _ in totals)}/{len(seeds)} seeds within 2% at >= {len(sizes) - 1} of "
          f"{len(sizes)} batch sizes; mean {statistics.fmean(n for _, n, _ in totals):.1f} launches (+1) of {len(grid)}; "
          f"the search itself {1000 * statistics.fmean(t for _, _, t in totals):.0f} ms per seed\n")


def _eagle(cfg: Path, *argv: str, timeout: float = 3600) -> tuple[float, dict]:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "eaglebot", "--config", str(cfg), *argv, "--json"],
                         capture_output=True, text=True, timeout=timeout, cwd=cfg.parent)
    # 3: a regression in the run's history (gpu_free_s of a busy machine, say): the run itself did its work
    if res.returncode not in (0, 1, 3):
        raise SystemExit(f"eagle {' '.join(argv)} failed ({res.returncode}): {res.stderr[-2000:]}")
    return time.monotonic() - t0, json.loads(res.stdout)


def _measured(db: Path, run_id: int) -> dict[int, float]:
    """tok/s per batch size of a tune-measure run, from its bench.batches step's data in the audit
    DB (bench.batches keeps its numbers out of the metrics, and `eagle show --json` has no step data)."""
    from eaglebot.store.factory import open_store

    store = open_store(db, readonly=True)
    try:
        for s in store.steps(run_id):
            if s["skill"] == "bench.batches" and s["data"]:
                return {int(b): float(v["tok_s"]) for b, v in json.loads(s["data"])["batch_sizes"].items()}
    finally:
        store.close()
    raise SystemExit(f"run #{run_id} has no bench.batches data")


def e2e(seed: int, sizes: list[int], repeats: int) -> None:
    from support.tuning_sandbox import HOST, sim_host

    os.environ["EAGLE_SIM_LANDSCAPE"] = str(seed)
    L = tl._landscape()
    ls = L.make(seed)
    bs = ",".join(map(str, sizes))
    common = ["--repeats", str(repeats), "--prompts", "8", "--output-len", "64"]
    with tempfile.TemporaryDirectory(prefix="eagle-bench-tune-") as d, sim_host(Path(d)) as sb:
        cfg = sb["cfg"]
        t_tune, out = _eagle(cfg, "tune", "relaunch", "-H", HOST, "--batch-sizes", bs, *common,
                             "--flap-trace", "1:8,64:8,4:8", "--flap-settle", "2")
        grid = M.grid(list(range(1, 9)), [1, 2, 4, 8], [4, 8, 16, 32])
        best: dict[int, float] = {}
        t0 = time.monotonic()
        for cell in grid:   # the full grid, each cell launched and measured the same way
            _eagle(cfg, "run", "relaunch", "-H", HOST, "--yes", "-e", f"spec_steps={cell[0]}", "-e",
                   f"spec_topk={cell[1]}", "-e", f"spec_draft_tokens={cell[2]}", "-e", "bench_prompts=0")
            _, m = _eagle(cfg, "run", "tune-measure", "-H", HOST, "-e", f"batch_sizes={bs}", "-e",
                          f"repeats={repeats}", "-e", "num_prompts=8", "-e", "output_len=64")
            for b, tok in _measured(sb["db"], m["run_id"]).items():
                best[b] = max(best.get(b, 0.0), tok)
        t_grid = time.monotonic() - t0
    print(f"end to end on the SIMULATED server (landscape seed {seed}, batch sizes {bs}, {repeats} repeats)\n")
    print("| | launches | wall time |")
    print("| --- | --- | --- |")
    print(f"| eagle tune | {out['launches']} | {t_tune:.0f} s |")
    print(f"| the full grid | {len(grid)} | {t_grid:.0f} s |\n")
    print("| batch size | eagle tune's choice | tok/s | the grid's best measured | ratio | the landscape's best cell |")
    print("| --- | --- | --- | --- | --- | --- |")
    for b in sizes:
        e = out["batch_sizes"][str(b)]
        c = e["choice"]
        print(f"| {b} | {c['spec_steps']}/{c['spec_topk']}/{c['spec_draft_tokens']} | {e['tok_s']:.0f} | "
              f"{best[b]:.0f} | {e['tok_s'] / best[b]:.3f} | {'/'.join(map(str, L.best(ls, b)[0]))} |")
    print(f"\ndeploy: {out['deploy']['mode']} ({out['deploy']['why'][:200]})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default=",".join(map(str, range(16))))
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--e2e", action="store_true")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--e2e-batch-sizes", default="1,8,64")
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    search_table([int(s) for s in a.seeds.split(",")], [int(b) for b in a.batch_sizes.split(",")])
    if a.e2e:
        e2e(a.seed, [int(b) for b in a.e2e_batch_sizes.split(",")], a.repeats)


if __name__ == "__main__":
    main()
