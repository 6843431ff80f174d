"""List the processes that hold GPU memory: pid, user, command line, GPU, MiB.

Joins `nvidia-smi --query-compute-apps` with the host's /proc. When a GPU's memory is
held but nvidia-smi names no visible process (a container with its own PID
namespace), it asks `fuser -v /dev/nvidia*` and says so; memory nobody explains is
reported as a warning. Read-only: the status is `ok`.

```yaml
- skill: gpu.processes
  register: gpu
  with: {gpus: "0,1", expected_gpus: 8}
```
Registers `processes` (pid, user, gpus, mib, command, source), `pids`, `memory` (MiB per
GPU), `unexplained` (MiB per GPU that no process explains) and `via_fuser`.
"""
from __future__ import annotations

from pydantic import Field

from eaglebot.sdk import SkillContext, StepResult
from eaglebot.skills.lib import gpu

NAME = "gpu.processes"


class Params(gpu.GpuParams):
    tolerance_mib: int = Field(gpu.DEFAULT_TOLERANCE_MIB, ge=0,
                               description="memory up to this many MiB with no process is residual, not a holder")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    snap = await gpu.snapshot(ctx, params, tolerance_mib=params.tolerance_mib)
    data = {
        "processes": [h.as_dict() for h in snap.holders],
        "pids": [h.pid for h in snap.holders],
        "memory": dict(snap.used),
        "unexplained": dict(snap.unexplained),
        "via_fuser": snap.via_fuser,
    }
    for note in snap.notes:
        ctx.log(note)
    out = f"{gpu.memory_line(snap.used)}\n"
    if snap.holders:
        out += gpu.table(snap.holders) + "\n"
    out += "".join(n + "\n" for n in snap.notes)
    if not snap.holders:
        summary = "no GPU processes"
        if snap.unexplained:
            summary += f"; {gpu.memory_line(snap.unexplained)} used with no process to explain it"
        return StepResult.ok(summary, data=data, output=out, warnings=[n for n in snap.notes])
    n = len(snap.holders)
    first = "; ".join(h.line() for h in snap.holders[:3])
    more = f"; and {n - 3} more" if n > 3 else ""
    via = " (found by fuser)" if snap.via_fuser and any(h.source == "fuser" for h in snap.holders) else ""
    return StepResult.ok(f"{n} GPU process{'es' if n != 1 else ''}{via}: {first}{more}", data=data, output=out,
                         warnings=[n for n in snap.notes if "neither" in n or "not visible" in n])
