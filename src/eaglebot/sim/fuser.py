#!/usr/bin/env python3
"""SIMULATED `fuser -v /dev/nvidia*`: names the REAL processes registered as GPU holders.

Stand-alone, standard library only. Lists every live holder in $EAGLE_SIM_STATE
(including `hidden` ones, which nvidia-smi's compute-apps query does not show, as in
a container) on /dev/nvidiaN, /dev/nvidiactl and /dev/nvidia-uvm, in the layout of
psmisc's fuser (see tests/fixtures/nvidia-smi/h200-fuser-busy.txt). Like the real
tool it writes the table to stderr and exits 1 when nothing uses the devices.
"""
from __future__ import annotations

import os
import pwd
import sys
from typing import TYPE_CHECKING, Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if TYPE_CHECKING:  # mypy checks this file as eaglebot.sim.fuser
    from . import gpu_state
else:
    import gpu_state  # noqa: E402  (stand-alone: imported from this file's folder)


def _user(pid: int) -> str:
    try:
        return pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name
    except (OSError, KeyError):
        return "?"


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def render(state: dict[str, Any]) -> str:
    live = gpu_state.live_holders(state)
    if not live:
        return ""
    lines = [" " * 21 + "USER        PID ACCESS COMMAND"]
    devices: list[tuple[str, list[int]]] = []
    for g in state["gpus"]:
        devices.append((f"/dev/nvidia{g['index']}", sorted({h["pid"] for h in live if h["gpu"] == g["index"]})))
    every = sorted({h["pid"] for h in live})
    devices += [("/dev/nvidiactl", every), ("/dev/nvidia-uvm", every)]
    for dev, pids in devices:
        for n, pid in enumerate(pids):
            head = f"{dev}:" if n == 0 else ""
            lines.append(f"{head:<21}{_user(pid):<4}{pid:>11} F...m {_comm(pid)}")
    return "".join(line + "\n" for line in lines)


def main() -> int:
    state = gpu_state.load_state(os.environ.get("EAGLE_SIM_STATE") or ".")
    text = render(state)
    sys.stderr.write(text)
    return 0 if text else 1


if __name__ == "__main__":
    sys.exit(main())
