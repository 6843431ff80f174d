"""SIMULATED GPU host tools for the sandbox demo and the tests: NOT real GPUs, NOT real SGLang.

`install_sim_bin(bin_dir, state_dir)` writes executables into `bin_dir`:
- `nvidia-smi`: prints exactly the formats of real nvidia-smi (see
  shared fixtures), listing REAL processes recorded in the state folder as GPU holders;
- `python`: the host's Python with the simulated `sglang` package on its path
  (`python -m sglang.launch_server ...`, `python -m sglang.bench_serving ...`).
Every simulated program says SIMULATED in its banner/log so nobody mistakes it for the real tool.
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

SIM_DIR = Path(__file__).resolve().parent
SGLANG_PATH = SIM_DIR / "sglang_pkg"   # holds the simulated `sglang` package


def _write_exec(path: Path, text: str) -> None:
    path.write_text(text)
    os.chmod(path, 0o755)


def install_sim_bin(bin_dir: Path, state_dir: Path, python: str | None = None) -> dict[str, str]:
    """Write the simulated tools; return host vars that point at them."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    py = python or sys.executable
    q = shlex.quote
    _write_exec(bin_dir / "nvidia-smi",
                f"#!/bin/sh\nEAGLE_SIM_STATE=${{EAGLE_SIM_STATE:-{q(str(state_dir))}}} "
                f"exec {q(py)} -m eaglebot.sim.nvidia_smi \"$@\"\n")
    _write_exec(bin_dir / "python",
                f"#!/bin/sh\nexport EAGLE_SIM_STATE=${{EAGLE_SIM_STATE:-{q(str(state_dir))}}}\n"
                f"export PYTHONPATH={q(str(SGLANG_PATH))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                f"exec {q(py)} \"$@\"\n")
    return {"python": str(bin_dir / "python"), "nvidia_smi": str(bin_dir / "nvidia-smi")}
