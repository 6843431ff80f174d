"""Check the node's GPUs before trusting a benchmark: clocks events, ECC, row remaps, PCIe, NVLink, Xids.

From nvidia-smi alone (DCGM only where `dcgmi` is installed): per GPU persistence mode,
pstate, the clocks-event-reasons mask decoded (HW slowdown, HW thermal slowdown and HW
power brake fail; SW thermal slowdown warns; idle and a SW power cap under load are
normal), volatile ECC errors, pending/failed row remaps, temperature, power, SM clock vs
max, PCIe generation and width vs max; NVLink link state and Replay/Recovery/CRC
counters (`nvidia-smi nvlink -s` / `-e`); Xid lines of the kernel log when `dmesg` is
readable; `dcgmi diag -r dcgm_level -j` when dcgmi exists, read as JSON (bot/facts/dcgm.py: zero
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
from typing import Any, Literal, TypeVar

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import CommandResult, SkillContext, StepResult
from eaglebot.facts import health as hf
from eaglebot.facts import dcgm, nvsmi
from eaglebot.facts.fact import Fact
from eaglebot.skills.lib import gpu
from eaglebot.skills.lib.health_report import Readings, health_report

NAME = "gpu.health"

T = TypeVar("T")

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


async def query_health(ctx: SkillContext) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """The health rows and the fields this driver did not know (dropped, never a crash)."""
    path = nvsmi.nvsmi_path(ctx.vars)

    async def run(cmd: str) -> CommandResult:
        res = await ctx.host.run(cmd, timeout=nvsmi.NVSMI_TIMEOUT_S)
        if res.timed_out:
            raise nvsmi.NvsmiError(f"nvidia-smi did not answer within {nvsmi.NVSMI_TIMEOUT_S:g}s on "
                                   f"{ctx.host_name}; the driver may be hung")
        return res

    res, fact, dropped = await hf.ask_health(run, ctx.vars, hf.HEALTH)
    for bad in dropped:
        ctx.log(f"nvidia-smi on {ctx.host_name} does not know the field {bad}; asking without it")
    if res.exit_status != 0:
        raise nvsmi.NvsmiError(nvsmi.explain_exit(ctx.host_name, path, res.exit_status, res.stdout, res.stderr))
    return nvsmi.parsed(fact.what, ctx.host_name, fact.parse, res.stdout), dropped


async def _nvlink(ctx: SkillContext, notes: list[str]) -> tuple[dict[int, dict[int, float | None]],
                                                                 dict[int, dict[str, int]]]:
    status = await _unless_absent(ctx, hf.NVLINK_STATUS, "NVLink status", notes)
    errors = await _unless_absent(ctx, hf.NVLINK_ERRORS, "NVLink errors", notes)
    return status or {}, errors or {}


async def _unless_absent(ctx: SkillContext, fact: Fact[T], what: str, notes: list[str]) -> T | None:
    """A fact the host may not have (no NVLink, an older driver): its absence is a note, not a failure."""
    res = await ctx.host.run(fact.command(ctx.vars), timeout=nvsmi.NVSMI_TIMEOUT_S)
    if res.exit_status != 0 or res.timed_out:
        last = (res.stdout.strip() or res.stderr.strip()).splitlines()[-1:] or ["no output"]
        notes.append(f"{what} not reported: {last[0][:160]}")
        return None
    return fact.parse(res.stdout)


async def _xids(ctx: SkillContext, notes: list[str]) -> list[hf.Xid]:
    res = await ctx.host.run(hf.kernel_log_command(str(ctx.vars.get("dmesg") or "dmesg")), timeout=30)
    if res.exit_status != 0 or res.timed_out:
        why = res.stdout.strip().splitlines()[-1:] or [f"exit status {res.exit_status}"]
        notes.append(f"kernel log not readable, Xids not checked: {why[0][:160]}")
        return []
    return hf.parse_xids(res.stdout)


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
    if ctx.dry_run:
        ctx.would("query nvidia-smi health fields, NVLink, the kernel log's Xids"
                  + (f" and dcgmi diag -r {params.dcgm_level}" if params.dcgm_level else ""))
        return StepResult.skipped("dry-run: would check GPU health")
    rows, dropped = await query_health(ctx)
    sel = gpu.select(ctx, params, sorted(rows))
    notes: list[str] = []
    if dropped:
        notes.append(f"this driver does not know {', '.join(dropped)}; checked without")
    links, link_errors = await _nvlink(ctx, notes)
    xids = await _xids(ctx, notes) if params.kernel_log else []
    dcgm = await _dcgm(ctx, params)
    if dcgm["status"] == "skipped":
        notes.append(f"DCGM diagnostics skipped: {dcgm['why']}")
    report = health_report(ctx.host_name, Readings(rows, sel, links, link_errors, xids, dcgm, dropped, notes),
                           thresholds(params), fail_on_warn=params.fail_on_warn)
    for line in report.output.splitlines():
        ctx.log(line)
    if report.failed:
        raise StepFailed(report.summary, data=report.data, warnings=report.warnings, output=report.output)
    return StepResult.ok(report.summary, data=report.data, warnings=report.warnings, output=report.output)
