#!/usr/bin/env python3
"""SIMULATED nvidia-smi: prints exactly the formats of the real one, for tests and the demo.

Stand-alone, standard library only, runnable by any user:
    EAGLE_SIM_STATE=/path/to/state python3 nvidia_smi.py [args]
(`install_sim_bin` writes an `nvidia-smi` wrapper that does this.) The GPUs, their
residual memory and the holder processes live in $EAGLE_SIM_STATE/gpus.json (see
gpu_state.py); holders are REAL processes and count only while alive, so killing
is real and only the memory accounting is simulated.

Supported (the forms in tests/fixtures/nvidia-smi/README.md, fields in the order asked):
    nvidia-smi                                    the table (a SIMULATED banner goes to stderr)
    nvidia-smi -L
    nvidia-smi --query-gpu=F[,F...] --format=csv[,noheader][,nounits] [-i 0,1] [--loop-ms=N | -lms N]
    nvidia-smi --query-compute-apps=F[,F...] --format=csv[,noheader][,nounits]
    nvidia-smi nvlink -s | nvlink -e              (tests/fixtures/nvidia-smi/health/)
Health fields (persistence_mode, pstate, clocks_event_reasons.*, ecc.errors.*, remapped_rows.*,
clocks.sm, clocks.max.sm, pcie.link.*, power.limit, ...) print the idle 2x H200 readings of
tests/fixtures/nvidia-smi/health/ unless a GPU's "health" knobs (gpu_state.set_health) inject
a fault; gpu_state.set_unknown_fields makes fields unknown, as on an older driver.
Simulator controls (not in the real tool):
    nvidia-smi --sim-add-holder PID GPU MIB [--hidden]
    nvidia-smi --sim-remove-holder PID
    nvidia-smi --sim-init N_GPUS
    nvidia-smi --sim-dmesg                        the simulated kernel log (a `dmesg` stand-in)
"""
from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if TYPE_CHECKING:  # mypy checks this file as eaglebot.sim.nvidia_smi
    from . import gpu_state
else:
    import gpu_state  # noqa: E402  (stand-alone: imported from this file's folder)

DRIVER, CUDA = "580.159.04", "13.0"

