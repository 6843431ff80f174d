"""Post-run hooks (the history check) never fail a run, and what they say reaches every view."""
from __future__ import annotations

from eaglebot.engine.runner import RunRequest
from eaglebot.history.view import RunView


async def test_a_crashing_post_run_hook_is_a_stored_warning_not_a_failed_run(services):
    svc = await services({})

    async def broken(engine, outcome, playbook):
        raise RuntimeError("history unreadable")

    svc.engine.post_run_hooks.append(broken)
    out = await svc.engine.run(RunRequest("hello", actor="me"))
    assert (out.status, out.exit_code) == ("succeeded", 0)
    view = RunView.load(svc.store.sync, out.run_id)
    assert "regression check failed: history unreadable" in view.as_json()["warnings"]
