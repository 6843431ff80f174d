"""Check the node's GPUs before trusting a benchmark: clocks events, ECC, row remaps, PCIe, NVLink, Xids.

From nvidia-smi alone (DCGM only where `dcgmi` is installed): per GPU persistence mode,
pstate, the clocks-event-reasons mask decoded (HW slowdown, HW thermal slowdown and HW
power brake fail; SW thermal slowdown warns; idle and a SW power cap under load are
normal), volatile ECC errors, pending/failed row remaps, temperature, power, SM clock vs
max, PCIe generation and width vs max; NVLink link state and Replay/Recovery/CRC
counters (`nvidia-smi nvlink -s` / `-e`); Xid lines of the kernel log when `dmesg` is
readable; `dcgmi diag -r dcgm_level -j` when dcgmi exists, read as JSON (src/eaglebot/facts/gpu/dcgm.py: zero
results, an unknown shape or a non-zero exit without a failed test is `warn`, never `ok`). A field an older driver does
not know (`Field "x" is not a valid field to query.`, exit 2) is dropped and the query
asked again with the rest.

Each GPU gets a verdict, ok / warn / fail, with its reasons. Any `fail` fails the step
(so a nightly bench does not record numbers from a sick node); `warn` is a warning.

```yaml
- skill: gpu.health
  with: {temp_warn_c: 85, temp_fail_c: 95, dcgm_level: 1, gpus: "0,1"}
```
Registers `health` ({"0": {"verdict": "ok", "reasons": []}, ...}), `gpus` (every
reading per GPU), `nvlink`, `nvlink_errors`, `xids`, `dcgm`, `dropped_fields`, `notes`.
"""
from __future__ import annotations

import shlex
from typing import Any, Literal

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import CommandResult, Plan, SkillContext, StepResult
from eaglebot.facts.gpu import health as hf
from eaglebot.facts.gpu import dcgm, nvsmi
from eaglebot.facts.gpu.health_probe import GpuHealthRead, read_gpu_health
from eaglebot.skills.lib import gpu
from eaglebot.skills.lib.health_report import Readings, health_report

NAME = "gpu.health"

Level = Literal["warn", "fail"]


class Params(gpu.GpuParams):
    temp_warn_c: int = Field(85, ge=0, le=150, description="warn at or above this GPU temperature (C)")
    temp_fail_c: int = Field(95, ge=0, le=150, description="fail at or above this GPU temperature (C)")
    corrected_ecc_warn: int = Field(1000, ge=1, description="warn at this many corrected volatile ECC errors")
    nvlink_errors_warn: int = Field(1, ge=1, description="warn at this many NVLink replay+recovery+CRC errors")
    nvlink_errors_fail: int = Field(1000, ge=1, description="fail at this many NVLink errors")
    pcie_width_below_max: Level = Field("fail", description="verdict when the PCIe link is narrower than its max")
    persistence_off: Level = Field("warn", description="verdict when persistence mode is off")
    kernel_log: bool = Field(True, description="read Xid lines from the kernel log (dmesg; host var `dmesg`)")
    dcgm_level: int = Field(1, ge=0, le=4, description="run `dcgmi diag -r LEVEL` when dcgmi exists (0: never)")
    dcgm_timeout_s: float = Field(300.0, gt=0, le=7200, description="time limit of dcgmi diag")
    fail_on_warn: bool = Field(False, description="fail the step on a warn verdict too")


def thresholds(p: Params) -> hf.Thresholds:
    return hf.Thresholds(temp_warn_c=p.temp_warn_c, temp_fail_c=p.temp_fail_c,
                         corrected_ecc_warn=p.corrected_ecc_warn, nvlink_errors_warn=p.nvlink_errors_warn,
                         nvlink_errors_fail=p.nvlink_errors_fail, pcie_width_below_max=p.pcie_width_below_max,
                         persistence_off=p.persistence_off)


async def read(ctx: SkillContext, params: Params) -> GpuHealthRead:
    """The health query, NVLink and (with `kernel_log`) the kernel log: the probe the watch makes too."""
    async def run(cmd: str) -> CommandResult:
        return await ctx.host.run(cmd, timeout=nvsmi.NVSMI_TIMEOUT_S)

    got = await read_gpu_health(run, ctx.host_name, ctx.vars, hf.HEALTH, nvlink=hf.NVLINK_STATUS,
                                nvlink_errors=hf.NVLINK_ERRORS, kernel_log=params.kernel_log)
    for bad in got.dropped:
        ctx.log(f"nvidia-smi on {ctx.host_name} does not know the field {bad}; asking without it")
    if got.failure:
        raise nvsmi.NvsmiError(got.failure)
    if None in got.rows.unreadable:
        raise nvsmi.NvsmiError(f"unexpected --query-gpu output from nvidia-smi on {ctx.host_name}: "
                               f"{got.rows.cannot_read()[None]}")
    if got.log_error:
        got.notes.append(f"kernel log not readable, Xids not checked: {got.log_error}")
    return got


async def _dcgm(ctx: SkillContext, params: Params) -> dict[str, Any]:
    if params.dcgm_level == 0:
        return {"status": "skipped", "why": "dcgm_level is 0"}
    dcgmi = str(ctx.vars.get("dcgmi") or "dcgmi")
    found = await ctx.host.run(f"command -v {shlex.quote(dcgmi)}", timeout=30)
    if found.exit_status != 0:
        return {"status": "skipped", "why": f"dcgmi is not installed on {ctx.host_name}"}
    ctx.log(f"dcgmi diag -r {params.dcgm_level} -j on {ctx.host_name}")
    res = await ctx.host.run(shlex.join([dcgmi, "diag", "-r", str(params.dcgm_level), "-j"]),
                             timeout=params.dcgm_timeout_s, on_output=lambda _s, line: ctx.log(line))
    if res.timed_out:
        return {"status": "warn", "why": f"dcgmi diag -r {params.dcgm_level} did not finish in "
                                         f"{params.dcgm_timeout_s:g}s", "tests": {}}
    return dcgm.parse_diag_json(res.stdout, -1 if res.exit_status is None else res.exit_status,
                                params.dcgm_level).as_dict()


async def run(ctx: SkillContext, params: Params) -> StepResult:
    return await ctx.carry_out(Plan(
        ["query nvidia-smi health fields, NVLink, the kernel log's Xids"
         + (f" and dcgmi diag -r {params.dcgm_level}" if params.dcgm_level else "")],
        "would check GPU health", lambda: _check(ctx, params)))


async def _check(ctx: SkillContext, params: Params) -> StepResult:
    got = await read(ctx, params)
    rows = got.rows.rows
    sel = gpu.select(ctx, params, sorted(rows))
    notes = list(got.notes)
    if got.dropped:
        notes.insert(0, f"this driver does not know {', '.join(got.dropped)}; checked without")
    dcgm = await _dcgm(ctx, params)
    if dcgm["status"] == "skipped":
        notes.append(f"DCGM diagnostics skipped: {dcgm['why']}")
    xids = got.log.xids if got.log is not None else []
    readings = Readings(rows, sel, got.nvlink, got.nvlink_errors, xids, dcgm, got.dropped, notes,
                        {i: why for i, why in got.rows.cannot_read().items() if i is not None})
    report = health_report(ctx.host_name, readings,
                           thresholds(params), fail_on_warn=params.fail_on_warn)
    for line in report.output.splitlines():
        ctx.log(line)
    if report.failed:
        raise StepFailed(report.summary, data=report.data, warnings=report.warnings, output=report.output)
    return StepResult.ok(report.summary, data=report.data, warnings=report.warnings, output=report.output)
