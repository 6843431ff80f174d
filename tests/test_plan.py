"""Dry-run from a plan: a mutating skill probes, builds a `Plan`, and `SkillContext.carry_out`
previews it (a dry-run: only the probes run, the actions are logged, the step is skipped) or
applies it, after its approval where it needs one. Driven through `eaglebot.testing.Host`
with the real `sinfo` capture, so what ran on the host is exactly `host.commands`."""
from __future__ import annotations

from pathlib import Path

from eaglebot import testing
from eaglebot.facts import cluster
from eaglebot.sdk import Plan, StepResult
from eaglebot.skills import node_drain, node_resume, shell

SINFO = (Path(__file__).parent / "fixtures" / "cluster" / "sinfo-N-h-o-NTE.txt").read_text()
IDLE = "".join(line for line in SINFO.splitlines(keepends=True) if line.startswith("gpu-01 "))
DRAINING = IDLE.replace("idle none", "draining eaglebot: GPU health")
SLURM = {"scheduler": "slurm"}


def slurm_host() -> testing.Host:
    host = testing.Host("gpu-01")
    host.on(cluster.sinfo_command("gpu-01"), testing.Reply(stdout=IDLE), testing.Reply(stdout=DRAINING))
    host.on(cluster.scontrol_drain("gpu-01", "eaglebot: GPU health"), stdout="")
    return host


async def test_a_dry_run_drain_runs_only_the_probe_and_logs_the_command_it_would_run():
    host, log = slurm_host(), []
    res = await testing.run_skill(node_drain, host, {}, vars=SLURM, dry_run=True, log=log)
    assert res.status == "skipped" and res.summary == "dry-run: would drain gpu-01 in Slurm (idle now)"
    assert host.commands == [cluster.sinfo_command("gpu-01")]
    assert log[-1] == f"[dry-run] would {cluster.scontrol_drain('gpu-01', 'eaglebot: GPU health')}"


async def test_the_same_plan_applied_drains_and_reads_the_drain_back():
    host = slurm_host()
    res = await testing.run_skill(node_drain, host, {}, vars=SLURM)
    assert res.status == "changed" and res.data["made"] is True
    assert host.commands == [cluster.sinfo_command("gpu-01"), cluster.scontrol_drain("gpu-01", "eaglebot: GPU health"),
                             cluster.sinfo_command("gpu-01")]


async def test_a_refused_approval_fails_the_step_before_anything_changes():
    host = slurm_host()
    res = await testing.run_skill(node_drain, host, {}, vars=SLURM, confirm=True, approve=lambda req: (False, "ubob said no"))
    assert res.status == "failed" and res.summary == "drain gpu-01 in Slurm: not approved (ubob said no)"
    assert host.commands == [cluster.sinfo_command("gpu-01")]


async def test_a_node_already_drained_is_ok_in_a_dry_run_too_there_is_nothing_to_plan():
    host = testing.Host("gpu-01").on(cluster.sinfo_command("gpu-01"), stdout=DRAINING)
    for dry in (True, False):
        res = await testing.run_skill(node_resume, host, {"only_if_reason": "someone else"}, vars=SLURM, dry_run=dry)
        assert res.status == "ok" and res.data["left"] is True


async def test_carry_out_previews_with_the_plans_data_and_output_or_applies_it():
    calls = []

    async def apply() -> StepResult:
        calls.append("applied")
        return StepResult.changed("done")

    plan = Plan(["patch /etc/x"], "would patch /etc/x", apply, data={"keys": ["a"]}, output="-a\n+b\n")
    log: list[str] = []
    dry = await testing.context(testing.Host(), dry_run=True, log=log).carry_out(plan)
    assert (dry.status, dry.summary, dry.data, dry.output) == ("skipped", "dry-run: would patch /etc/x",
                                                               {"keys": ["a"]}, "-a\n+b\n")
    assert log == ["[dry-run] would patch /etc/x"] and calls == []
    assert (await testing.context(testing.Host()).carry_out(plan)).status == "changed" and calls == ["applied"]


async def test_a_dry_run_shell_step_runs_nothing():
    host = testing.Host()
    res = await testing.run_skill(shell, host, {"command": "rm -rf /tmp/x"}, dry_run=True)
    assert res.status == "skipped" and host.commands == []
