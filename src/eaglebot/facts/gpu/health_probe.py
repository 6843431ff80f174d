"""One read of a host's GPU health, the commands and their parsing in one place: the gpu.health
skill and the fleet health watch both gather through `read_gpu_health`.

The health query (a field this driver does not know is dropped and the query asked again),
`nvidia-smi nvlink -s` (and `-e` where asked), and the kernel log's Xid lines with the host's boot
id and uptime. Nothing here raises on what a host prints: a query that fails is `failure` (one
sentence), a GPU whose readings cannot be read is in `rows.unreadable`, a kernel log that cannot be
read is `log_error`. The caller's `run` sets the time limits (and may raise when one passes).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, TypeVar

from eaglebot.facts.fact import Fact
from eaglebot.facts.gpu import health as hf
from eaglebot.facts.gpu import nvsmi
from eaglebot.facts.gpu import xid as xf
from eaglebot.sdk import CommandResult

Run = Callable[[str], Awaitable[CommandResult]]
T = TypeVar("T")


@dataclass
class GpuHealthRead:
    """What one read found; `failure` is set when nvidia-smi did not answer the health query."""
    rows: hf.HealthRows = field(default_factory=hf.HealthRows)
    failure: str | None = None
    exit_status: int | None = 0
    dropped: list[str] = field(default_factory=list)
    nvlink: dict[int, dict[int, float | None]] = field(default_factory=dict)
    nvlink_errors: dict[int, dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    log: xf.KernelLog | None = None        # None: not asked, or not readable (log_error says why)
    log_error: str | None = None
    log_at: float | None = None            # the wall clock (epoch s) when the log's uptime was read, about

    def bus_ids(self) -> dict[int, str]:
        return {i: str(r.get("pci.bus_id") or "") for i, r in self.rows.rows.items()}


def _fields(fact: hf.HealthFact) -> list[str]:
    return fact.args[0].removeprefix("--query-gpu=").split(",")


async def _optional(run: Run, fact: Fact[T], host_vars: Mapping[str, Any], what: str, notes: list[str]) -> T | None:
    """A fact the host may not have (no NVLink, an older driver): its absence is a note."""
    res = await run(fact.command(host_vars))
    if res.exit_status != 0 or res.timed_out:
        last = (res.stdout.strip() or res.stderr.strip()).splitlines()[-1:] or ["no output"]
        notes.append(f"{what} not reported: {xf.clip(last[0], 160)}")
        return None
    return fact.parse(res.stdout)


async def read_gpu_health(run: Run, host: str, host_vars: Mapping[str, Any], query: hf.HealthFact, *,
                          nvlink: nvsmi.NvsmiFact[dict[int, dict[int, float | None]]] | None,
                          nvlink_errors: nvsmi.NvsmiFact[dict[int, dict[str, int]]] | None = None,
                          kernel_log: bool = True) -> GpuHealthRead:
    """The health `query` (hf.HEALTH, or the watch's), the NVLink facts given and the kernel log
    of one host, through `run`."""
    out = GpuHealthRead()
    res, fact, out.dropped = await hf.ask_health(run, host_vars, query)
    out.exit_status = res.exit_status
    if res.timed_out:
        out.failure = f"nvidia-smi did not answer in time on {host}; the driver may be hung"
    elif res.exit_status != 0:
        out.failure = nvsmi.explain_exit(host, nvsmi.nvsmi_path(host_vars), res.exit_status, res.stdout, res.stderr)
    else:
        out.rows = hf.read_health(res.stdout, _fields(fact))
    if out.rows.rows and nvlink is not None:
        out.nvlink = await _optional(run, nvlink, host_vars, "NVLink status", out.notes) or {}
    if out.rows.rows and nvlink_errors is not None:
        out.nvlink_errors = await _optional(run, nvlink_errors, host_vars, "NVLink errors", out.notes) or {}
    # The kernel log even when nvidia-smi failed: its Xids say why (79: the GPU fell off the bus).
    if kernel_log:
        dmesg = str(host_vars.get("dmesg") or "dmesg")
        klog = await run(xf.kernel_log_command(dmesg))
        out.log_at = time.time()      # the uptime is the command's last read: off by the way back only
        if klog.exit_status == 0 and not klog.timed_out:
            out.log = xf.parse_kernel_log(klog.stdout)
        elif klog.timed_out:
            out.log_error = "dmesg: no answer in time"
        else:
            out.log_error = xf.unreadable_log(dmesg, klog.stdout + klog.stderr, klog.exit_status)
    return out
