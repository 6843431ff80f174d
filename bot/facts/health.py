"""GPU health facts: the nvidia-smi queries, NVLink, the kernel log's Xids and DCGM, as pure parsers.

Every parser takes the text a tool printed and returns plain data; they are tested on the
real 2x H200 captures in `tests/fixtures/nvidia-smi/health/` and on faulty variants derived
from them. `evaluate` turns one GPU's readings into a verdict (ok / warn / fail) and the
reasons, against thresholds the skill takes in `with:`.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Sequence

from eaglebot.facts.nvsmi import NvsmiFact, ParseError, split_csv, strip_unit
from eaglebot.sdk import CommandResult

# The fields the health query asks for, in order (driver 580 knows them all). An older driver
# that lacks one answers `Field "x" is not a valid field to query.` (exit 2): the skill drops
# that field and asks again.
HEALTH_FIELDS = [
    "index", "uuid", "pci.bus_id", "persistence_mode", "pstate", "clocks_event_reasons.active",
    "ecc.errors.uncorrected.volatile.total", "ecc.errors.corrected.volatile.total",
    "remapped_rows.pending", "remapped_rows.failure", "temperature.gpu", "power.draw", "power.limit",
    "clocks.sm", "clocks.max.sm", "pcie.link.gen.current", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max", "utilization.gpu",
]
# The health watch asks one field more: the recovery the driver recommends (driver 550+; an
# older one rejects it and the watch asks without it, as gpu.health does with any field).
WATCH_FIELDS = [*HEALTH_FIELDS, "gpu_recovery_action"]
RECOVERY_NONE = "None"
RECOVERY_PREFIX = "driver recovery action: "
# Never dropped: without them there is nothing to report on.
REQUIRED_FIELDS = ("index",)


def health_fact(fields: Sequence[str]) -> NvsmiFact[dict[int, dict[str, Any]]]:
    """The health query over `fields` (HEALTH asks all; a driver that lacks one is asked again without)."""
    asked = list(fields)
    return NvsmiFact((f"--query-gpu={','.join(asked)}", "--format=csv,noheader,nounits"),
                     lambda text: parse_health(text, asked), "--query-gpu (health)")

_BAD_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')


def bad_field(text: str) -> str | None:
    """The field an older driver rejects (`Field "x" is not a valid field to query.`), or None."""
    m = _BAD_FIELD.search(text)
    return m.group(1) if m else None


HealthFact = NvsmiFact[dict[int, dict[str, Any]]]


async def ask_health(run: Callable[[str], Awaitable[CommandResult]], host_vars: Mapping[str, Any],
                     first: HealthFact) -> tuple[CommandResult, HealthFact, list[str]]:
    """Run the health query `first` (HEALTH, or the watch's) through `run` (the caller's timeout
    policy), asking again without each field this nvidia-smi rejects (an older driver; never a
    required one). Returns the last result, the fact that produced it and the fields dropped."""
    asked, dropped = first.args[0].removeprefix("--query-gpu=").split(","), []
    fact = first
    while True:
        res = await run(fact.command(host_vars))
        bad = bad_field(res.stdout + res.stderr) if res.exit_status == 2 else None
        if bad and bad in asked and bad not in REQUIRED_FIELDS:
            asked.remove(bad)
            dropped.append(bad)
            fact = health_fact(asked)
            continue
        return res, fact, dropped


# -- clocks event reasons (NVML nvmlClocksEventReasons) ---------------------------------------

EVENT_REASONS = {
    0x1: "idle",
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
    0x100: "display clock setting",
}
# Bits that point at the node (idle, a power cap under load, app clocks are normal).
FAULT_BITS = {0x8: "fail", 0x40: "fail", 0x80: "fail", 0x20: "warn"}


def decode_event_reasons(mask: int) -> list[str]:
    """0x44 -> ["SW power cap", "HW thermal slowdown"]; unknown bits are named by value."""
    names = [name for bit, name in EVENT_REASONS.items() if mask & bit]
    rest = mask & ~sum(EVENT_REASONS)
    if rest:
        names.append(f"unknown reason bits {rest:#x}")
    return names


# -- the --query-gpu health rows ---------------------------------------------------------------

def _na(v: str) -> bool:
    return v.strip() in ("[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "")


def _int(v: str) -> int | None:
    if _na(v):
        return None
    s = strip_unit(v)
    try:
        return int(s, 16) if s.lower().startswith("0x") else int(float(s))
    except ValueError:
        raise ParseError(f"not a number: {v!r}") from None


def _float(v: str) -> float | None:
    if _na(v):
        return None
    try:
        return float(strip_unit(v))
    except ValueError:
        raise ParseError(f"not a number: {v!r}") from None


def _yes(v: str) -> bool | None:
    if _na(v):
        return None
    if v.strip() in ("Yes", "No"):
        return v.strip() == "Yes"
    raise ParseError(f"expected Yes or No, got {v!r}")


_CONVERT: dict[str, Callable[[str], Any]] = {
    "index": _int, "uuid": str.strip, "pci.bus_id": str.strip, "persistence_mode": str.strip,
    "pstate": str.strip, "clocks_event_reasons.active": _int, "clocks_throttle_reasons.active": _int,
    "ecc.errors.uncorrected.volatile.total": _int, "ecc.errors.corrected.volatile.total": _int,
    "retired_pages.pending": _yes, "remapped_rows.pending": _yes, "remapped_rows.failure": _yes,
    "temperature.gpu": _int, "temperature.memory": _int, "power.draw": _float, "power.limit": _float,
    "clocks.sm": _int, "clocks.current.sm": _int, "clocks.max.sm": _int, "pcie.link.gen.current": _int,
    "pcie.link.gen.max": _int, "pcie.link.width.current": _int, "pcie.link.width.max": _int,
    "utilization.gpu": _int, "gpu_recovery_action": lambda v: None if _na(v) else v.strip(),
}
# Header names nvidia-smi prints for a field asked under another name.
_ALIASES = {"clocks_throttle_reasons.active": "clocks_event_reasons.active", "clocks.current.sm": "clocks.sm"}


def parse_health(text: str, fields: list[str] | None = None) -> dict[int, dict[str, Any]]:
    """Health rows -> {gpu index: {field: value}}, with or without header and units.

    Values are typed (ints, floats, booleans for Yes/No, the mask as an int); `[N/A]` is None.
    With a header (`--format=csv`) the columns come from it (`clocks.current.sm [MHz]` is
    `clocks.sm`); without one, `fields` names them in the order asked.
    """
    rows = split_csv(text)
    if not rows:
        return {}
    if rows[0] and re.sub(r"\s*\[[^\]]*\]$", "", rows[0][0]) == "index":
        header = [re.sub(r"\s*\[[^\]]*\]$", "", c) for c in rows[0]]
        rows = rows[1:]
        fields = header
    elif fields is None:
        raise ParseError("no header line and no field names given")
    names = [_ALIASES.get(f, f) for f in fields]
    if "index" not in names:
        raise ParseError("the health query must include index")
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        if len(r) != len(names):
            raise ParseError(f"expected {len(names)} columns, got {len(r)}: {', '.join(r)!r}")
        rec: dict[str, Any] = {}
        for name, v in zip(names, r):
            conv = _CONVERT.get(name)
            if conv is None:
                rec[name] = None if _na(v) else strip_unit(v)
            elif name not in rec or rec[name] is None:   # a deprecated alias repeats a column
                rec[name] = conv(v)
        idx = rec["index"]
        if not isinstance(idx, int):
            raise ParseError(f"not a GPU index: {rec['index']!r}")
        out[idx] = rec
    return out


# -- nvidia-smi nvlink -s / -e -----------------------------------------------------------------

_GPU_LINE = re.compile(r"^GPU (\d+): ")
_LINK_SPEED = re.compile(r"^\s*Link (\d+): (.+?)\s*$")
_LINK_ERR = re.compile(r"^\s*Link (\d+): (Replay|Recovery|CRC) Errors: (\d+)\s*$")


def parse_nvlink_status(text: str) -> dict[int, dict[int, float | None]]:
    """`nvidia-smi nvlink -s` -> {gpu: {link: GB/s, or None when `<inactive>`}}; no NVLink -> {}."""
    out: dict[int, dict[int, float | None]] = {}
    gpu: int | None = None
    for line in text.splitlines():
        m = _GPU_LINE.match(line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = {}
            continue
        m = _LINK_SPEED.match(line)
        if m and gpu is not None:
            speed = m.group(2)
            num = re.match(r"^(\d+(?:\.\d+)?) GB/s$", speed)
            out[gpu][int(m.group(1))] = float(num.group(1)) if num else None
    return out


def parse_nvlink_errors(text: str) -> dict[int, dict[str, int]]:
    """`nvidia-smi nvlink -e` -> {gpu: {"replay": n, "recovery": n, "crc": n}} summed over links."""
    out: dict[int, dict[str, int]] = {}
    gpu: int | None = None
    for line in text.splitlines():
        m = _GPU_LINE.match(line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = {"replay": 0, "recovery": 0, "crc": 0}
            continue
        m = _LINK_ERR.match(line)
        if m and gpu is not None:
            out[gpu][m.group(2).lower()] += int(m.group(3))
    return out


HEALTH = health_fact(HEALTH_FIELDS)
NVLINK_STATUS = NvsmiFact(("nvlink", "-s"), parse_nvlink_status, "nvlink -s")
NVLINK_ERRORS = NvsmiFact(("nvlink", "-e"), parse_nvlink_errors, "nvlink -e")


# -- the kernel log's Xid lines ---------------------------------------------------------------

# One line each (NVIDIA's Xid catalogue); severity: what the Xid says about the node.
XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception (usually the application)", "warn"),
    31: ("GPU memory page fault (usually the application)", "warn"),
    43: ("GPU stopped processing", "warn"),
    45: ("preemptive cleanup after earlier errors", "warn"),
    48: ("double-bit ECC error", "fail"),
    61: ("internal micro-controller breakpoint/warning", "fail"),
    62: ("internal micro-controller halt", "fail"),
    63: ("ECC page retirement or row remap recorded", "warn"),
    64: ("ECC page retirement or row remap recording failure", "fail"),
    74: ("NVLink error", "fail"),
    79: ("GPU has fallen off the bus", "fail"),
    92: ("high single-bit ECC error rate", "warn"),
    94: ("contained ECC error (restart the application)", "warn"),
    95: ("uncontained ECC error (reset the GPU)", "fail"),
    119: ("GSP RPC timeout", "fail"),
    120: ("GSP error", "fail"),
}

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),?\s*(.*)$")
_KTIME = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")


@dataclass
class Xid:
    bus_id: str           # as the kernel prints it: 0000:00:06 (domain:bus:device)
    code: int
    text: str
    meaning: str
    severity: str
    ts: float | None = None   # the kernel's seconds since boot (`[  123.456]`), when printed

    def line(self) -> str:
        return f"Xid {self.code} ({self.meaning})"


def parse_xids(text: str) -> list[Xid]:
    """Xid lines of `dmesg` (`NVRM: Xid (PCI:0000:00:06): 79, pid=..., GPU has fallen off the bus.`)."""
    out = []
    for line in text.splitlines():
        m = _XID.search(line)
        if not m:
            continue
        code = int(m.group(2))
        meaning, severity = XID_MEANINGS.get(code, ("see NVIDIA's Xid catalogue", "warn"))
        t = _KTIME.match(line)
        out.append(Xid(m.group(1).lower(), code, m.group(3).strip(), meaning, severity,
                       float(t.group(1)) if t else None))
    return out


def kernel_log_command(dmesg: str) -> str:
    """The kernel log's Xid lines (the last 200); exit 3 with the error's last line when the
    log cannot be read (non-root, dmesg_restrict)."""
    d = shlex.quote(dmesg)
    return (f"if out=$(LC_ALL=C {d} 2>&1); then printf '%s\\n' \"$out\" | grep -F 'Xid' | tail -n 200; exit 0; "
            f"else printf '%s\\n' \"$out\" | tail -n 1; exit 3; fi")


def xids_since(xids: list[Xid], cursor: float | None) -> tuple[list[Xid], float | None]:
    """The Xids after `cursor` (kernel seconds read up to) and the new cursor, so a watch reports
    each Xid once. None: never read (every Xid is new). A log whose newest Xid is older than the
    cursor was cleared or the host rebooted (the clock started over): all of it is new."""
    stamps = [x.ts for x in xids if x.ts is not None]
    newest = max(stamps) if stamps else None
    if cursor is None or newest is None or newest < cursor:
        return [x for x in xids if x.ts is not None or cursor is None], newest if newest is not None else 0.0
    return [x for x in xids if x.ts is not None and x.ts > cursor], newest


def xid_gpu(xid: Xid, bus_ids: dict[int, str]) -> int | None:
    """The GPU index whose `pci.bus_id` (00000000:00:06.0) matches the Xid's PCI:0000:00:06."""
    want = xid.bus_id.split(".")[0].split(":")
    for idx, bus in bus_ids.items():
        have = bus.lower().split(".")[0].split(":")
        if len(have) == 3 and len(want) >= 2 and have[-2:] == want[-2:] and int(have[0], 16) == int(want[0], 16):
            return idx
    return None


