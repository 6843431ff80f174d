"""SIMULATED GPU host tools for the sandbox demo and the tests: NOT real GPUs, NOT real SGLang.

`install_sim_bin(bin_dir, state_dir)` copies stand-alone, standard-library-only programs
into `bin_dir` (so any user, e.g. an SSH test user, can run them) and writes:
- `nvidia-smi`: prints exactly the formats of real nvidia-smi (see tests/fixtures/nvidia-smi/),
  listing REAL processes recorded in the state folder as GPU holders;
- `dmesg`: the simulated kernel log (NVRM lines; tests add Xid lines with gpu_state.set_kernel_log);
- `scontrol`, `sinfo`, `kubectl`: simulated workload schedulers for the drain skills (cluster.py);
- `python`: a Python with the simulated `sglang` package on its path
  (`python -m sglang.launch_server ...`, `python -m sglang.bench_serving ...`), speaking the SGLang
  release `version` names (default 0.5.23).
Every simulated program says SIMULATED in its banner/log so nobody mistakes it for the real tool.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

SIM_DIR = Path(__file__).resolve().parent


def _write_exec(path: Path, text: str) -> None:
    path.write_text(text)
    os.chmod(path, 0o755)


def default_python() -> str:
    """A Python any local user can run (a venv under /root is not)."""
    for cand in (sys.executable, "/usr/bin/python3", shutil.which("python3") or ""):
        if cand and os.access(cand, os.X_OK) and not str(Path(cand).resolve()).startswith("/root/"):
            return cand
    return sys.executable


def _ignore(folder: str, names: list[str]) -> set[str]:
    """Skip bytecode and this package's own __init__ (the simulated sglang keeps its own)."""
    skip = {n for n in names if n == "__pycache__" or n.endswith(".pyc")}
    if Path(folder).resolve() == SIM_DIR and "__init__.py" in names:
        skip.add("__init__.py")
    return skip


def install_sim_bin(bin_dir: Path, state_dir: Path, python: str | None = None,
                    version: str | None = None) -> dict[str, str]:
    """Install the simulated tools into bin_dir; return host vars that point at them. `version`: the
    SGLang release the simulated sglang speaks (its captured flags, log lines, endpoints' keys)."""
    bin_dir, state_dir = Path(bin_dir), Path(state_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    lib = bin_dir / ".eagle-sim"
    if lib.exists():
        shutil.rmtree(lib)
    shutil.copytree(SIM_DIR, lib, ignore=_ignore)
    for d in [lib, *[p for p in lib.rglob("*") if p.is_dir()]]:
        os.chmod(d, 0o755)
    py = python or default_python()
    q = shlex.quote
    state = f"EAGLE_SIM_STATE=${{EAGLE_SIM_STATE:-{q(str(state_dir))}}}"
    _write_exec(bin_dir / "nvidia-smi", f"#!/bin/sh\n{state} exec {q(py)} {q(str(lib / 'nvidia_smi.py'))} \"$@\"\n")
    release = f"export EAGLE_SIM_SGLANG_VERSION={q(version)}\n" if version else ""
    _write_exec(bin_dir / "python",
                f"#!/bin/sh\nexport {state}\n{release}"
                f"export PYTHONPATH={q(str(lib / 'sglang_pkg'))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                f"exec {q(py)} \"$@\"\n")
    _write_exec(bin_dir / "dmesg", f"#!/bin/sh\n{state} exec {q(py)} {q(str(lib / 'nvidia_smi.py'))} --sim-dmesg\n")
    for tool in ("scontrol", "sinfo", "kubectl"):   # the simulated workload schedulers (sim/cluster.py)
        _write_exec(bin_dir / tool, f"#!/bin/sh\n{state} exec {q(py)} {q(str(lib / 'cluster.py'))} {tool} \"$@\"\n")
    return {"python": str(bin_dir / "python"), "nvidia_smi": str(bin_dir / "nvidia-smi"),
            "dmesg": str(bin_dir / "dmesg"), "scontrol": str(bin_dir / "scontrol"), "sinfo": str(bin_dir / "sinfo"),
            "kubectl": str(bin_dir / "kubectl")}
