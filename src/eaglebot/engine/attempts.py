"""One attempt of a skill: its `run` bounded by the step's timeout and the run's cancellation.

The engine calls a skill only through a `Bound` made by `bind`: the skill with params its
own `Params` validated, so `run` gets exactly the type it declares (`eaglebot.sdk.Skill`).
A skill fails its step by returning a failed `StepResult` or raising `StepFailed` (with its
data, evidence and warnings); any other exception is an internal error with its traceback.
"""
from __future__ import annotations

import asyncio
import functools
import traceback
from dataclasses import dataclass
from typing import Callable, Generic, Mapping, Protocol, get_args, get_origin, get_type_hints

from eaglebot.engine import procs
from eaglebot.engine.playbook import Step
from eaglebot.errors import EagleError, StepFailed
from eaglebot.sdk import P, Skill, SkillContext, SkillParams, Status, StepResult, result_of


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


def bind(skill: Skill[P], rendered: Mapping[str, object],
         host_path: Callable[[str], str] | None = None) -> Bound[P]:
    """Validate a step's rendered `with:` with the skill's Params (raises pydantic's ValidationError);
    with `host_path`, a `~/...` in a parameter marked `HOST_PATH` becomes the host's absolute path."""
    params = skill.Params.model_validate(rendered)
    if host_path is not None:
        fixed = {name: _paths(getattr(params, name), host_path) for name, f in type(params).model_fields.items()
                 if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("host_path")}
        fixed = {k: v for k, v in fixed.items() if v != getattr(params, k)}
        if fixed:
            params = params.model_copy(update=fixed)
    return Bound(skill, params)


def _paths(value: object, host_path: Callable[[str], str]) -> object:
    if isinstance(value, str):
        return host_path(value)
    if isinstance(value, list):
        return [host_path(v) if isinstance(v, str) else v for v in value]
    return value


def failed_result(e: StepFailed) -> StepResult:
    """A raised StepFailed recorded as the failed StepResult it stands for (an unknown keyword
    fails it all the same, named, with the skill's summary kept: `sdk.result_of`)."""
    return result_of("failed", str(e), getattr(e, "result", {}), "StepFailed")


async def attempt(bound: Runnable, sctx: SkillContext, step: Step,
                  cancel: asyncio.Event | None) -> tuple[StepResult, bool]:
    """One attempt of a skill, bounded by timeout_s and the run's cancellation; (result, cancelled)."""
    task = asyncio.create_task(bound.run(sctx))
    cancel_wait = asyncio.create_task(cancel.wait()) if cancel else None
    try:
        done, _ = await asyncio.wait([task] if cancel_wait is None else [task, cancel_wait],
                                     timeout=step.timeout_s, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:   # the run's own task is cancelled (shutdown): the skill goes with it
        task.cancel()
        raise
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
        except asyncio.CancelledError:
            # The skill's own task ended cancelled (nobody here cancelled it: the run's cancel and
            # the timeout are handled below): a failure of the step like any other exception.
            return StepResult.failed(f"internal error in {step.skill}: CancelledError: the skill was "
                                     f"cancelled from inside (not by a timeout or the run)",
                                     output=traceback.format_exc()), False
        except Exception as e:
            return StepResult.failed(f"internal error in {step.skill}: {type(e).__name__}: {e}",
                                     output=traceback.format_exc()), False
        return checked(res, step.skill), False
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


@functools.cache
def _lists() -> dict[str, type]:
    """StepResult's list fields and what each holds, read from its declaration (once, when a
    result is first checked: not at start-up)."""
    return {name: get_args(t)[0] for name, t in get_type_hints(StepResult).items() if get_origin(t) is list}


def checked(res: object, skill: str) -> StepResult:
    """The skill's result as the engine records it, or a failed one that says what is wrong with it
    (a plugin returning None, a summary that is not text, a metric that is not a Metric...): the
    engine never fails half-way through recording a step because of what a skill returned."""
    if not isinstance(res, StepResult):
        return StepResult.failed(f"skill {skill} returned no result (got {type(res).__name__}, "
                                 f"not a StepResult)")
    wrong = ""
    if res.status not in get_args(Status):
        wrong = f"status {res.status!r} is not ok, changed, skipped or failed"
    elif not isinstance(res.summary, str):
        wrong = f"summary is a {type(res.summary).__name__}, not text"
    elif not isinstance(res.output, str):
        wrong = f"output is a {type(res.output).__name__}, not text"
    elif not isinstance(res.data, dict):
        wrong = f"data is a {type(res.data).__name__}, not a dict"
    else:
        for name, kind in _lists().items():
            value = getattr(res, name)
            if not isinstance(value, list):
                wrong = f"{name} is a {type(value).__name__}, not a list"
                break
            bad = next((v for v in value if not isinstance(v, kind)), None)
            if bad is not None:
                wrong = f"{name} holds a {type(bad).__name__}, not a {kind.__name__}"
                break
    if not wrong:
        return res
    summary = res.summary if isinstance(res.summary, str) else ""
    return StepResult.failed(f"{summary} [the skill's result is invalid: {wrong}]" if summary
                             else f"skill {skill} returned an invalid result: {wrong}")
