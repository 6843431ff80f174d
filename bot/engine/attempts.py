"""One attempt of a skill: its `run` bounded by the step's timeout and the run's cancellation.

The engine calls a skill only through a `Bound` made by `bind`: the skill with params its
own `Params` validated, so `run` gets exactly the type it declares (`eaglebot.sdk.Skill`).
A skill fails its step by returning a failed `StepResult` or raising `StepFailed` (with its
data, evidence and warnings); any other exception is an internal error with its traceback.
"""
from __future__ import annotations

import asyncio
import traceback
from dataclasses import dataclass
from typing import Generic, Mapping, Protocol

from eaglebot.engine import procs
from eaglebot.engine.playbook import Step
from eaglebot.errors import EagleError, StepFailed
from eaglebot.sdk import P, Skill, SkillContext, SkillParams, StepResult


class Runnable(Protocol):
    """A skill bound to its params, whatever their type: what the runner holds."""

    @property
    def params(self) -> SkillParams: ...

    async def run(self, ctx: SkillContext) -> StepResult: ...


@dataclass(frozen=True)
class Bound(Generic[P]):
    skill: Skill[P]
    params: P

    async def run(self, ctx: SkillContext) -> StepResult:
        return await self.skill.run(ctx, self.params)


def bind(skill: Skill[P], rendered: Mapping[str, object]) -> Bound[P]:
    """Validate a step's rendered `with:` with the skill's Params (raises pydantic's ValidationError)."""
    return Bound(skill, skill.Params.model_validate(rendered))


def failed_result(e: StepFailed) -> StepResult:
    """A raised StepFailed recorded as the failed StepResult it stands for."""
    return StepResult.failed(str(e), **e.result)


async def attempt(bound: Runnable, sctx: SkillContext, step: Step,
                  cancel: asyncio.Event | None) -> tuple[StepResult, bool]:
    """One attempt of a skill, bounded by timeout_s and the run's cancellation; (result, cancelled)."""
    task = asyncio.create_task(bound.run(sctx))
    cancel_wait = asyncio.create_task(cancel.wait()) if cancel else None
    try:
        done, _ = await asyncio.wait([task] if cancel_wait is None else [task, cancel_wait],
                                     timeout=step.timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if cancel_wait:
            cancel_wait.cancel()
    if task in done:
        try:
            res = task.result()
        except StepFailed as e:
            return failed_result(e), False
        except EagleError as e:  # TransportError, ...: their text is the summary
            return StepResult.failed(str(e)), False
        except Exception as e:
            return StepResult.failed(f"internal error in {step.skill}: {type(e).__name__}: {e}",
                                     output=traceback.format_exc()), False
        if not isinstance(res, StepResult):
            return StepResult.failed(f"skill {step.skill} returned no result"), False
        return res, False
    # Timed out or cancelled: cancelling the task kills the remote process group.
    task.cancel()
    try:
        await asyncio.wait_for(task, 30)
    except (asyncio.CancelledError, asyncio.TimeoutError, Exception):
        pass
    sctx.cancelled.set()
    sp = procs.current()
    if cancel is not None and cancel.is_set():
        return StepResult.failed(procs.summary_note(sp, "cancelled", "cancelled; ")), True
    return StepResult.failed(procs.summary_note(sp, f"timed out after {step.timeout_s:g}s; its processes were stopped",
                                                f"timed out after {step.timeout_s:g}s; ")), False