# -- the verdict -------------------------------------------------------------------------------

@dataclass
class Thresholds:
    temp_warn_c: int = 85
    temp_fail_c: int = 95
    corrected_ecc_warn: int = 1000
    nvlink_errors_warn: int = 1
    nvlink_errors_fail: int = 1000
    pcie_width_below_max: str = "fail"      # "fail" or "warn": x8 of x16 halves host<->GPU bandwidth
    persistence_off: str = "warn"


@dataclass
class Verdict:
    verdict: str = "ok"
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # normal readings worth a line (idle clocks)

    def add(self, level: str, reason: str) -> None:
        self.reasons.append(reason)
        if level == "fail" or (level == "warn" and self.verdict == "ok"):
            self.verdict = level

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reasons": list(self.reasons)}


def evaluate(gpu: dict[str, Any], t: Thresholds, *, nvlink: dict[int, float | None] | None = None,
             nvlink_errors: dict[str, int] | None = None, xids: list[Xid] | None = None) -> Verdict:
    """One GPU's readings -> verdict and reasons (each reason one short phrase)."""
    v = Verdict()
    mask = gpu.get("clocks_event_reasons.active")
    if isinstance(mask, int):
        for bit, level in FAULT_BITS.items():
            if mask & bit:
                v.add(level, EVENT_REASONS[bit])
        if mask & 0x1 and not mask & ~0x1:
            v.notes.append("idle (low SM clock is normal)")
    unc = gpu.get("ecc.errors.uncorrected.volatile.total")
    if isinstance(unc, int) and unc > 0:
        v.add("fail", f"{unc} uncorrected ECC error{'s' if unc != 1 else ''}")
    cor = gpu.get("ecc.errors.corrected.volatile.total")
    if isinstance(cor, int) and cor >= t.corrected_ecc_warn:
        v.add("warn", f"{cor} corrected ECC errors (>= {t.corrected_ecc_warn})")
    if gpu.get("remapped_rows.failure") is True:
        v.add("fail", "row remapping failed")
    if gpu.get("remapped_rows.pending") is True:
        v.add("warn", "row remap pending (reset the GPU)")
    if gpu.get("retired_pages.pending") is True:
        v.add("warn", "page retirement pending (reset the GPU)")
    temp = gpu.get("temperature.gpu")
    if isinstance(temp, int):
        if temp >= t.temp_fail_c:
            v.add("fail", f"temperature {temp} C (>= {t.temp_fail_c} C)")
        elif temp >= t.temp_warn_c:
            v.add("warn", f"temperature {temp} C (>= {t.temp_warn_c} C)")
    wc, wm = gpu.get("pcie.link.width.current"), gpu.get("pcie.link.width.max")
    if isinstance(wc, int) and isinstance(wm, int) and wc < wm:
        v.add(t.pcie_width_below_max, f"PCIe link x{wc} of x{wm}")
    gc, gm = gpu.get("pcie.link.gen.current"), gpu.get("pcie.link.gen.max")
    if isinstance(gc, int) and isinstance(gm, int) and gc < gm:
        idle = isinstance(mask, int) and mask & 0x1
        if idle:   # the link trains down to save power at idle
            v.notes.append(f"PCIe gen {gc} of {gm} at idle")
        else:
            v.add("warn", f"PCIe gen {gc} of {gm} under load")
    pm = gpu.get("persistence_mode")
    if pm == "Disabled":
        v.add(t.persistence_off, "persistence mode off")
    if nvlink:
        down = sorted(k for k, s in nvlink.items() if s is None)
        if down:
            v.add("fail", f"NVLink {', '.join(map(str, down))} inactive")
    if nvlink_errors:
        total = sum(nvlink_errors.values())
        parts = ", ".join(f"{k} {n}" for k, n in nvlink_errors.items() if n)
        if total >= t.nvlink_errors_fail:
            v.add("fail", f"NVLink errors: {parts}")
        elif total >= t.nvlink_errors_warn:
            v.add("warn", f"NVLink errors: {parts}")
    rec = gpu.get("gpu_recovery_action")
    if isinstance(rec, str) and rec != RECOVERY_NONE:
        v.add("fail", f"{RECOVERY_PREFIX}{rec}")
    for x in xids or []:
        v.add(x.severity, x.line())
    return v


