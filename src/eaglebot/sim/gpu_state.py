"""SIMULATED GPU state shared by the fake `nvidia-smi`, the fake SGLang server, the tests and the demo.

Standard library only and importable stand-alone (install_sim_bin copies this file next
to nvidia_smi.py): any program can do

    import gpu_state                                  # or: from eaglebot.sim import gpu_state
    gpu_state.add_holder(os.environ["EAGLE_SIM_STATE"], os.getpid(), gpu=0, mib=19592)
    ...
    gpu_state.remove_holder(os.environ["EAGLE_SIM_STATE"], os.getpid())   # optional

or, from a shell, through the installed wrapper (which sets EAGLE_SIM_STATE):

    nvidia-smi --sim-add-holder PID GPU MIB
    nvidia-smi --sim-remove-holder PID

Only the memory accounting is simulated; the processes are real. A holder counts
only while its REAL pid is alive and not a zombie (/proc/PID/stat state Z or X) and
still has the start time it had when it was registered (PIDs are reused), so
killing a holder really frees its simulated memory and no explicit removal is needed.

State: one JSON file `gpus.json` in the state folder ($EAGLE_SIM_STATE):

    {"gpus": [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA H200", "bus_id": "00000000:00:06.0",
               "total_mib": 143771, "residual_mib": 0, "temp_c": 39, "power_w": 115, ...}],
     "holders": [{"pid": 450, "gpu": 0, "mib": 19592, "start": "123456", "hidden": false}],
     "exit_code": null}

- `residual_mib`: memory used with no process (the few MiB a real GPU can show).
- `hidden: true`: the holder is not listed by --query-compute-apps (as inside a
  container with its own PID namespace) but its memory counts and `fuser` sees it.
- `exit_code`: 9, 14 or 15 make nvidia-smi fail like a broken driver / GPU.
- A holder that dies without `remove_holder` (killed: SIGKILL, or SIGTERM it does not handle)
  leaves a teardown burst in the kernel log, as the real driver does when it tears down a killed
  process's channels: one `NVRM: Xid (PCI:...): 45, pid=PID, name=NAME, Ch 0000000N` line per
  channel, stamped with the host's uptime when the next nvidia-smi call notices the death.
A missing gpus.json means one idle H200.

Stable API (the fake SGLang server and the tests rely on these signatures):
    init_state(state_dir, gpus=1, *, residual_mib=None, exit_code=None) -> dict
    add_holder(state_dir, pid, gpu, mib, *, hidden=False) -> None
    remove_holder(state_dir, pid) -> None
    set_residual(state_dir, gpu, mib) -> None
    set_exit_code(state_dir, code) -> None
    set_health(state_dir, gpu, **knobs) -> None      faults for the health fields (see below)
    set_unknown_fields(state_dir, fields) -> None    fields nvidia-smi rejects, as an older driver
    set_kernel_log(state_dir, lines) -> None         what `nvidia-smi --sim-dmesg` (the sim dmesg) prints
    set_hang(state_dir, seconds) -> None             every query sleeps that long first (a hung driver)
    set_teardown_xids(state_dir, codes) -> None      the Xid lines a killed holder leaves (default: 8 x Xid 45)
    set_hard_exit(state_dir, on) -> None             simulated SGLang schedulers stopped by SIGTERM die unregistered
                                                     (as SGLang's SIGKILL of its children): their teardown lines follow
    reap(state_dir) -> int                           write those lines for holders that died (every nvidia-smi call does)
    load_state(state_dir) -> dict
    live_holders(state) -> list[dict]
    memory_used(state) -> dict[int, int]
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Iterator

STATE_FILE = "gpus.json"
# Health knobs of set_health: event_reasons (the clocks-event-reasons mask, e.g. 0x40), sm_clock,
# ecc_uncorrected, ecc_corrected, remap_pending, remap_failure, pcie_gen, pcie_width, pstate,
# persistence_off, nvlink_inactive (list of links), nvlink_errors ({"replay"|"recovery"|"crc": n}),
# recovery_action (what `gpu_recovery_action` reads: "None", "Reset", "Reboot", "Drain P2P", "Drain and Reset").
# read_error (what every reading of the GPU prints instead of a value: "ERR!", "[Unknown Error]", as
# when its GSP stopped answering).
HEALTH_KNOBS = frozenset({"event_reasons", "sm_clock", "ecc_uncorrected", "ecc_corrected", "remap_pending",
                          "remap_failure", "pcie_gen", "pcie_width", "pstate", "persistence_off",
                          "nvlink_inactive", "nvlink_errors", "recovery_action", "read_error"})
TEARDOWN_XIDS = [45] * 8      # one Xid 45 per channel of a killed CUDA context
KERNEL_LOG_LINES = 5000       # the ring buffer: older lines fall out
# The kernel log of the fixtures' host (tests/fixtures/nvidia-smi/health/2xh200-dmesg-xid.txt): no Xid.
KERNEL_LOG = [
    "[    0.536365] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  ",
    "[    3.992700] NVRM: Persistence mode is deprecated and will be removed in a future release. "
    "Please use nvidia-persistenced instead.",
]
LOCK_FILE = ".gpus.lock"
TOTAL_MIB = 143771
RESERVED_MIB = 615          # total - used - free on an idle H200 (fixtures: 143771 - 0 - 143156)

# UUIDs, bus ids and sensor readings of the machines the fixtures came from.
_KNOWN = [
    {"uuid": "GPU-1555c601-f08f-e040-564f-5f7609b54dba", "bus_id": "00000000:00:06.0", "temp_c": 32, "power_w": 120},
    {"uuid": "GPU-8a99149b-17b3-1667-529a-3e3d7b74610d", "bus_id": "00000000:00:07.0", "temp_c": 33, "power_w": 118},
]
SINGLE_UUID = "GPU-c637b75d-bccc-0cab-3f64-9c4fb3bf5eaf"


def _gpu(i: int, n: int) -> dict[str, Any]:
    if n == 1:
        known = {"uuid": SINGLE_UUID, "bus_id": "00000000:00:06.0", "temp_c": 39, "power_w": 115}
    elif i < len(_KNOWN):
        known = dict(_KNOWN[i])
    else:
        known = {"uuid": f"GPU-5e1a7ed0-0000-4000-8000-{i:012x}", "bus_id": f"00000000:00:{6 + i:02X}.0",
                 "temp_c": 33, "power_w": 118}
    return {"index": i, "name": "NVIDIA H200", "total_mib": TOTAL_MIB, "residual_mib": 0, "persistence": "On",
            "perf": "P0", "power_cap_w": 700, "utilization": 0, **known}


def default_state(gpus: int = 1) -> dict[str, Any]:
    return {"gpus": [_gpu(i, gpus) for i in range(gpus)], "holders": [], "exit_code": None}


def _path(state_dir: str | Path) -> Path:
    return Path(state_dir) / STATE_FILE


def load_state(state_dir: str | Path) -> dict[str, Any]:
    """The state in state_dir (one idle H200 when there is none)."""
    try:
        with open(_path(state_dir)) as f:
            state: dict[str, Any] = json.load(f)
            return state
    except FileNotFoundError:
        return default_state(1)


def _shared(d: Path) -> None:
    """The state folder as every user of the simulated host may write it: the tests (root) set
    it up, the SSH test user's nvidia-smi writes the kernel log a killed holder leaves."""
    d.mkdir(parents=True, exist_ok=True)
    try:
        if d.stat().st_uid == os.geteuid():
            os.chmod(d, 0o777)
    except OSError:
        pass


