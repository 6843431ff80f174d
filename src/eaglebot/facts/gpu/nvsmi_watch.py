"""Watch GPU memory with ONE nvidia-smi process (`--loop-ms`) until it is free.

Each separate `nvidia-smi` call initialises NVML again (about 30 ms per call on the H200
hosts), so polling with fresh calls sees freed memory late. `nvidia-smi --query-gpu=...
--loop-ms=20` keeps NVML open and prints a row per GPU every 20 ms. The skill reads the rows
as they stream (`Watch.feed`) and, at the first round where every selected GPU is at or
under the limit, stops the watcher by the pid the command printed first (the `timeout` it
runs under, which passes the signal on). `stdbuf -oL` keeps the rows from waiting in a pipe
buffer; `timeout` bounds the watch, after which the caller polls.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

PID_MARK = "EAGLE-WATCH-PID"


def watch_command(nvidia_smi: str, gpus: list[int], window_s: float, every_ms: int = 20) -> str:
    """Print `EAGLE-WATCH-PID <pid>`, then `index, MiB` rows of `gpus` every every_ms for at most window_s."""
    smi = shlex.join(["timeout", f"{window_s:.2f}", "stdbuf", "-oL", nvidia_smi, "--query-gpu=index,memory.used",
                      "--format=csv,noheader,nounits", "-i", ",".join(map(str, gpus)), f"--loop-ms={every_ms}"])
    return f'{smi} 2>&1 & echo "{PID_MARK} $!"; wait'


_ROW = re.compile(r"^(\d+), (\d+)$")


@dataclass
class Watch:
    """The watch's state, fed one output line at a time."""

    gpus: list[int]
    max_used_mib: int
    pid: int | None = None
    last: dict[int, int] = field(default_factory=dict)      # MiB per GPU of the last complete round
    rounds: int = 0
    freed: bool = False
    _current: dict[int, int] = field(default_factory=dict)

    def feed(self, line: str) -> bool:
        """Take one line; True once a complete round reads free."""
        text = line.strip()
        if text.startswith(PID_MARK + " "):
            tok = text.split()[1]
            self.pid = int(tok) if tok.isdigit() else None
            return self.freed
        m = _ROW.match(text)
        if m:
            self._current[int(m.group(1))] = int(m.group(2))
            if all(g in self._current for g in self.gpus):
                self.last, self._current, self.rounds = self._current, {}, self.rounds + 1
                if all(self.last[g] <= self.max_used_mib for g in self.gpus):
                    self.freed = True
        return self.freed
