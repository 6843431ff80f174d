"""Real-GPU helpers: PyTorch holder processes and nvidia-smi readings (no eaglebot code)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

TAG = "eagle-gpu-test-holder"

# Holds MIB MiB on each listed GPU until killed; optionally ignores SIGTERM.
HOLDER = r'''
import signal, sys, time
import torch
tag, gpus, mib, ignore = sys.argv[1], [int(g) for g in sys.argv[2].split(",")], int(sys.argv[3]), sys.argv[4] == "1"
if ignore:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
blocks = [torch.ones(mib * 1024 * 1024, dtype=torch.uint8, device=f"cuda:{g}") for g in gpus]
for g in gpus:
    torch.cuda.synchronize(g)
print("ready", flush=True)
while True:
    time.sleep(1)
'''


def gpu_count() -> int:
    out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    return len([ln for ln in out.splitlines() if ln.strip()])


def memory_used() -> dict[int, int]:
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return {int(a): int(b) for a, b in (ln.split(", ") for ln in out.splitlines() if ln.strip())}


class Holders:
    """PyTorch processes holding GPU memory; the test's tag is in each command line."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, gpus: list[int], mib: int, *, ignore_term: bool = False) -> int:
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        p = subprocess.Popen([sys.executable, "-c", HOLDER, TAG, ",".join(map(str, gpus)), str(mib),
                              "1" if ignore_term else "0"], stdout=subprocess.PIPE, text=True, env=env,
                             start_new_session=True)
        self.procs.append(p)
        line = p.stdout.readline()      # blocks until the memory is allocated (or the process died)
        assert line.strip() == "ready", f"holder on GPU {gpus} did not start (exit {p.poll()})"
        return p.pid

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait(30)


def kill_leftover_servers(state_dir: Path, port: int | None = None) -> list[int]:
    """Kill the session of every server a pid file under state_dir/run still names (SGLang only);
    with `port`, only that port's (a shared state folder, e.g. the default ~/.eaglebot, holds others')."""
    killed = []
    for pid_file in sorted((Path(state_dir) / "run").glob(f"server-{port if port else '*'}.pid")):
        tok = pid_file.read_text().split()
        if not tok or not tok[0].isdigit():
            continue
        pid = int(tok[0])
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"sglang" not in cmdline:
            continue
        try:
            os.killpg(pid, signal.SIGKILL)     # spawn_detached makes the server a session leader
            killed.append(pid)
        except ProcessLookupError:
            pass
    return killed
