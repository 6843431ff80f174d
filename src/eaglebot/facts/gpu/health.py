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

from eaglebot.facts.gpu.nvsmi import NvsmiFact, ParseError, split_csv, strip_unit
from eaglebot.facts.gpu.xid import XID_MEANINGS, Xid, kernel_log_command, parse_xids, xid_gpu, xids_since
from eaglebot.sdk import CommandResult

__all__ = ["XID_MEANINGS", "Xid", "kernel_log_command", "parse_xids", "xid_gpu", "xids_since"]   # their home: facts/gpu/xid.py

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

# What nvidia-smi prints where a field has no value on this GPU or driver: not a finding.
NOT_A_VALUE = frozenset({"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Insufficient Permissions]",
                         "[Requested functionality has been deprecated]", ""})
# What it prints where the driver could not read the GPU (a GSP that stopped answering, a GPU
# that needs a reset): never a healthy reading. Any other bracketed word is read the same way.
READ_ERRORS = frozenset({"ERR!", "[ERR!]", "[Unknown Error]", "Unknown Error", "[GPU requires reset]",
                         "[GPU is lost]"})
_MAX_DIGITS = 24


class Unreadable(ParseError):
    """A value the driver could not read (ERR!, [Unknown Error]): the GPU cannot be trusted."""


def _na(v: str) -> bool:
    s = v.strip()
    if s in READ_ERRORS or (s.startswith("[") and s not in NOT_A_VALUE):
        raise Unreadable(f"reads {clip(s)!r}")
    return s in NOT_A_VALUE


def _number(v: str) -> str:
    s = strip_unit(v)
    if len(s) > _MAX_DIGITS:
        raise ParseError(f"not a number: {clip(v)!r}")
    return s


def _int(v: str) -> int | None:
    if _na(v):
        return None
    s = _number(v)
    try:
        return int(s, 16) if s.lower().startswith("0x") else int(float(s))
    except (ValueError, OverflowError):
        raise ParseError(f"not a number: {clip(v)!r}") from None


def _float(v: str) -> float | None:
    if _na(v):
        return None
    try:
        return float(_number(v))
    except ValueError:
        raise ParseError(f"not a number: {clip(v)!r}") from None


def _yes(v: str) -> bool | None:
    if _na(v):
        return None
    if v.strip() in ("Yes", "No"):
        return v.strip() == "Yes"
    raise ParseError(f"expected Yes or No, got {clip(v)!r}")


def _text(v: str) -> str | None:
    return None if _na(v) else v.strip()


def clip(s: str, limit: int = 80) -> str:
    return s if len(s) <= limit else s[: limit - 1] + "…"


_CONVERT: dict[str, Callable[[str], Any]] = {
    "index": _int, "uuid": _text, "pci.bus_id": _text, "persistence_mode": _text,
    "pstate": _text, "clocks_event_reasons.active": _int, "clocks_throttle_reasons.active": _int,
    "ecc.errors.uncorrected.volatile.total": _int, "ecc.errors.corrected.volatile.total": _int,
    "retired_pages.pending": _yes, "remapped_rows.pending": _yes, "remapped_rows.failure": _yes,
    "temperature.gpu": _int, "temperature.memory": _int, "power.draw": _float, "power.limit": _float,
    "clocks.sm": _int, "clocks.current.sm": _int, "clocks.max.sm": _int, "pcie.link.gen.current": _int,
    "pcie.link.gen.max": _int, "pcie.link.width.current": _int, "pcie.link.width.max": _int,
    "utilization.gpu": _int, "gpu_recovery_action": _text,
}
# Header names nvidia-smi prints for a field asked under another name.
_ALIASES = {"clocks_throttle_reasons.active": "clocks_event_reasons.active", "clocks.current.sm": "clocks.sm"}
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]$")


@dataclass
class HealthRows:
    """The health query read totally: each GPU's readings, and why a GPU (None: a row whose
    GPU cannot be told) could not be read, field by field."""
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    unreadable: dict[int | None, list[tuple[str, str]]] = field(default_factory=dict)   # (field or "", why)

    def cannot_read(self) -> dict[int | None, str]:
        """`cannot read GPU N: temperature.gpu reads 'ERR!'` per GPU (None: rows that name no GPU);
        fields that read the same are named together."""
        out = {}
        for i, problems in self.unreadable.items():
            by: dict[str, list[str]] = {}
            for name, why in problems:
                by.setdefault(why, []).append(name)
            parts = []
            for why, names in by.items():
                named = [n for n in names if n]
                if not named:
                    parts.append(why)
                elif len(named) == 1:
                    parts.append(f"{named[0]} {why}")
                else:
                    more = f" and {len(named) - 3} more" if len(named) > 3 else ""
                    parts.append(f"{', '.join(named[:3])}{more} {why.replace('reads ', 'read ', 1)}")
            out[i] = (f"cannot read GPU {i}: " if i is not None else "cannot read a GPU: ") + "; ".join(parts)
        return out


