"""Slack face of sweeps and tuning runs: the table and an "Apply best" / "Apply" button.

The button carries the `/eagle` text that applies the winner (the sweep's playbook with
the winning inputs). Pressing it is exactly typing that text (`listeners/actions.py`): parsed
by the same router, checked against `access` (operators; a refusal is an `events` row), run
through the engine with the thread's approvals. A tuning run's button carries `/eagle tune apply RUN`,
which itself asks an approver before it relaunches (the approval card in the thread).
"""
from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import ActionsBlock, ButtonElement

from eaglebot.frontends.chat.reply import SweepDone, TuneDone
from eaglebot.frontends.slack import blocks as bk

APPLY_BEST_ACTION = "eagle_apply_best"
MAX_VALUE = 2000   # a button value's limit


def sweep_blocks(body: SweepDone) -> list[dict[str, Any]]:
    blocks = bk.text_blocks(body.text, title=f"Sweep #{body.sweep_id}", code=True)
    if body.apply and len(body.apply) <= MAX_VALUE:
        blocks.append(ActionsBlock(block_id=f"eagle_sweep_{body.sweep_id}", elements=[
            ButtonElement(text="Apply best", action_id=APPLY_BEST_ACTION, value=body.apply, style="primary"),
        ]).to_dict())
        blocks.append(bk.context(f"Apply best runs `/eagle {bk.escape(body.apply)}` (operators; its confirm "
                                 f"steps ask for approval as usual)."))
    return bk.limit(blocks)


def tune_blocks(body: TuneDone) -> list[dict[str, Any]]:
    blocks = bk.text_blocks(body.text, title=f"Tuning run #{body.run_id}", code=True)
    if body.apply and len(body.apply) <= MAX_VALUE:
        blocks.append(ActionsBlock(block_id=f"eagle_tune_{body.run_id}", elements=[
            ButtonElement(text="Apply (asks for approval)", action_id=APPLY_BEST_ACTION, value=body.apply,
                          style="primary"),
        ]).to_dict())
        blocks.append(bk.context(f"Apply runs `/eagle {bk.escape(body.apply)}` (operators): an approver approves "
                                 f"it in this thread, then the host is relaunched with the result."))
    return bk.limit(blocks)
