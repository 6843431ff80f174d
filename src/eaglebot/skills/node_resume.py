"""Put a drained node back into its workload scheduler: Slurm `State=RESUME`, Kubernetes
`kubectl uncordon`, chosen by the host var `scheduler` (slurm|kubernetes|none), each read back
(`sinfo -N -h -n NODE -o "%N %T %E"`; the node's `spec.unschedulable`). A node that is not
drained or cordoned is `ok`, nothing done (Slurm refuses to resume a node that is not drained).
With `only_if_reason` (what the health watch passes for a drain it made) the node is resumed only
while its drain still carries that reason (Slurm's reason; in Kubernetes the node's
`eaglebot.io/drain-reason` annotation): a drain a person made or took over is left as it is,
`ok` with `left: true`, and the summary says whose it is.

```yaml
- skill: node.resume
  with: {only_if_reason: "eaglebot: Xid 79 (GPU has fallen off the bus)"}
```
Registers `scheduler`, `node`, `state`, `left`.
"""
from __future__ import annotations

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.facts.host import cluster
from eaglebot.sdk import Plan, SkillContext, StepResult
from eaglebot.skills.lib.node import NodeParams, cordon_reason, cordoned, node_of, run_ok, scheduler_of, slurm_node, tool

NAME = "node.resume"


class Params(NodeParams):
    only_if_reason: str | None = Field(None, max_length=300,
                                       description="resume only while the drain carries this reason (the one "
                                                   "eaglebot wrote); anyone else's drain is left")


def _left(sched: str, node: str, state: str, reason: str | None) -> StepResult:
    return StepResult.ok(f"left {node} {state} in {sched}: its drain is not eaglebot's "
                         f"(reason {reason or 'none'!r}); resume it there, or run resume without only_if_reason",
                         data={"scheduler": sched.lower(), "node": node, "state": state, "left": True,
                               "reason": reason})


async def _slurm(ctx: SkillContext, node: str, only_if: str | None) -> StepResult:
    before = await slurm_node(ctx, node)
    if not before.draining:
        return StepResult.ok(f"{node} is {before.state} in Slurm, not drained; nothing to resume",
                             data={"scheduler": "slurm", "node": node, "state": before.state})
    if only_if is not None and before.reason != only_if:
        return _left("Slurm", node, before.state, before.reason)
    cmd = cluster.scontrol_resume(node, tool(ctx, "scontrol"))

    async def resume() -> StepResult:
        await run_ok(ctx, cmd)
        after = await slurm_node(ctx, node)
        if after.draining:
            raise StepFailed(f"scontrol accepted the resume of {node} but sinfo still says {after.state}")
        return StepResult.changed(f"{node} resumed in Slurm ({after.state})",
                                  data={"scheduler": "slurm", "node": node, "state": after.state})

    return await ctx.carry_out(Plan([cmd], f"would resume {node} in Slurm ({before.state} now)", resume))


async def _kubernetes(ctx: SkillContext, node: str, only_if: str | None) -> StepResult:
    if not await cordoned(ctx, node):
        return StepResult.ok(f"{node} is schedulable; nothing to uncordon",
                             data={"scheduler": "kubernetes", "node": node, "state": "schedulable"})
    ours = await cordon_reason(ctx, node)
    if only_if is not None and ours != only_if:
        return _left("Kubernetes", node, "cordoned", ours)
    kubectl = tool(ctx, "kubectl")
    cmd = cluster.kubectl_command(kubectl, "uncordon", node)

    async def resume() -> StepResult:
        if ours is not None:   # first: should the uncordon fail, the cordon reads as a person's (left alone)
            await run_ok(ctx, cluster.kubectl_command(kubectl, "annotate", "node", node,
                                                      f"{cluster.DRAIN_ANNOTATION}-"))
        await run_ok(ctx, cmd)
        if await cordoned(ctx, node):
            raise StepFailed(f"kubectl uncordon {node} answered but the node is still unschedulable")
        return StepResult.changed(f"{node} uncordoned", data={"scheduler": "kubernetes", "node": node,
                                                              "state": "schedulable"})

    return await ctx.carry_out(Plan([cmd], f"would uncordon {node}", resume))


async def run(ctx: SkillContext, params: Params) -> StepResult:
    sched, node = scheduler_of(ctx, params), node_of(ctx, params)
    if sched == "none":
        return StepResult.skipped(f"{ctx.host_name} is in no scheduler (host var scheduler: none); nothing to resume")
    if sched == "slurm":
        return await _slurm(ctx, node, params.only_if_reason)
    return await _kubernetes(ctx, node, params.only_if_reason)