# field -> (header, unit or None)
GPU_FIELDS = {
    "index": ("index", None),
    "uuid": ("uuid", None),
    "name": ("name", None),
    "gpu_name": ("name", None),
    "pci.bus_id": ("pci.bus_id", None),
    "driver_version": ("driver_version", None),
    "count": ("count", None),
    "memory.total": ("memory.total [MiB]", "MiB"),
    "memory.used": ("memory.used [MiB]", "MiB"),
    "memory.free": ("memory.free [MiB]", "MiB"),
    "utilization.gpu": ("utilization.gpu [%]", "%"),
    "temperature.gpu": ("temperature.gpu", None),
    "power.draw": ("power.draw [W]", "W"),
    "persistence_mode": ("persistence_mode", None),
    "pstate": ("pstate", None),
    "clocks_event_reasons.active": ("clocks_event_reasons.active", None),
    "clocks_throttle_reasons.active": ("clocks_event_reasons.active", None),   # deprecated name
    "ecc.errors.uncorrected.volatile.total": ("ecc.errors.uncorrected.volatile.total", None),
    "ecc.errors.corrected.volatile.total": ("ecc.errors.corrected.volatile.total", None),
    "retired_pages.pending": ("retired_pages.pending", None),
    "remapped_rows.pending": ("remapped_rows.pending", None),
    "remapped_rows.failure": ("remapped_rows.failure", None),
    "temperature.memory": ("temperature.memory", None),
    "power.limit": ("power.limit [W]", "W"),
    "clocks.sm": ("clocks.current.sm [MHz]", "MHz"),
    "clocks.current.sm": ("clocks.current.sm [MHz]", "MHz"),
    "clocks.max.sm": ("clocks.max.sm [MHz]", "MHz"),
    "pcie.link.gen.current": ("pcie.link.gen.current", None),
    "pcie.link.gen.max": ("pcie.link.gen.max", None),
    "pcie.link.width.current": ("pcie.link.width.current", None),
    "pcie.link.width.max": ("pcie.link.width.max", None),
    "gpu_recovery_action": ("gpu_recovery_action", None),     # fixtures: h200-query-recovery-action.csv.txt
    **{f"clocks_event_reasons.{k}": (f"clocks_event_reasons.{k}", None)
       for k in ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                 "hw_power_brake_slowdown")},
}
_REASON_BITS = {"sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal_slowdown": 0x20,
                "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80}
NVLINKS = 18                # per H200 (fixtures: nvlink -s)
NVLINK_GBPS = "26.562"
APP_FIELDS = {
    "pid": ("pid", None),
    "process_name": ("process_name", None),
    "name": ("process_name", None),
    "used_memory": ("used_gpu_memory [MiB]", "MiB"),
    "used_gpu_memory": ("used_gpu_memory [MiB]", "MiB"),
    "gpu_uuid": ("gpu_uuid", None),
    "gpu_name": ("gpu_name", None),
    "gpu_bus_id": ("gpu_bus_id", None),
}

EXIT_MESSAGES = {
    9: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
       "Make sure that the latest NVIDIA driver is installed and running.\n",
    14: "WARNING: infoROM is corrupted at gpu 00000000:00:06.0\n",
    15: "Unable to determine the device handle for GPU0000:00:06.0: GPU is lost.  "
        "Reboot the system to recover this GPU\n",
}


def _fmt(value: object, unit: str | None, nounits: bool) -> str:
    if unit is None or nounits or str(value).startswith(("[", "ERR!")):
        return str(value)
    return f"{value} {unit}" if unit != "%" else f"{value} %"


def _health_value(field: str, g: dict[str, Any]) -> object:
    """Health readings: the idle (or, with utilization, busy) H200s of the fixtures, or a knob's fault."""
    h = g.get("health") or {}
    busy = int(g.get("utilization", 0)) > 0
    mask = int(h.get("event_reasons", 0x4 if busy else 0x1))
    if field.startswith("clocks_event_reasons.") and field != "clocks_event_reasons.active":
        return "Active" if mask & _REASON_BITS[field.split(".", 1)[1]] else "Not Active"
    return {
        "pstate": h.get("pstate", "P0"),
        "clocks_event_reasons.active": f"0x{mask:016x}", "clocks_throttle_reasons.active": f"0x{mask:016x}",
        "ecc.errors.uncorrected.volatile.total": int(h.get("ecc_uncorrected", 0)),
        "ecc.errors.corrected.volatile.total": int(h.get("ecc_corrected", 0)),
        "retired_pages.pending": "[N/A]",
        "remapped_rows.pending": "Yes" if h.get("remap_pending") else "No",
        "remapped_rows.failure": "Yes" if h.get("remap_failure") else "No",
        "temperature.memory": int(g["temp_c"]) - 10,
        "power.limit": f"{float(g.get('power_cap_w', 700)):.2f}",
        "clocks.sm": int(h.get("sm_clock", 1440 if busy else 345)),
        "clocks.current.sm": int(h.get("sm_clock", 1440 if busy else 345)),
        "clocks.max.sm": 1980,
        "pcie.link.gen.current": int(h.get("pcie_gen", 5)), "pcie.link.gen.max": 5,
        "pcie.link.width.current": int(h.get("pcie_width", 16)), "pcie.link.width.max": 16,
        "persistence_mode": "Disabled" if h.get("persistence_off") else "Enabled",
        "gpu_recovery_action": h.get("recovery_action", "None"),
    }[field]


# Fields the driver still reads when the GPU itself does not answer (read_error).
_IDENTITY = {"index", "uuid", "name", "gpu_name", "pci.bus_id", "driver_version", "count"}


def _gpu_value(field: str, g: dict[str, Any], used: int, n: int) -> object:
    err = (g.get("health") or {}).get("read_error")
    if err and field not in _IDENTITY:
        return err
    if field in _HEALTH_FIELDS:
        return _health_value(field, g)
    return {
        "index": g["index"], "uuid": g["uuid"], "name": g["name"], "gpu_name": g["name"],
        "pci.bus_id": g["bus_id"], "driver_version": DRIVER, "count": n,
        "memory.total": g["total_mib"], "memory.used": used,
        "memory.free": max(0, g["total_mib"] - used - gpu_state.RESERVED_MIB),
        "utilization.gpu": g.get("utilization", 0), "temperature.gpu": g["temp_c"],
        "power.draw": f"{float(g['power_w']):.2f}",
    }[field]


_HEALTH_FIELDS = set(GPU_FIELDS) - {"index", "uuid", "name", "gpu_name", "pci.bus_id", "driver_version", "count",
                                    "memory.total", "memory.used", "memory.free", "utilization.gpu",
                                    "temperature.gpu", "power.draw"}


def nvlink(state: dict[str, Any], errors: bool) -> str:
    """`nvidia-smi nvlink -s` (or `-e`) in the real layout; a knob can take links down or add errors."""
    out: list[str] = []
    if len(state["gpus"]) < 2:
        return ""
    for g in state["gpus"]:
        h = g.get("health") or {}
        out.append(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
        down = {int(x) for x in h.get("nvlink_inactive", [])}
        errs = {k: int(v) for k, v in (h.get("nvlink_errors") or {}).items()}
        for link in range(NVLINKS):
            if not errors:
                out.append(f"\t Link {link}: {'<inactive>' if link in down else NVLINK_GBPS + ' GB/s'}")
                continue
            for kind, key in (("Replay", "replay"), ("Recovery", "recovery"), ("CRC", "crc")):
                out.append(f"\t Link {link}: {kind} Errors: {errs.get(key, 0) if link == 0 else 0}")
            out.append("")
    return "".join(line + "\n" for line in out)


def query(kind: str, fields: list[str], fmt: set[str], state: dict[str, Any], ids: list[int] | None = None,
          holders: list[dict[str, Any]] | None = None) -> str:
    """A `--query-gpu` / `--query-compute-apps` answer; `holders` defaults to the live ones."""
    live = gpu_state.live_holders(state) if holders is None else holders
    table = GPU_FIELDS if kind == "gpu" else APP_FIELDS
    unknown = set(state.get("unknown_fields") or [])
    for f in fields:
        if f not in table or (kind == "gpu" and f in unknown):
            raise SystemExit(_fail(f'Field "{f}" is not a valid field to query.\n\n', 2))
    nounits = "nounits" in fmt
    lines = []
    if "noheader" not in fmt:
        lines.append(", ".join(table[f][0] for f in fields))
    used = _used(state, live)
    gpus = [g for g in state["gpus"] if ids is None or g["index"] in ids]
    if kind == "gpu":
        for g in gpus:
            lines.append(", ".join(_fmt(_gpu_value(f, g, used[g["index"]], len(state["gpus"])), table[f][1], nounits)
                                   for f in fields))
    else:
        for g in gpus:
            for h in live:
                if h["gpu"] != g["index"] or h.get("hidden"):
                    continue
                vals = {"pid": h["pid"], "process_name": h.get("name") or "?", "name": h.get("name") or "?",
                        "used_memory": h["mib"], "used_gpu_memory": h["mib"], "gpu_uuid": g["uuid"],
                        "gpu_name": g["name"], "gpu_bus_id": g["bus_id"]}
                lines.append(", ".join(_fmt(vals[f], table[f][1], nounits) for f in fields))
    return "".join(line + "\n" for line in lines)


def _used(state: dict[str, Any], live: list[dict[str, Any]]) -> dict[int, int]:
    used = {g["index"]: int(g.get("residual_mib", 0)) for g in state["gpus"]}
    for h in live:
        if h["gpu"] in used:
            used[h["gpu"]] += int(h["mib"])
    return used


def table(state: dict[str, Any], now: float | None = None, holders: list[dict[str, Any]] | None = None) -> str:
    """The plain `nvidia-smi` view, byte for byte in the real layout; `holders` defaults to the live ones."""
    all_live = gpu_state.live_holders(state) if holders is None else holders
    used = _used(state, all_live)
    sep = "+-----------------------------------------+------------------------+----------------------+"
    out = [time.asctime(time.localtime(now)) + "       ",
           "+" + "-" * 89 + "+",
           f"| NVIDIA-SMI {DRIVER}             Driver Version: {DRIVER}     CUDA Version: {CUDA}     |",
           sep,
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                        |               MIG M. |",
           "|=========================================+========================+======================|"]
    for g in state["gpus"]:
        out.append(f"|{g['index']:>4}  {g['name']:<29.29}{g.get('persistence', 'On'):>4}  |"
                   f"{g['bus_id']:>19} {'Off':<3} |{'0':>21} |")
        out.append(f"| {'N/A':>3} {g['temp_c']:>4}C    {g.get('perf', 'P0'):<2}{str(round(g['power_w'])) + 'W':>16} / "
                   f"{str(g.get('power_cap_w', 700)) + 'W':>5} |{used[g['index']]:>8}MiB / {g['total_mib']:>6}MiB |"
                   f"{g.get('utilization', 0):>7}%{'Default':>13} |")
        out.append(f"|{'':41}|{'':24}|{'Disabled':>21} |")
        out.append(sep)
    out.append("")
    out += ["+" + "-" * 89 + "+",
            "| Processes:                                                                              |",
            "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
            "|        ID   ID                                                               Usage      |",
            "|" + "=" * 89 + "|"]
    live = [h for h in all_live if not h.get("hidden")]
    if not live:
        out.append(f"|  {'No running processes found':<87}|")
    for h in sorted(live, key=lambda h: (h["gpu"], h["pid"])):
        name = h.get("name") or "?"
        if len(name) > 36:
            name = "..." + name[-33:]
        out.append(f"|  {h['gpu']:>3}   {'N/A':>3}  {'N/A':>3}  {h['pid']:>14}  {'C':>5}   "
                   f"{name:<36}{str(h['mib']) + 'MiB':>10} |")
    out.append("+" + "-" * 89 + "+")
    return "".join(line + "\n" for line in out)


def _fail(msg: str, code: int) -> int:
    sys.stdout.write(msg)
    sys.stdout.flush()
    return code


def main(argv: list[str]) -> int:
    state_dir = os.environ.get("EAGLE_SIM_STATE") or "."
    if argv[:1] == ["--sim-add-holder"]:
        pid, gpu, mib = (int(x) for x in argv[1:4])
        gpu_state.add_holder(state_dir, pid, gpu, mib, hidden="--hidden" in argv[4:])
        return 0
    if argv[:1] == ["--sim-remove-holder"]:
        gpu_state.remove_holder(state_dir, int(argv[1]))
        return 0
    if argv[:1] == ["--sim-init"]:
        gpu_state.init_state(state_dir, int(argv[1]))
        return 0
    gpu_state.reap(state_dir)        # the driver notices a killed holder: its teardown Xids
    state = gpu_state.load_state(state_dir)
    if argv[:1] == ["--sim-dmesg"]:
        sys.stdout.write("".join(line + "\n" for line in state.get("kernel_log", gpu_state.KERNEL_LOG)))
        return 0
    if state.get("hang_s"):
        time.sleep(float(state["hang_s"]))
    if state.get("exit_code"):
        return _fail(EXIT_MESSAGES.get(state["exit_code"], "Unknown Error\n"), int(state["exit_code"]))
    kind = fields = None
    fmt: set[str] = set()
    ids: list[int] | None = None
    loop_ms: int | None = None
    args = list(argv)
    if args[:1] == ["nvlink"]:
        if args[1:] not in (["-s"], ["--status"], ["-e"], ["--errorcounters"]):
            return _fail(f"SIMULATED nvidia-smi: unsupported nvlink arguments {args[1:]!r}\n", 2)
        sys.stdout.write(nvlink(state, errors=args[1] in ("-e", "--errorcounters")))
        return 0
    while args:
        a = args.pop(0)
        if a.startswith("--query-gpu=") or a.startswith("--query-compute-apps="):
            kind = "gpu" if a.startswith("--query-gpu=") else "apps"
            fields = [f.strip() for f in a.split("=", 1)[1].split(",") if f.strip()]
        elif a.startswith("--format="):
            fmt = set(a.split("=", 1)[1].split(","))
        elif a in ("-i", "--id") and args:
            ids = [int(x) for x in args.pop(0).split(",")]
        elif a.startswith("--loop-ms=") or a.startswith("-lms="):
            loop_ms = int(a.split("=", 1)[1])
        elif a in ("-lms", "--loop-ms") and args:
            loop_ms = int(args.pop(0))
        elif a.startswith("--id="):
            ids = [int(x) for x in a.split("=", 1)[1].split(",")]
        elif a in ("-L", "--list-gpus"):
            for g in state["gpus"]:
                print(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})")
            return 0
        else:
            return _fail(f"SIMULATED nvidia-smi: unsupported argument {a!r}\n", 2)
    if kind is None:
        sys.stderr.write("[SIMULATED nvidia-smi: eaglebot test double, no real GPU]\n")
        sys.stdout.write(table(state))
        return 0
    if "csv" not in fmt:
        return _fail("--format must include csv\n", 2)
    sys.stdout.write(query(kind, fields or [], fmt, state, ids))
    while loop_ms is not None:   # until killed or the reader goes away, as the real one
        sys.stdout.flush()
        time.sleep(loop_ms / 1000)
        sys.stdout.write(query(kind, fields or [], fmt, gpu_state.load_state(state_dir), ids))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:
        sys.exit(0)
