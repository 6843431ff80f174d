"""How long the draft-contract gate's static check takes (a script, not a test).

Each case of tests/test_draft_contract.py's corpus, resolved as draft.check resolves it on a host:
the host program (`eagle3.probe_program`) through `python3 -` with the REAL SGLang source on its
path (tests/support/sglang_source.py fetches the wheel), one process per check, as a relaunch pays it.
Prints per-version p50 / max of the wall time of a whole check (process start to parsed answer)
and of the probe's own time inside it; the target is <= 5 s with no GPU.

    .venv/bin/python tests/bench/bench_draft_check.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_draft_contract import CASES, host_probe, target_config  # noqa: E402

from eaglebot.facts.spec import eagle3  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    walls: dict[str, list[float]] = {}
    inner: dict[str, list[float]] = {}
    for _ in range(a.repeat):
        for case in CASES:
            target = eagle3.parse_target(json.dumps(target_config(case.target)))
            ids = eagle3.parse_draft(json.dumps(case.draft)).ids_sglang_reads()
            t0 = time.monotonic()
            res = host_probe(case.version, target, ids)
            walls.setdefault(case.version, []).append(time.monotonic() - t0)
            inner.setdefault(case.version, []).append(float(res.elapsed_s or 0))
    for v in sorted(walls):
        w, i = walls[v], inner[v]
        print(f"SGLang {v}: {len(w)} checks; whole check p50 {statistics.median(w):.2f}s max {max(w):.2f}s; "
              f"probe inside p50 {statistics.median(i):.2f}s max {max(i):.2f}s")
    worst = max(max(w) for w in walls.values())
    print(f"worst {worst:.2f}s: {'within' if worst <= 5 else 'OVER'} the 5 s budget")
    return 0 if worst <= 5 else 1


if __name__ == "__main__":
    sys.exit(main())
