"""The inventory at fleet size, in time and memory (a script, not a test; issue 35 item 6).

1. A typo'd range (`n-[0:99999999]`) is refused: in `hosts:`, in a group, in `-H` and in
   `health_watch.hosts`; each refusal's wall time and the memory it allocated (tracemalloc peak),
   plus the whole `eagle hosts` process's peak RSS. Target: < 0.5 s and < 50 MiB.
2. 20,000 hosts select (`Settings.resolve_hosts`): `all`, a group, a group of groups, the range,
   a 20,000-name comma list, an exclusion. Target: < 1 s each.
3. `-H` of 120,000 `:` (nothing but separators) is parsed in linear time.

    .venv/bin/python tests/bench/bench_inventory.py [--hosts 20000]
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import yaml

from eaglebot.config import Settings, load_settings
from eaglebot.errors import UsageError

HUGE = "n-[0:99999999]"


def measured(what: str, fn: Callable[[], Any]) -> Any:
    """Run fn twice: timed (best of 3), then under tracemalloc for the memory it allocates."""
    said, out, best = "", None, float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        try:
            out = fn()
        except UsageError as e:
            said = str(e)
        best = min(best, time.perf_counter() - t0)
    tracemalloc.start()
    try:
        fn()
    except UsageError:
        pass
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{what:<52} {best * 1000:9.1f} ms  {peak / 2**20:7.2f} MiB allocated"
          + (f"  -> {said[:80]}" if said else ""))
    return out


def refusals() -> None:
    print(f"-- refusing {HUGE}")
    d = Path(tempfile.mkdtemp())
    cases = {
        "hosts": {"hosts": {HUGE: {}}},
        "a group": {"hosts": {"n-1": {}}, "groups": {"g": [HUGE]}},
        "health_watch.hosts": {"hosts": {"n-1": {}}, "health_watch": {"hosts": [HUGE]}},
    }
    for name, data in cases.items():
        cfg = d / f"{name.replace('.', '_').replace(' ', '_')}.yaml"
        cfg.write_text(yaml.safe_dump(data))
        measured(f"load_settings, {HUGE} in {name}", lambda: load_settings(cfg))
    small = Settings.model_validate({"hosts": {"n-1": {}}})
    measured(f"-H {HUGE}", lambda: small.resolve_hosts([HUGE]))
    cfg = d / "hosts.yaml"
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "eaglebot", "hosts", "--config", str(cfg)], capture_output=True,
                         text=True)
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"{'`eagle hosts` process (start-up included)':<52} {dt * 1000:9.1f} ms  {max(rss, before) / 1024:7.1f} MiB "
          f"peak RSS  exit {res.returncode}: {res.stderr.strip()[:90]}")


def selection(n: int) -> None:
    print(f"-- selecting among {n} hosts")
    width = len(str(n))
    rng = f"gpu-[{1:0{width}d}:{n:0{width}d}]"
    names = [f"gpu-{i:0{width}d}" for i in range(1, n + 1)]
    half = names[: n // 2]
    data = {"host_defaults": {"user": "ops"}, "hosts": {rng: {"address": "10.0.{{ index }}.1"}},
            "groups": {"first": half, "second": [rng], "both": ["first", "second"]}}
    s = measured(f"Settings of {n} hosts (ranges, groups, addresses)", lambda: Settings.model_validate(data))
    for what, pattern in [("all", ["all"]), ("a group", ["second"]), ("a group of groups", ["both"]),
                          ("the range", [rng]), (f"a comma list of {n} names", [",".join(names)]),
                          (f"{n} -H values", names), ("all but one (all:!gpu-1)", [f"all:!{names[0]}"]),
                          ("an intersection (all:&first)", ["all:&first"]), ("a glob (gpu-1*)", ["gpu-1*"])]:
        out = measured(f"resolve_hosts({what})", lambda: s.resolve_hosts(pattern))
        assert out, what


def separators() -> None:
    print("-- parsing -H")
    s = Settings()
    for k in (30_000, 60_000, 120_000):
        measured(f"-H of {k} ':'", lambda: s.resolve_hosts([":" * k]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=20_000)
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    refusals()
    selection(args.hosts)
    separators()


if __name__ == "__main__":
    main()
