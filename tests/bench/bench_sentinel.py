"""How long the version-drift sentinel takes on a host (a script, not a test).

The host program (`facts.sglang.drift.program()`) through `python3 -`, one process per run as the launch
pre-flight and `eagle doctor` pay it, over the REAL wheel of each release (every Python file
unpacked by tests/support/sglang_source.py). Prints per release the p50 / max wall time (process start to
parsed answer) and the program's own reading time; the target is a few seconds, no GPU, no import.

    .venv/bin/python tests/bench/bench_sentinel.py [--repeat 5] [VERSION ...]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.sglang_source import real_sglang  # noqa: E402

from eaglebot.facts.sglang import drift  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("versions", nargs="*", default=["0.5.10", "0.5.17", "0.5.23"])
    a = ap.parse_args()
    program = drift.program()
    for version in a.versions:
        root = str(real_sglang(version, full=True))
        walls, inner = [], []
        for _ in range(a.repeat):
            t0 = time.monotonic()
            res = subprocess.run([sys.executable, "-", root], input=program, capture_output=True, text=True)
            got = drift.parse(res.returncode, res.stdout, res.stderr)
            walls.append(time.monotonic() - t0)
            assert isinstance(got, dict), got
            inner.append(float(got["elapsed_s"]))
        print(f"SGLang {version}: whole run p50 {statistics.median(walls):.2f} s, max {max(walls):.2f} s; "
              f"reading p50 {statistics.median(inner):.2f} s ({len(got['hooks'])} hooks, "
              f"{len(got['flags']['options'])} flags)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
