"""Dry-run from a plan: a mutating skill probes, builds a `Plan`, and `SkillContext.carry_out`
previews it (a dry-run: only the probes run, the actions are logged, the step is skipped) or
applies it, after its approval where it needs one. Driven through `eaglebot.testing.Host`
with the real `sinfo` capture, so what ran on the host is exactly `host.commands`."""
from __future__ import annotations

from pathlib import Path

import pytest

from eaglebot import testing
from eaglebot.errors import StepFailed
from eaglebot.facts.host import cluster
from eaglebot.sdk import Approval, Plan, StepResult
from eaglebot.skills import (bench_batches, bench_compare, bench_correctness, bench_flap, bench_serving, draft_probe,
                             gpu_health, gpu_verify, node_drain, node_resume, shell)

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


# -- the approval a plan asks, and what a dry-run gives back


def _recording():
    calls: list[str] = []

    async def apply() -> StepResult:
        calls.append("applied")
        return StepResult.changed("done")

    return calls, apply


async def test_an_approval_is_never_asked_in_a_dry_run_and_the_plans_warnings_come_back():
    calls, apply = _recording()
    asked: list[str] = []
    plan = Plan(["kill 1"], "would kill 1", apply, approve=Approval("kill 1 process", ["pid 1"]), warnings=["w"])
    ctx = testing.context(testing.Host(), dry_run=True, confirm=True, approve=lambda req: (asked.append(req.action), (True, "u"))[1])
    res = await ctx.carry_out(plan)
    assert (res.status, res.summary, res.warnings) == ("skipped", "dry-run: would kill 1", ["w"])
    assert asked == [] and calls == []


async def test_a_refused_approval_raises_the_plans_own_failure_or_names_the_action():
    calls, apply = _recording()
    no = testing.context(testing.Host(), confirm=True, approve=lambda req: (False, "ubob said no"))
    own = Plan(["kill 1"], "would kill 1", apply, approve=Approval(
        "kill 1 process", ["pid 1"], refused=lambda who: StepFailed(f"not approved ({who}): nothing was killed",
                                                                    data={"killed": []})))
    with pytest.raises(StepFailed) as e:
        await no.carry_out(own)
    assert str(e.value) == "not approved (ubob said no): nothing was killed" and e.value.result["data"] == {"killed": []}
    with pytest.raises(StepFailed, match=r"^kill 1 process: not approved \(ubob said no\)$"):
        await no.carry_out(Plan(["kill 1"], "would kill 1", apply, approve=Approval("kill 1 process", ["pid 1"])))
    assert calls == []


async def test_an_approval_that_logs_says_who_approved_before_the_plan_is_applied():
    calls, apply = _recording()
    log: list[str] = []
    ctx = testing.context(testing.Host(), confirm=True, approve=lambda req: (True, "UBOSS"), log=log)
    assert (await ctx.carry_out(Plan([], "", apply, approve=Approval("a", [], log=True)))).status == "changed"
    quiet = testing.context(testing.Host(), confirm=True, approve=lambda req: (True, "UBOSS"), log=[])
    assert (await quiet.carry_out(Plan([], "", apply, approve=Approval("a", [])))).status == "changed"
    assert log == ["approved by UBOSS"] and calls == ["applied", "applied"]


async def test_a_preview_is_what_a_dry_run_returns_instead_of_skipped():
    calls, apply = _recording()
    idle = StepResult.ok("no server running on port 30000")
    log: list[str] = []
    res = await testing.context(testing.Host(), dry_run=True, log=log).carry_out(Plan([], "", apply, preview=idle))
    assert res is idle and log == [] and calls == []


# -- the skills that only read, but that a dry-run must not run (the server they measure was not
# relaunched, the cleanup before them killed nothing): planned, and nothing reaches the host.

READERS = [
    (bench_serving, {}, "dry-run: would benchmark port 30000 1 time(s)"),
    (bench_batches, {}, "dry-run: would benchmark "),
    (bench_correctness, {}, "dry-run: would check "),
    (bench_compare, {"baseline": {"output_throughput": 100}}, "dry-run: nothing was measured to compare"),
    (bench_flap, {}, "dry-run: no load sent"),
    (draft_probe, {}, "dry-run: would probe the draft's acceptance on port 30000"),
    (gpu_health, {}, "dry-run: would check GPU health"),
    (gpu_verify, {}, "dry-run: would verify that the GPUs are free"),
]


@pytest.mark.parametrize("skill,with_,summary", READERS, ids=[s.NAME for s, _, _ in READERS])
async def test_a_dry_run_measures_nothing_and_says_what_it_would_measure(skill, with_, summary):
    host, log = testing.Host(), []
    res = await testing.run_skill(skill, host, with_, dry_run=True, log=log)
    assert res.status == "skipped" and res.summary.startswith(summary), res.summary
    assert host.commands == [] and host.spawned == []
    assert len(log) == 1 and log[0].startswith("[dry-run] would ")