def summary_line(gpu: dict[str, Any]) -> str:
    """One line of readings for the step output."""
    def g(k: str, fmt: str = "{}") -> str:
        val = gpu.get(k)
        return "?" if val is None else fmt.format(val)
    mask = gpu.get("clocks_event_reasons.active")
    reasons = ", ".join(decode_event_reasons(mask)) if isinstance(mask, int) else "?"
    return (f"GPU {gpu.get('index')}: {g('pstate')} persistence {g('persistence_mode')}, "
            f"{g('temperature.gpu')} C, {g('power.draw', '{:.0f}')}/{g('power.limit', '{:.0f}')} W, "
            f"SM {g('clocks.sm')}/{g('clocks.max.sm')} MHz, util {g('utilization.gpu')} %, "
            f"clocks events {mask if mask is None else hex(mask)} ({reasons or 'none'}), "
            f"ECC unc {g('ecc.errors.uncorrected.volatile.total')} cor {g('ecc.errors.corrected.volatile.total')}, "
            f"remap pending {g('remapped_rows.pending')} failed {g('remapped_rows.failure')}, "
            f"PCIe gen {g('pcie.link.gen.current')}/{g('pcie.link.gen.max')} "
            f"x{g('pcie.link.width.current')}/x{g('pcie.link.width.max')}")
