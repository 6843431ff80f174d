"""Put a drained node back into its workload scheduler: Slurm `State=RESUME`, Kubernetes
`kubectl uncordon`, chosen by the host var `scheduler` (slurm|kubernetes|none), each read back
(`sinfo -N -h -n NODE -o "%N %T %E"`; the node's `spec.unschedulable`). A node that is not
drained or cordoned is `ok`, nothing done (Slurm refuses to resume a node that is not drained).

```yaml
- skill: node.resume
```
Registers `scheduler`, `node`, `state`.
"""
from __future__ import annotations

from eaglebot.errors import StepFailed
from eaglebot.facts import cluster
from eaglebot.sdk import SkillContext, StepResult
from eaglebot.skills.lib.node import NodeParams, cordoned, node_of, run_ok, scheduler_of, slurm_node, tool

NAME = "node.resume"


class Params(NodeParams):
    pass


async def _slurm(ctx: SkillContext, node: str) -> StepResult:
    before = await slurm_node(ctx, node)
    if not before.draining:
        return StepResult.ok(f"{node} is {before.state} in Slurm, not drained; nothing to resume",
                             data={"scheduler": "slurm", "node": node, "state": before.state})
    cmd = cluster.scontrol_resume(node, tool(ctx, "scontrol"))
    if ctx.dry_run:
        ctx.would(cmd)
        return StepResult.skipped(f"dry-run: would resume {node} in Slurm ({before.state} now)")
    await run_ok(ctx, cmd)
    after = await slurm_node(ctx, node)
    if after.draining:
        raise StepFailed(f"scontrol accepted the resume of {node} but sinfo still says {after.state}")
    return StepResult.changed(f"{node} resumed in Slurm ({after.state})",
                              data={"scheduler": "slurm", "node": node, "state": after.state})


async def _kubernetes(ctx: SkillContext, node: str) -> StepResult:
    if not await cordoned(ctx, node):
        return StepResult.ok(f"{node} is schedulable; nothing to uncordon",
                             data={"scheduler": "kubernetes", "node": node, "state": "schedulable"})
    cmd = cluster.kubectl_command(tool(ctx, "kubectl"), "uncordon", node)
    if ctx.dry_run:
        ctx.would(cmd)
        return StepResult.skipped(f"dry-run: would uncordon {node}")
    await run_ok(ctx, cmd)
    if await cordoned(ctx, node):
        raise StepFailed(f"kubectl uncordon {node} answered but the node is still unschedulable")
    return StepResult.changed(f"{node} uncordoned", data={"scheduler": "kubernetes", "node": node,
                                                          "state": "schedulable"})


async def run(ctx: SkillContext, params: Params) -> StepResult:
    sched, node = scheduler_of(ctx, params), node_of(ctx, params)
    if sched == "none":
        return StepResult.skipped(f"{ctx.host_name} is in no scheduler (host var scheduler: none); nothing to resume")
    if sched == "slurm":
        return await _slurm(ctx, node)
    return await _kubernetes(ctx, node)