def read_health(text: str, fields: Sequence[str] | None = None) -> HealthRows:
    """Health rows -> readings by GPU index, with or without header and units; never raises.

    Values are typed (ints, floats, booleans for Yes/No, the mask as an int); `[N/A]` and
    `[Not Supported]` are None. `ERR!`, `[Unknown Error]` or a value that is not what its field
    holds make the GPU unreadable (the field named), and so does a row of the wrong width.
    With a header (`--format=csv`) the columns come from it (`clocks.current.sm [MHz]` is
    `clocks.sm`); without one, `fields` names them in the order asked.
    """
    out = HealthRows()
    rows = split_csv(text)
    if not rows:
        return out
    if rows[0] and _HEADER_UNIT.sub("", rows[0][0]) == "index":
        fields = [_HEADER_UNIT.sub("", c) for c in rows[0]]
        rows = rows[1:]
    names = [_ALIASES.get(f, f) for f in fields or []]
    if "index" not in names:
        out.unreadable[None] = [("", "the answer names no GPU index")]
        return out
    at = names.index("index")
    for n, r in enumerate(rows, 1):
        try:
            idx = _int(r[at]) if at < len(r) else None
        except ParseError:
            idx = None
        if idx is None:
            out.unreadable.setdefault(None, []).append(("", f"row {n}: no GPU index ({clip(', '.join(r))!r})"))
            continue
        if len(r) != len(names):
            out.rows[idx] = {"index": idx}
            out.unreadable.setdefault(idx, []).append(("", f"expected {len(names)} columns, got {len(r)}"))
            continue
        rec: dict[str, Any] = {}
        for name, v in zip(names, r):
            conv = _CONVERT.get(name)
            if name in rec and rec[name] is not None:    # a deprecated alias repeats a column
                continue
            try:
                rec[name] = conv(v) if conv is not None else (None if _na(v) else strip_unit(v))
            except ParseError as e:
                rec[name] = None
                out.unreadable.setdefault(idx, []).append((name, str(e)))
        out.rows[idx] = rec
    return out


def parse_health(text: str, fields: list[str] | None = None) -> dict[int, dict[str, Any]]:
    """read_health, strict: ParseError naming the first thing it could not read."""
    got = read_health(text, fields)
    if got.unreadable:
        raise ParseError(next(iter(got.cannot_read().values())))
    return got.rows


# -- nvidia-smi nvlink -s / -e -----------------------------------------------------------------

# Bounded digits: a line no GPU could print is skipped, never an exception (the parsers are total).
_GPU_LINE = re.compile(r"^GPU (\d{1,4}): ")
_LINK_SPEED = re.compile(r"^\s*Link (\d{1,4}): (.+?)\s*$")
_LINK_ERR = re.compile(r"^\s*Link (\d{1,4}): (Replay|Recovery|CRC) Errors: (\d{1,20})\s*$")


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
            num = re.match(r"^(\d{1,9}(?:\.\d{1,9})?) GB/s$", speed)
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


# -- the verdict -------------------------------------------------------------------------------

# Readings that act at once, without a second probe: the same facts as Xid 48 (a double-bit
# error counted), 64 (a row the GPU could not remap) and the driver's own verdict (it asks for a
# reset, a reboot or a drain). Every other reading needs a second probe to agree.
AT_ONCE_KINDS = frozenset({"ecc_uncorrected", "remap_failure", "recovery_action"})

@dataclass
class Thresholds:
    temp_warn_c: int = 85
    temp_fail_c: int = 95
    corrected_ecc_warn: int = 1000
    nvlink_errors_warn: int = 1
    nvlink_errors_fail: int = 1000
    pcie_width_below_max: str = "fail"      # "fail" or "warn": x8 of x16 halves host<->GPU bandwidth
    persistence_off: str = "warn"
    remap_pending: str = "warn"             # the watch says "fail": the row is remapped only by a GPU reset


@dataclass
class Verdict:
    verdict: str = "ok"
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # normal readings worth a line (idle clocks)
    items: list[tuple[str, str, str]] = field(default_factory=list)   # (level, reason, kind) of each reason

    def add(self, level: str, reason: str, kind: str = "") -> None:
        self.reasons.append(reason)
        self.items.append((level, reason, kind))
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
        v.add("fail", f"{unc} uncorrected ECC error{'s' if unc != 1 else ''}", "ecc_uncorrected")
    cor = gpu.get("ecc.errors.corrected.volatile.total")
    if isinstance(cor, int) and cor >= t.corrected_ecc_warn:
        v.add("warn", f"{cor} corrected ECC errors (>= {t.corrected_ecc_warn})")
    if gpu.get("remapped_rows.failure") is True:
        v.add("fail", "row remapping failed", "remap_failure")
    if gpu.get("remapped_rows.pending") is True:
        v.add(t.remap_pending, "row remap pending (reset the GPU)", "remap_pending")
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
        v.add("fail", f"{RECOVERY_PREFIX}{rec}", "recovery_action")
    for x in xids or []:
        v.add(x.severity, x.line(), f"xid:{x.code}")
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
