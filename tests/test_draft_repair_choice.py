"""draft.repair's `choose` over the double Host: which attempt is kept, and whether the playbook needs its
final relaunch. Measured on the real pair (docs/gpu-validation.md): with one attempt that wins, the final
stop and launch relaunched the very list the attempt's server was running; `serving` says so, and the
draft-repair playbook then keeps that server."""
from __future__ import annotations

from typing import Any

import pytest

from eaglebot.skills import draft_repair
from eaglebot.testing import Host, run_skill

ATTEMPTS = [{"label": "as trained", "ids": [1, 3, 5], "set": {"x": [1, 3, 5]}, "delete": [], "points": [1, 3, 5],
             "words": "the outputs of layers 1, 3 and 5"},
            {"label": "one deeper", "ids": [2, 4, 6], "set": {"x": [2, 4, 6]}, "delete": [], "points": [2, 4, 6],
             "words": "the outputs of layers 2, 4 and 6"}]
PLAN = {"attempts": ATTEMPTS, "count": 2, "current": {"ids": [0, 1, 2], "words": "the outputs of layers 0, 1 and 2"}}
NOW = {"accept_length": 2.74, "tok_s": 300.0, "verdict": "capture mismatch"}


def _probe(accept: float) -> dict[str, Any]:
    return {"accept_length": accept, "tok_s": 100 * accept, "verdict": "as expected"}


async def _choose(attempts: list[dict[str, Any]], approve: bool = True) -> Any:
    return await run_skill(draft_repair, Host("gpu-01"), {"action": "choose", "plan": PLAN, "current": NOW,
                                                         "attempts": attempts},
                           confirm=True, approve=lambda req: (approve, "alice"))


@pytest.mark.parametrize("accepts, best, serving", [
    ([2.9, 3.16], [2, 4, 6], True),      # the last attempt wins: its server keeps running
    ([3.16, 2.9], [1, 3, 5], False),     # an earlier one wins: the final relaunch puts it back
])
async def test_the_kept_list_says_whether_the_last_attempts_server_already_runs_it(accepts, best, serving):
    res = await _choose([_probe(a) for a in accepts])
    assert res.status == "ok" and res.data["apply"] is True and res.data["best"]["ids"] == best
    assert res.data["serving"] is serving
    assert res.summary.endswith("; the server already runs it") is serving, res.summary


async def test_a_denied_choice_restores_and_relaunches_even_when_the_last_attempt_won():
    res = await _choose([_probe(2.9), _probe(3.16)], approve=False)
    assert res.data["apply"] is False and res.data["serving"] is False
    assert "not approved (alice): the draft's config is restored" in res.summary
