"""Take a node out of its workload scheduler: Slurm drains it, Kubernetes cordons it and stops
only the pods that requested GPUs. Chosen by the host var `scheduler` (slurm|kubernetes|none).

Slurm: `scontrol update NodeName=NODE State=DRAIN Reason="eaglebot: ..."`, read back with
`sinfo -N -h -n NODE -o "%N %T %E"` (running jobs finish: the node is `draining`, then
`drained`). Kubernetes: `kubectl cordon NODE`, then each pod on the node that asked for
`nvidia.com/gpu` is deleted with a timeout (`kubectl drain` cannot select pods by the resources
they request; deletion honours each pod's grace period), read back from the node's
`spec.unschedulable` and the pods left. A node already drained (and, in Kubernetes, without GPU
pods) is `ok`, nothing done, and `made: false` says the drain is not eaglebot's (a person's: the
health watch never resumes it). A cordon eaglebot makes is annotated `eaglebot.io/drain-reason`
(Kubernetes keeps no reason) so node.resume can tell it from a person's. A host with no scheduler
is skipped. With `confirm: true` (the shipped `drain` playbook) the drain waits for an approval.

```yaml
- skill: node.drain
  with: {reason: "Xid 79 on GPU 3", timeout_s: 300}
```
Registers `scheduler`, `node`, `state`, `reason`, `pods` (the GPU pods stopped), `made` (this step
drained or cordoned the node).
"""
from __future__ import annotations

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.facts.host import cluster
from eaglebot.sdk import Approval, Plan, SkillContext, StepResult
from eaglebot.skills.lib.node import (NodeParams, cordon_reason, cordoned, gpu_pods, node_of, run_ok, scheduler_of,
                                      slurm_node, tool)

NAME = "node.drain"


class Params(NodeParams):
    reason: str = Field("GPU health", min_length=1, max_length=200,
                        description="why, recorded by the scheduler (prefixed `eaglebot: `)")
    timeout_s: float = Field(300.0, gt=0, le=3600, description="Kubernetes: how long each GPU pod may take to stop")


async def _slurm(ctx: SkillContext, node: str, reason: str) -> StepResult:
    before = await slurm_node(ctx, node)
    if before.draining:
        return StepResult.ok(f"{node} is already {before.state} in Slurm ({before.reason or 'no reason'})",
                             data={"scheduler": "slurm", "node": node, "state": before.state, "reason": before.reason,
                                   "made": False})
    cmd = cluster.scontrol_drain(node, reason, tool(ctx, "scontrol"))

    async def drain() -> StepResult:
        await run_ok(ctx, cmd)
        after = await slurm_node(ctx, node)
        if not after.draining:
            raise StepFailed(f"scontrol accepted the drain of {node} but sinfo still says {after.state}")
        return StepResult.changed(f"{node} {after.state} in Slurm: {after.reason}"
                                  + ("" if after.responding else " (slurmd is not responding)"),
                                  data={"scheduler": "slurm", "node": node, "state": after.state,
                                        "reason": after.reason, "responding": after.responding, "made": True})

    # With `confirm: true` (the shipped drain playbook) an approver decides; --yes on a terminal.
    return await ctx.carry_out(Plan([cmd], f"would drain {node} in Slurm ({before.state} now)", drain,
                                    approve=Approval(f"drain {node} in Slurm", [f"now {before.state}", f"reason: {reason}"])))


async def _kubernetes(ctx: SkillContext, node: str, reason: str, timeout_s: float) -> StepResult:
    was = await cordoned(ctx, node)
    pods = await gpu_pods(ctx, node)
    names = [f"{n}/{p}" for n, p in pods]
    data = {"scheduler": "kubernetes", "node": node, "state": "cordoned", "pods": names,
            "reason": reason if not was else await cordon_reason(ctx, node), "made": not was}
    if was and not pods:
        return StepResult.ok(f"{node} is already cordoned and runs no GPU pod", data=data)
    kubectl = tool(ctx, "kubectl")

    async def drain() -> StepResult:
        if not was:
            await run_ok(ctx, cluster.kubectl_command(kubectl, "annotate", "--overwrite", "node", node,
                                                      f"{cluster.DRAIN_ANNOTATION}={reason}"))
            await run_ok(ctx, cluster.kubectl_command(kubectl, "cordon", node))
        for ns, name in pods:
            await run_ok(ctx, cluster.kubectl_command(kubectl, "delete", "pod", "-n", ns, name,
                                                      f"--timeout={timeout_s:g}s"), timeout=timeout_s + 30)
        left = await gpu_pods(ctx, node)
        if not await cordoned(ctx, node) or left:
            raise StepFailed(f"{node}: still schedulable or GPU pods left ({', '.join(f'{n}/{p}' for n, p in left)})")
        return StepResult.changed(f"{node} cordoned; {len(pods)} GPU pod{'s' if len(pods) != 1 else ''} stopped"
                                  + (f": {', '.join(names)}" if pods else ""), data=data)

    return await ctx.carry_out(Plan(
        [f"kubectl cordon {node}; stop {len(pods)} GPU pod(s): {', '.join(names) or 'none'}"],
        f"would cordon {node} and stop {len(pods)} GPU pod(s)", drain,
        approve=Approval(f"cordon {node} and stop its GPU pods", names or ["no GPU pod"])))


async def run(ctx: SkillContext, params: Params) -> StepResult:
    sched, node = scheduler_of(ctx, params), node_of(ctx, params)
    if sched == "none":
        return StepResult.skipped(f"{ctx.host_name} is in no scheduler (host var scheduler: none); nothing to drain")
    reason = params.reason if params.reason.startswith("eaglebot") else f"eaglebot: {params.reason}"
    if sched == "slurm":
        return await _slurm(ctx, node, reason)
    return await _kubernetes(ctx, node, reason, params.timeout_s)
