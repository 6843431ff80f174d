"""Score the regression detector on the labelled corpus (a script, not a test).

    python tests/bench/bench_regressions.py [--split test|tune|all] [--tune] [--by-family]

The product's detector runs end to end: every night of every series is a run in a real
SQLite audit store, judged by `history.recorder.check_run` (what the post-run hook calls
after a nightly run) with the `regression` settings given (the defaults unless --tune).
Beside it, PyTorch HUD's window rule and plain E-divisive (tests/support/regress_corpus.py). Prints a
Markdown table: precision, recall, F1, false alerts per 100 quiet nights, median detection
delay in runs, and the share of >= 10% steps flagged within 2 runs. `--tune` scores a small
grid of settings on the "tune" split first and reports the chosen one on --split.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support import regress_corpus as rc  # noqa: E402

from eaglebot.config import RegressionConfig  # noqa: E402

LOW_RUN_FAMILIES = ("early-low", "dips", "reference")   # issue 42: low runs before a lasting step
GRID = [dict(confirm_runs=c, k_sigma=k) for c in (1, 2, 3) for k in (3.0, 4.0)]


def run(series: list[dict[str, Any]], detect: Callable[[dict[str, Any]], list[int]]) -> tuple[rc.Score, dict[str, rc.Score]]:
    total, fam = rc.Score(), {}
    for s in series:
        sc = rc.score(s, detect(s))
        total.add(sc)
        fam.setdefault(s["family"], rc.Score()).add(sc)
    return total, fam


def row(name: str, sc: rc.Score) -> str:
    fast = f"{sc.big_steps_fast}/{sc.big_steps}" if sc.big_steps else "-"
    return (f"| {name} | {sc.precision:.3f} | {sc.recall:.3f} | {sc.f1:.3f} | {sc.false_per_100_quiet:.2f} | "
            f"{sc.median_delay:g} | {fast} | {sc.tp}/{sc.fp}/{sc.fn} |")


HEAD = ("| detector | precision | recall | F1 | false alerts / 100 quiet nights | median delay (runs) | "
        ">= 10% steps flagged within 2 runs | TP/FP/FN |\n|---|---|---|---|---|---|---|---|")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="test", choices=["test", "tune", "all"])
    ap.add_argument("--tune", action="store_true", help="pick the settings on the tune split first")
    ap.add_argument("--by-family", action="store_true")
    ap.add_argument("-s", "--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a regression setting to score instead of the default (e.g. confirm_runs=2)")
    args = ap.parse_args()
    cfg = RegressionConfig(**{k: float(v) for k, v in (a.split("=", 1) for a in args.set)})
    if args.tune:
        tune = rc.load("tune")
        best: tuple[tuple[bool, float], dict[str, Any]] | None = None
        print(f"tuning on {len(tune)} series:")
        for g in GRID:
            c = RegressionConfig(**g)
            sc, _ = run(tune, lambda s: rc.product_alerts(s, c))
            fast = sc.big_steps_fast / sc.big_steps if sc.big_steps else 1.0
            print(f"  {g}: F1 {sc.f1:.3f}, false/100 quiet {sc.false_per_100_quiet:.2f}, "
                  f">= 10% steps within 2 runs {sc.big_steps_fast}/{sc.big_steps}")
            # the targets first (<= 1 false alert per 100 quiet nights, big steps within 2 runs), then F1
            key = (sc.false_per_100_quiet <= 1.0 and fast >= 0.95, sc.f1)
            if best is None or key > best[0]:
                best = (key, g)
        assert best is not None
        cfg = RegressionConfig(**best[1])
        print(f"chosen: {best[1]}\n")
    series = rc.load(args.split)
    nights = sum(len(s["values"]) for s in series)
    seen: dict[int, list[int]] = {}

    def product(s: dict[str, Any]) -> list[int]:
        """The product's alerts on a series, replayed once (the tables below reuse them)."""
        if s["id"] not in seen:
            seen[s["id"]] = rc.product_alerts(s, cfg)
        return seen[s["id"]]

    print(f"{args.split} split: {len(series)} series, {nights} nights; eaglebot with window {cfg.window}, "
          f"min_pct {cfg.min_pct:g}, k_sigma {cfg.k_sigma:g}, confirm_runs {cfg.confirm_runs}\n")
    print(HEAD)
    t0 = time.monotonic()
    results = {"eaglebot (median+MAD, E-divisive, incidents)": run(series, product)}
    took = time.monotonic() - t0
    for name, det in rc.DETECTORS.items():
        results[name] = run(series, det)
    for name, (sc, _) in results.items():
        print(row(name, sc))
    if args.split == "all":
        for part in ("tune", "test"):
            print(f"\n{part} part:\n{HEAD}")
            for name, det in [("eaglebot (median+MAD, E-divisive, incidents)", product), *rc.DETECTORS.items()]:
                print(row(name, run(rc.load(part), det)[0]))
    low = [s for s in series if s["family"].removesuffix("-quiet") in LOW_RUN_FAMILIES]
    if low:
        steps = early = fast = false = 0
        for s in low:
            alerts = product(s)
            for c in s["changes"]:
                steps += 1
                fast += any(c["start"] <= a <= c["start"] + 2 for a in alerts)
            first = min((c["start"] for c in s["changes"]), default=len(s["values"]))
            early += sum(1 for a in alerts if a < first)
            false += rc.score(s, alerts).fp
        print(f"\neaglebot on the low-run families ({len(low)} series, quiet controls included): lasting steps "
              f"flagged within 3 runs of their start {fast}/{steps}; alerts before a step {early}; false alerts {false}")
    gpu = [s for s in series if s["family"] == "gpu"]
    named = sum(rc.gpu_attributed(s, rc.replay(s, cfg)) for s in gpu)
    print(f"\neaglebot named the GPU whose health changed in the first alert of {named}/{len(gpu)} GPU-health drops")
    print(f"\n(eaglebot replayed {nights} nightly runs through its post-run check in {took:.0f} s)")
    if args.by_family:
        for name, (_, fam) in results.items():
            print(f"\n{name} by family:\n{HEAD}")
            for f, sc in sorted(fam.items()):
                print(row(f, sc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
