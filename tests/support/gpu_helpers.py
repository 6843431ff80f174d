"""Test helpers for the GPU skills: simulated GPUs with REAL sleeper processes as holders."""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from eaglebot.engine.playbook import parse_playbook
from eaglebot.sim import gpu_state, install_sim_bin

SIM_DIR = Path(gpu_state.__file__).parent
PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def playbook(yaml_text: str, name: str = "t"):
    return parse_playbook(yaml_text, f"{name}.yaml")


def install_fuser(bin_dir: Path, state_dir: Path, python: str = PY) -> str:
    """A `fuser` wrapper that runs the simulated one (install_sim_bin copied it into .eagle-sim)."""
    path = Path(bin_dir) / "fuser"
    path.write_text(f"#!/bin/sh\nEAGLE_SIM_STATE={shlex.quote(str(state_dir))} exec {shlex.quote(python)} "
                    f"{shlex.quote(str(Path(bin_dir) / '.eagle-sim' / 'fuser.py'))} \"$@\"\n")
    os.chmod(path, 0o755)
    return str(path)


def _start_time(pid: int) -> str | None:
    st = gpu_state.proc_stat(pid)
    return st[1] if st else None


@dataclass
class Sleepers:
    """REAL processes that stand in for PyTorch jobs; every one is killed at teardown."""

    state_dir: Path
    pids: list[int] = field(default_factory=list)
    popens: list[subprocess.Popen] = field(default_factory=list)

    def start(self, *, seconds: int = 300, ignore_term: bool = False, user: str | None = None,
              pid_file: Path | None = None) -> int:
        """A `sleep SECONDS` in its own session (as `user` via su, else as us); returns its pid."""
        body = ("trap '' TERM; " if ignore_term else "") + f"exec sleep {int(seconds)}"
        if user:
            script = f"setsid sh -c {shlex.quote(body)} </dev/null >/dev/null 2>&1 & echo $!"
            out = subprocess.run(["su", "-s", "/bin/sh", user, "-c", script], capture_output=True, text=True,
                                 check=True, timeout=30)
            pid = int(out.stdout.split()[-1])
        else:
            p = subprocess.Popen(["sh", "-c", body], start_new_session=True, stdin=subprocess.DEVNULL)
            self.popens.append(p)
            pid = p.pid
        self.pids.append(pid)
        self._wait_exec(pid)
        if pid_file is not None:
            pid_file.parent.mkdir(parents=True, exist_ok=True)
            pid_file.write_text(f"{pid}\n")
        return pid

    def hold(self, gpu: int | list[int], mib: int, *, hidden: bool = False, **kw) -> int:
        pid = self.start(**kw)
        for g in [gpu] if isinstance(gpu, int) else gpu:
            gpu_state.add_holder(self.state_dir, pid, g, mib, hidden=hidden)
        return pid

    @staticmethod
    def _wait_exec(pid: int) -> None:
        # Register only after `exec sleep`: the TERM trap is then in place and the name is final.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep"):
                    return
            except OSError:
                return
            time.sleep(0.01)

    @staticmethod
    def alive(pid: int) -> bool:
        st = gpu_state.proc_stat(pid)
        return st is not None and st[0] not in ("Z", "X")

    def stop_all(self) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in self.popens:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass


def sim_host(tmp: Path, gpus: int = 1, residual: list[int] | None = None, **vars_) -> tuple[dict, Path, Path]:
    """A local host with simulated GPUs: (host config, state dir, bin dir)."""
    state, bin_dir = tmp / "gpu-state", tmp / "bin"
    host_vars = install_sim_bin(bin_dir, state, python=PY)
    gpu_state.init_state(state, gpus, residual_mib=residual)
    host_vars = {"nvidia_smi": host_vars["nvidia_smi"], **vars_}
    return {"transport": "local", "vars": host_vars}, state, bin_dir
