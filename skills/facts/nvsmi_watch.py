"""Watch GPU memory with ONE nvidia-smi process (`-lms`, loop every N ms) until it is free.

Each separate `nvidia-smi` call initialises NVML again (tens of ms per call on an H200
host), so polling with fresh calls sees freed memory late. `nvidia-smi --query-gpu=...
--loop-ms=20` keeps NVML open and prints a row per GPU every 20 ms; the awk filter passes the
rows through and stops the pipeline (`EAGLE-FREE`) at the first round where every selected
GPU is at or under the limit. `timeout` bounds the watch; the caller falls back to polling.
"""
from __future__ import annotations

import re
import shlex

FREE_MARK = "EAGLE-FREE"

_AWK = ('BEGIN { FS = ", " } '
        '/^[0-9]+, [0-9]+$/ { print; fflush(); seen++; if ($2 + 0 > max) bad[$1] = 1; else delete bad[$1]; '
        'if (seen % n == 0) { c = 0; for (k in bad) c++; if (c == 0) { print "' + FREE_MARK + '"; exit 0 } } }')


def watch_command(nvidia_smi: str, gpus: list[int], max_used_mib: int, window_s: float, every_ms: int = 20) -> str:
    """A shell pipeline that watches `gpus` for at most window_s seconds (exit 0 either way)."""
    smi = shlex.join(["timeout", f"{window_s:.2f}", nvidia_smi, "--query-gpu=index,memory.used",
                      "--format=csv,noheader,nounits", "-i", ",".join(map(str, gpus)), f"--loop-ms={every_ms}"])
    awk = shlex.join(["awk", "-v", f"n={len(gpus)}", "-v", f"max={int(max_used_mib)}", _AWK])
    return f"{smi} 2>&1 | {awk}"


_ROW = re.compile(r"^(\d+), (\d+)$")


def parse_watch(text: str, gpus: list[int]) -> tuple[bool, dict[int, int], int]:
    """(freed, MiB per GPU of the last complete round, rounds seen) from the watch's output."""
    last: dict[int, int] = {}
    current: dict[int, int] = {}
    rounds = 0
    for line in text.splitlines():
        m = _ROW.match(line.strip())
        if not m:
            continue
        current[int(m.group(1))] = int(m.group(2))
        if all(g in current for g in gpus):
            last, current, rounds = current, {}, rounds + 1
    return FREE_MARK in text.split(), last, rounds
