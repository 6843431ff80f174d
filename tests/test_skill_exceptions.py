"""Whatever a skill raises or returns, its step is `failed` with the reason named in one sentence,
the skill's own summary is kept where it gave one, and the playbook's `always:` steps run
(DESIGN: "always: runs even when a step failed"). Issue 29: a misspelt keyword
(`StepFailed("x", warnigs=[...])`) used to raise a TypeError inside the engine, record the step as
"not recorded: the audit store failed while it ran", lose the message and skip `always:`."""
from __future__ import annotations

import json
import textwrap

import pytest

from support.helpers import write_playbook

from eaglebot.engine.runner import RunRequest

BODIES = {
    "type_error": ("return len(5)", "internal error in team.bad: TypeError: object of type 'int' has no len()"),
    "key_error": ("return {}['missing']", "internal error in team.bad: KeyError: 'missing'"),
    "cancelled": ("raise asyncio.CancelledError()", "internal error in team.bad: CancelledError"),
    "timeout_inside": ("await asyncio.wait_for(asyncio.sleep(5), 0.01)", "internal error in team.bad: TimeoutError"),
    "transport": ("raise TransportError('host gpu-9 dropped the connection')", "host gpu-9 dropped the connection"),
    "misspelt_failed": ("raise StepFailed('the disk is full', warnigs=['x'])",
                        "the disk is full [the skill's result is invalid: StepFailed() got an unknown keyword "
                        "'warnigs' (did you mean 'warnings'?)]"),
    "misspelt_ok": ("return StepResult.ok('all fine', metrix=[])",
                    "all fine [the skill's result is invalid: StepResult.ok() got an unknown keyword 'metrix' "
                    "(did you mean 'metrics'?)]"),
    "none_returned": ("return None", "skill team.bad returned no result (got NoneType, not a StepResult)"),
    "bad_summary": ("return StepResult('ok', 42)", "skill team.bad returned an invalid result: summary is a int, "
                                                   "not text"),
    "bad_metric": ("return StepResult.ok('done', metrics=[('tok_s', 1.0)])",
                   "done [the skill's result is invalid: metrics holds a tuple, not a Metric]"),
}


def plugin(tmp_path, body: str):
    d = tmp_path / "team"
    d.mkdir(exist_ok=True)
    (d / "bad.py").write_text(textwrap.dedent(f'''
        """A skill that goes wrong.

        ```yaml
        - skill: team.bad
        ```
        """
        import asyncio

        from eaglebot.errors import StepFailed, TransportError
        from eaglebot.sdk import SkillParams, StepResult

        NAME = "team.bad"


        class Params(SkillParams):
            pass


        async def run(ctx, params):
            {body}
        '''))
    return d


@pytest.mark.parametrize("kind", sorted(BODIES))
async def test_whatever_a_skill_raises_fails_its_step_by_name_and_always_runs(services, tmp_path, kind):
    body, summary = BODIES[kind]
    svc = await services(skill_paths=[str(plugin(tmp_path, body))])
    book = write_playbook(tmp_path, "t", """
        name: t
        steps:
          - name: goes wrong
            skill: team.bad
          - name: never
            skill: audit.note
            with: {message: "not reached"}
        always:
          - name: cleanup
            skill: audit.note
            with: {message: "always ran"}
    """)
    out = await svc.engine.run(RunRequest(playbook=str(book), hosts=["local"]))
    assert out.exit_code == 1 and out.status == "failed"
    rows = {r["name"]: r for r in svc.store.sync.steps(out.run_id)}
    bad = rows["goes wrong"]
    assert bad["status"] == "failed" and bad["summary"].startswith(summary), bad["summary"]
    assert "not recorded" not in bad["summary"]
    assert rows["never"]["status"] == "skipped" and rows["never"]["summary"] == "not run: step 'goes wrong' failed"
    assert rows["cleanup"]["status"] == "ok" and rows["cleanup"]["summary"] == "always ran"
    run = svc.store.sync.get_run(out.run_id)
    assert run["status"] == "failed" and "audit store" not in (run.get("error") or "")
    # the audit chain took every row (a crash in the engine would have left it half-written)
    assert all(r["finished_at"] for r in rows.values())


async def test_a_skill_exception_keeps_its_traceback_as_the_steps_evidence(services, tmp_path):
    svc = await services(skill_paths=[str(plugin(tmp_path, "return {}['missing']"))])
    book = write_playbook(tmp_path, "t", "name: t\nsteps:\n  - skill: team.bad\n")
    out = await svc.engine.run(RunRequest(playbook=str(book), hosts=["local"]))
    [row] = svc.store.sync.steps(out.run_id)
    assert "Traceback (most recent call last)" in row["output"] and "KeyError: 'missing'" in row["output"]
    assert json.loads(row["params"]) == {}