def save_state(state_dir: str | Path, state: dict[str, Any]) -> None:
    d = Path(state_dir)
    _shared(d)
    tmp = d / f".{STATE_FILE}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f, indent=2)
        f.write("\n")
    os.chmod(tmp, 0o666)   # the SSH test user and the tests (root) both update it
    os.replace(tmp, _path(d))


@contextlib.contextmanager
def _locked(state_dir: str | Path) -> Iterator[dict[str, Any]]:
    """Read-modify-write under an exclusive lock (several processes register at once)."""
    import fcntl

    d = Path(state_dir)
    _shared(d)
    fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o666)     # not the umask's 0644: the other user must lock it too
        fcntl.flock(fd, fcntl.LOCK_EX)
        state = load_state(d)
        yield state
        save_state(d, state)
    finally:
        os.close(fd)


def init_state(state_dir: str | Path, gpus: int = 1, *, residual_mib: list[int] | None = None,
               exit_code: int | None = None) -> dict[str, Any]:
    """Start over with `gpus` idle H200s (optionally some residual MiB per GPU)."""
    state = default_state(gpus)
    for i, mib in enumerate(residual_mib or []):
        state["gpus"][i]["residual_mib"] = int(mib)
    state["exit_code"] = exit_code
    with _locked(state_dir) as s:
        s.clear()
        s.update(state)
    return state


def proc_stat(pid: int) -> tuple[str, str] | None:
    """(state letter, start time) of a live pid, or None.

    The simulator runs stand-alone on the test host and cannot import eaglebot, so it
    reads these two fields itself; eaglebot's parser is eaglebot.facts.host.procs.parse_stat.
    """
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            text = f.read()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], rest[19]


