"""What node.drain and node.resume share: which scheduler a host is in (host var `scheduler`:
slurm, kubernetes or none), its node name there (host var `node_name`, else the host's name),
the tools (host vars `scontrol`, `sinfo`, `kubectl`, else on PATH) and the read-backs, including
the reason eaglebot wrote (Slurm's drain reason; in Kubernetes an annotation on the node)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.facts.host import cluster
from eaglebot.sdk import CommandResult, SkillContext, SkillParams

Scheduler = Literal["slurm", "kubernetes", "none"]


class NodeParams(SkillParams):
    scheduler: Scheduler | None = Field(None, description="slurm, kubernetes or none (default: host var "
                                                          "`scheduler`, else none)")
    node: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$",
                             description="the node's name in the scheduler (default: host var `node_name`, "
                                         "else the host's name)")


def scheduler_of(ctx: SkillContext, p: NodeParams) -> str:
    s = p.scheduler or str(ctx.vars.get("scheduler") or "none")
    if s not in ("slurm", "kubernetes", "none"):
        raise StepFailed(f"host var scheduler is {s!r}; it must be slurm, kubernetes or none")
    return s


def node_of(ctx: SkillContext, p: NodeParams) -> str:
    return p.node or str(ctx.vars.get("node_name") or ctx.host_name)


def tool(ctx: SkillContext, name: str) -> str:
    return str(ctx.vars.get(name) or name)


async def run_ok(ctx: SkillContext, cmd: str, timeout: float = 60.0) -> CommandResult:
    """Run a scheduler command; its error (the last line it printed) is the step's failure."""
    ctx.log(f"$ {cmd}")
    res = await ctx.host.run(cmd, timeout=timeout)
    if res.timed_out or res.exit_status != 0:
        last = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or ["no output"]
        why = f"did not finish within {timeout:g}s" if res.timed_out else f"exit {res.exit_status}: {last[0][:300]}"
        raise StepFailed(f"{cmd.split()[0].rsplit('/', 1)[-1]} on {ctx.host_name} failed ({why})")
    return res


async def slurm_node(ctx: SkillContext, node: str) -> cluster.SlurmNode:
    res = await run_ok(ctx, cluster.sinfo_command(node, tool(ctx, "sinfo")))
    found = cluster.parse_sinfo(res.stdout, node)
    if found is None:
        raise StepFailed(f"Slurm does not know the node {node!r} (sinfo -n {node} lists nothing); "
                         f"set the host var node_name")
    return found


async def cordoned(ctx: SkillContext, node: str) -> bool:
    res = await run_ok(ctx, cluster.kubectl_command(tool(ctx, "kubectl"), "get", "node", node, "-o",
                                                    "jsonpath={.spec.unschedulable}"))
    return cluster.parse_unschedulable(res.stdout)


async def gpu_pods(ctx: SkillContext, node: str) -> list[tuple[str, str]]:
    res = await run_ok(ctx, cluster.kubectl_command(tool(ctx, "kubectl"), "get", "pods", "-A", "--field-selector",
                                                    f"spec.nodeName={node}", "-o", "json"))
    try:
        return cluster.gpu_pods(res.stdout)
    except cluster.ClusterParseError as e:
        raise StepFailed(f"kubectl get pods on {ctx.host_name}: {e}") from None


async def cordon_reason(ctx: SkillContext, node: str) -> str | None:
    """The drain reason eaglebot annotated the node with when it cordoned it, or None."""
    res = await run_ok(ctx, cluster.kubectl_command(tool(ctx, "kubectl"), "get", "node", node, "-o",
                                                    cluster.DRAIN_ANNOTATION_PATH))
    return cluster.parse_annotation(res.stdout)
