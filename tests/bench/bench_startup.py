"""Start-up of the `eagle` command (a script, not a test), against a bare Python in the same run.

    .venv/bin/python tests/bench/bench_startup.py [--repeat 10] [--runs 100000] [--against OTHER_PYTHON] [--instructions]

Times fresh processes, medians of --repeat, wall clock and CPU (user + sys of the process and
the children it waited for, from getrusage): `python -c pass`, `eagle --help`, `eagle run hello
-H local` (its two `shell` steps and an always-step on the local host, the audit writes), `eagle
history` and `eagle show last`, all on an audit store of --runs finished runs (filled as
bench_history.py does). CPU time is what to compare on a busy machine: wall time there is mostly
waiting for a core.

`--against` names another interpreter whose `eaglebot` is another tree (e.g. a checkout of main
with its own virtualenv): each command is then timed on both, alternately, on the same store
and in the same conditions, and the table says before (the other) and after (this one).

`--instructions` also counts each command's instructions once under valgrind: a busy machine's
wall and CPU times swing by half, instruction counts by ~1%.

Targets: issue 13: `eagle --help` <= 60 ms and `eagle history` on 100k runs <= 200 ms; issue 36:
`eagle run hello -H local` <= 350 ms and `eagle history` <= 250 ms (wall, on a quiet 2-core machine).
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_history import fill  # noqa: E402

from eaglebot.store import Store  # noqa: E402

COMMANDS = [("eagle --help", ["--help"]), ("eagle run hello -H local", ["run", "hello", "-H", "local"]),
            ("eagle history", ["history"]), ("eagle show last", ["show", "last"])]
TARGETS = {"eagle --help": 60, "eagle run hello -H local": 350, "eagle history": 250}


def _env() -> dict[str, str]:
    # An installed package has its bytecode: where PYTHONDONTWRITEBYTECODE is set (as here, and on
    # some CI images) every process would compile each changed module again, ~0.1 s of it.
    return {k: v for k, v in os.environ.items() if k not in ("EAGLE_CONFIG", "PYTHONDONTWRITEBYTECODE")}


def once(argv: list[str], cwd: str) -> tuple[float, float]:
    """(wall ms, CPU ms) of one fresh process."""
    env = _env()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
    wall = (time.perf_counter() - t0) * 1000
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000


def instructions(argv: list[str], cwd: str) -> float | None:
    """Millions of instructions one fresh process (and its children) executes, counted by
    valgrind (cachegrind, no cache simulation): the same on a busy machine as on a quiet one,
    so two trees compare within ~1% where wall and CPU times swing by half. None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--trace-children=yes",
                        f"--cachegrind-out-file={out}/cg.%p", *argv], cwd=cwd, env=_env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        total = 0
        for f in Path(out).glob("cg.*"):
            for ln in f.read_text().splitlines():
                if ln.startswith("summary:"):
                    total += int(ln.split()[1])
        return total / 1e6


def line(name: str, samples: list[tuple[float, float]], bare: float) -> tuple[float, float]:
    wall, cpu = statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)
    lo, hi = min(s[0] for s in samples), max(s[0] for s in samples)
    print(f"  {name:34s} wall {wall:7.1f} ms (min {lo:6.1f}, max {hi:6.1f})  cpu {cpu:7.1f} ms  "
          f"{wall / bare:5.1f}x bare python")
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--against", metavar="PYTHON", help="another interpreter (another tree's venv): before/after")
    ap.add_argument("--instructions", action="store_true",
                    help="also count each command's instructions once under valgrind (load-independent)")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="eagle-startup-")
    pythons = {"after": sys.executable}
    if a.against:
        pythons = {"before": a.against, "after": sys.executable}
    try:
        store = Store(Path(d) / "eagle.db")
        fill(store, a.runs)
        store.close()
        (Path(d) / "eagle.yaml").write_text("audit_db: eagle.db\n")
        py = sys.executable
        for p in pythons.values():   # warm the page cache (and each tree's bytecode)
            for _, args in COMMANDS:
                once([p, "-m", "eaglebot", *args], d)
        samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
        bare = [once([py, "-c", "pass"], d) for _ in range(a.repeat)]
        for _ in range(a.repeat):      # alternate the trees, so both see the same load
            for name, args in COMMANDS:
                for label, p in pythons.items():
                    samples.setdefault((label, name), []).append(once([p, "-m", "eaglebot", *args], d))
        bare_wall = statistics.median(s[0] for s in bare)
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {a.repeat} runs each; "
              f"store of {a.runs} runs")
        print(f"  {'python -c pass':34s} wall {bare_wall:7.1f} ms  cpu {statistics.median(s[1] for s in bare):7.1f} ms")
        result: dict[tuple[str, str], tuple[float, float]] = {}
        for label in pythons:
            print(f"{label} ({pythons[label]}):" if len(pythons) > 1 else f"{pythons[label]}:")
            for name, _ in COMMANDS:
                result[label, name] = line(name, samples[label, name], bare_wall)
        if a.instructions:
            print("instructions (valgrind, once each; python -c pass: "
                  f"{instructions([py, '-c', 'pass'], d) or 0:.0f} M):")
            for name, args in COMMANDS:
                counts = {label: instructions([p, "-m", "eaglebot", *args], d) for label, p in pythons.items()}
                print(f"  {name:34s} " + "  ".join(f"{label} {c:7.1f} M" for label, c in counts.items() if c))
        for name, target in TARGETS.items():
            wall = result["after", name][0]
            print(f"target {name} <= {target} ms: {'met' if wall <= target else 'NOT met'} ({wall:.0f} ms wall)")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
