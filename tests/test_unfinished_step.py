"""A step the run left `running` is closed at the run's end with the run's own reason (issue 45):
a crash names the internal error, not the audit store, which did not fail."""
from __future__ import annotations

import pytest

from support.helpers import write_playbook

from eaglebot.engine.playbook import load_playbook
from eaglebot.engine.runner import RunRequest
from eaglebot.store.steps import StepsMixin


async def test_a_crash_while_a_step_ends_names_the_crash_not_the_store(services, tmp_path, monkeypatch):
    svc = await services({"local": {"transport": "local"}})
    book = load_playbook(write_playbook(tmp_path, "one", "name: one\nsteps:\n  - skill: shell\n"
                                                         "    with: {command: 'echo hi'}\n"))

    def crash(self, step_id, end):  # a bug, not a database error: the store itself works
        raise RuntimeError("the step's end could not be built")

    monkeypatch.setattr(StepsMixin, "step_finished", crash)
    with pytest.raises(RuntimeError):   # the engine's caller sees the crash (the CLI: exit 1, one line)
        await svc.engine.run(RunRequest(playbook=book, hosts=["local"]))
    [run] = svc.store.sync.history(limit=1)
    assert run["status"] == "failed" and run["error"] == "internal error: the step's end could not be built"
    [row] = svc.store.sync.steps(run["id"])
    assert row["status"] == "failed"
    assert row["summary"] == "not finished: the run stopped: internal error: the step's end could not be built"