def _argv0(pid: int) -> str:
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            arg0 = f.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        arg0 = ""
    if arg0:
        return arg0
    try:
        with open(f"/proc/{int(pid)}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def add_holder(state_dir: str | Path, pid: int, gpu: int, mib: int, *, hidden: bool = False) -> None:
    """Record that the REAL process `pid` holds `mib` MiB on GPU `gpu` (replaces an earlier entry)."""
    st = proc_stat(pid)
    with _locked(state_dir) as state:
        if not any(g["index"] == int(gpu) for g in state["gpus"]):
            raise ValueError(f"no simulated GPU {gpu}")
        state["holders"] = [h for h in state["holders"] if not (h["pid"] == int(pid) and h["gpu"] == int(gpu))]
        state["holders"].append({"pid": int(pid), "gpu": int(gpu), "mib": int(mib),
                                 "start": st[1] if st else None, "name": _argv0(pid), "hidden": bool(hidden)})


def remove_holder(state_dir: str | Path, pid: int) -> None:
    """Forget every entry of `pid` (a holder that exits is forgotten anyway)."""
    with _locked(state_dir) as state:
        state["holders"] = [h for h in state["holders"] if h["pid"] != int(pid)]


def set_residual(state_dir: str | Path, gpu: int, mib: int) -> None:
    with _locked(state_dir) as state:
        for g in state["gpus"]:
            if g["index"] == int(gpu):
                g["residual_mib"] = int(mib)


def set_exit_code(state_dir: str | Path, code: int | None) -> None:
    """Make nvidia-smi fail with `code` (9, 14, 15), or work again with None."""
    with _locked(state_dir) as state:
        state["exit_code"] = code


def set_health(state_dir: str | Path, gpu: int, **knobs: Any) -> None:
    """Inject health faults on one GPU (HEALTH_KNOBS); `temp_c=` sets its temperature; no knobs: healthy."""
    bad = set(knobs) - HEALTH_KNOBS - {"temp_c"}
    if bad:
        raise ValueError(f"unknown health knob(s) {sorted(bad)}")
    with _locked(state_dir) as state:
        for g in state["gpus"]:
            if g["index"] == int(gpu):
                if "temp_c" in knobs:
                    g["temp_c"] = int(knobs.pop("temp_c"))
                g["health"] = {**(g.get("health") or {}), **knobs} if knobs else {}


def set_unknown_fields(state_dir: str | Path, fields: list[str]) -> None:
    with _locked(state_dir) as state:
        state["unknown_fields"] = list(fields)


def set_kernel_log(state_dir: str | Path, lines: list[str]) -> None:
    with _locked(state_dir) as state:
        state["kernel_log"] = list(lines)


def set_hang(state_dir: str | Path, seconds: float | None) -> None:
    """Make every nvidia-smi query sleep `seconds` before answering (a wedged driver), or None."""
    with _locked(state_dir) as state:
        state["hang_s"] = seconds


def set_teardown_xids(state_dir: str | Path, codes: list[int]) -> None:
    """The Xid codes, one line each, a killed holder leaves in the kernel log ([] for none)."""
    with _locked(state_dir) as state:
        state["teardown_xids"] = [int(c) for c in codes]


def set_hard_exit(state_dir: str | Path, on: bool = True) -> None:
    with _locked(state_dir) as state:
        state["hard_exit"] = bool(on)


def uptime_s() -> float:
    """The host's seconds since boot, as the kernel stamps its log lines."""
    try:
        with open("/proc/uptime") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def kernel_bus(bus_id: str) -> str:
    """nvidia-smi's `00000000:00:06.0` as the kernel prints it: `0000:00:06`."""
    domain, bus, dev = bus_id.split(".")[0].split(":")
    return f"{int(domain, 16):04x}:{bus.lower()}:{dev.lower()}"


def teardown_lines(state: dict[str, Any], h: dict[str, Any], ts: float) -> list[str]:
    gpu = next((g for g in state["gpus"] if g["index"] == h["gpu"]), None)
    if gpu is None:
        return []
    name = os.path.basename(str(h.get("name") or "python"))[:15]
    return [f"[{ts:12.6f}] NVRM: Xid (PCI:{kernel_bus(gpu['bus_id'])}): {code}, pid={h['pid']}, name={name}, "
            f"Ch {8 + n:08x}" for n, code in enumerate(state.get("teardown_xids", TEARDOWN_XIDS))]


def reap(state_dir: str | Path) -> int:
    """Holders that died since the last call (not removed): their teardown lines go to the kernel
    log and they are marked reaped. How many. A state folder this user cannot write is left alone."""
    if not any(not h.get("reaped") and not holder_alive(h) for h in load_state(state_dir)["holders"]):
        return 0
    n = 0
    try:
        with _locked(state_dir) as state:
            ts = uptime_s()
            for h in state["holders"]:
                if h.get("reaped") or holder_alive(h):
                    continue
                h["reaped"] = True
                n += 1
                log = state.setdefault("kernel_log", list(KERNEL_LOG))
                log += teardown_lines(state, h, ts)
                del log[:-KERNEL_LOG_LINES]
    except OSError:
        return 0
    return n


def holder_alive(h: dict[str, Any]) -> bool:
    st = proc_stat(h["pid"])
    if st is None or st[0] in ("Z", "X"):
        return False
    return h.get("start") in (None, st[1])


def live_holders(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Holders whose process is alive (not a zombie, same start time), in registration order."""
    return [h for h in state["holders"] if holder_alive(h)]


def memory_used(state: dict[str, Any]) -> dict[int, int]:
    """MiB used per GPU index: residual + live holders."""
    used = {g["index"]: int(g.get("residual_mib", 0)) for g in state["gpus"]}
    for h in live_holders(state):
        if h["gpu"] in used:
            used[h["gpu"]] += int(h["mib"])
    return used
