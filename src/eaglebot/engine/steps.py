"""One step of a run on one host: `when`, params rendered and validated, the step row,
its output, each attempt and retry, approvals, and the step's end recorded.

`StepRunner` is the engine's half that runs steps (`Engine` in `runner` adds the run's
lifecycle); the attributes it declares are the engine's.
"""
from __future__ import annotations

import asyncio
import logging
import time
import traceback
from typing import Any, Awaitable, Callable, Mapping, Sequence, TypeVar, TYPE_CHECKING

from pydantic import ValidationError

from eaglebot.config import Settings
from eaglebot.engine import procs, templating
from eaglebot.engine.context import explain_undefined
from eaglebot.engine.attempts import Runnable, attempt, bind
from eaglebot.engine.output import OutputBuffer, keep_last, printable, printable_obj
from eaglebot.engine.playbook import Step
from eaglebot.engine.records import (Approver, RunRequest, RunState, StepRecord, StepSlot, jsonable, safe)
from eaglebot.engine.redact import Redactor
from eaglebot.engine.registry import SkillRegistry
from eaglebot.errors import StoreError
from eaglebot.sdk import AnySkill, ApprovalRequest, SkillContext, StepResult
from eaglebot.store.rows import StepEnd
from eaglebot.transport import TransportPool

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import EngineStore

log = logging.getLogger("eaglebot.engine")

RESULT_OUTPUT_KEEP = 64 * 1024  # characters of a skill's own evidence (StepResult.output) kept
T = TypeVar("T")


class AuditReads:
    """A skill's `ctx.audit` (the SDK's `AuditView`): its four reads, each through the store's door."""

    def __init__(self, store: Door[EngineStore]):
        self._store = store

    async def last_backup(self, host: str, path: str, run_id: int | None = None) -> Mapping[str, Any] | None:
        return await self._store.call(lambda s: s.last_backup(host, path, run_id))

    async def last_step_data(self, host: str, skill: str, key: str) -> dict[str, Any] | None:
        return await self._store.call(lambda s: s.last_step_data(host, skill, key))

    async def step_data_history(self, host: str, skills: list[str], contains: str, limit: int = 200,
                                newest_first: bool = False) -> Sequence[Mapping[str, Any]]:
        return await self._store.call(lambda s: s.step_data_history(host, skills, contains, limit, newest_first))

    async def changes(self, run_id: int) -> Sequence[Mapping[str, Any]]:
        return await self._store.call(lambda s: s.changes(run_id))


class StepRunner:
    settings: Settings
    registry: SkillRegistry
    store: Door[EngineStore]
    pool: TransportPool
    redactor: Redactor
    heartbeat_s: float

    async def _record(self, run: RunState, write: Awaitable[T]) -> T | None:
        """A store write during a run. A failing store (disk full, read-only, corrupt) fails the
        run once, in one line; it never leaves the step loop half-way (always-steps still run)."""
        try:
            return await write
        except StoreError as e:
            run.store_failed(e)
            return None

    async def _wrote(self, run: RunState, write: Awaitable[None]) -> bool:
        """`_record` for a write that returns nothing: did it reach the store?"""
        try:
            await write
            return True
        except StoreError as e:
            run.store_failed(e)
            return False

    async def _record_skipped(self, run: RunState, slot: StepSlot, summary: str,
                              status: str = "skipped") -> StepRecord:
        """A step that does not run (`skipped`), or the first step of a host that could not be
        reached (`unreachable`): its row, opened and closed."""
        step = slot.step
        sid = await self._record(run, self.store.call(lambda s: s.step_started(
            run.run_id, slot.idx, slot.host, step.label, step.skill, {}, slot.section)))
        if sid is not None:
            await self._record(run, self.store.call(lambda s: s.step_finished(sid, StepEnd(
                run_id=run.run_id, host=slot.host, status=status, summary=summary, duration_ms=0, attempts=0))))
        return StepRecord(slot.host, slot.idx, slot.section, step.label, step.skill, status, summary, 0, 0,
                          step_id=sid)

    def _render(self, step: Step, ctx: dict[str, Any]) -> tuple[AnySkill, dict[str, Any]]:
        skill = self.registry.get_skill(step.skill)
        fields = skill.Params.model_fields
        rendered = {}
        for k, v in step.with_.items():
            rendered[k] = templating.render_value(v, ctx, shell=shell_param(self.registry, step.skill, k))
        return skill, rendered

    async def _prepare_step(self, run: RunState, slot: StepSlot, ctx: dict[str, Any]
                            ) -> Runnable | tuple[StepRecord, StepResult]:
        """`when`, then render and validate the params: the skill and its params, or the
        record of a step that ends here (skipped by `when`, or failed before it started)."""
        step = slot.step
        if step.when is not None:
            try:
                go = bool(templating.evaluate(step.when, ctx))
            except templating.TemplateFailure as e:
                return await self._failed_before_start(run, slot, str(e))
            if not go:
                rec = await self._record_skipped(run, slot, f"skipped: when `{step.when}` is false")
                res = StepResult.skipped(rec.summary)
                await safe(run.observer.step_finished(run.run_id, rec, res))
                return rec, res
        rendered: dict[str, Any] = {}
        try:
            skill, rendered = self._render(step, ctx)
            return bind(skill, rendered, self._context(run, slot, ctx).host_path)
        except templating.TemplateFailure as e:
            if run.req.dry_run and (dep := self._failed_dependency(run, slot)) is not None:
                rec = await self._record_skipped(run, slot, f"dry run: {dep}")
                res = StepResult.skipped(rec.summary)
                await safe(run.observer.step_finished(run.run_id, rec, res))
                return rec, res
            why = explain_undefined(str(e), run.playbook, ctx, slot.host) or str(e)
            return await self._failed_before_start(run, slot, why)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            # the step refused its input before doing anything: a usage failure (exit 2), as a skill's own
            return await self._failed_before_start(run, slot, f"invalid parameter {loc}: {err['msg']}",
                                                   params=rendered, usage=True)

    @staticmethod
    def _failed_dependency(run: RunState, slot: StepSlot) -> str | None:
        """A dry run goes on past a failed step, but a later step that reads what it registers cannot be
        rendered: that step is skipped, naming the one it depends on, not failed on its template."""
        used = templating.names_used(slot.step.with_)
        labels = {s.label for s in (*run.playbook.steps, *run.playbook.always) if s.register_ in used}
        dep = next((r for r in run.outcome.steps if r.host == slot.host and r.status == "failed"
                    and r.name in labels), None)
        return None if dep is None else f"{dep.name!r} {'refused' if dep.usage else 'failed'} (this step uses " \
                                        f"what it registers)"

    async def _run_step(self, run: RunState, slot: StepSlot, ctx: dict[str, Any]
                        ) -> tuple[StepRecord, StepResult]:
        prepared = await self._prepare_step(run, slot, ctx)
        if isinstance(prepared, tuple):
            return prepared
        params = prepared.params
        step, host, label = slot.step, slot.host, slot.step.label
        sid = await self._record(run, self.store.call(lambda s: s.step_started(
            run.run_id, slot.idx, host, label, step.skill, self.redactor.obj(params.model_dump(mode="json")),
            slot.section)))
        if sid is None and slot.section == "steps":  # no row, no run: a step never runs unaudited
            rec = StepRecord(host, slot.idx, slot.section, label, step.skill, "failed",
                             f"not run: the audit store failed: {run.store_error}")
            res = StepResult.failed(rec.summary)
            await safe(run.observer.step_finished(run.run_id, rec, res))
            return rec, res
        rec = StepRecord(host, slot.idx, slot.section, label, step.skill, "running", step_id=sid)
        await safe(run.observer.step_started(run.run_id, rec))
        try:
            return await self._execute_step(run, slot, ctx, prepared, sid, rec)
        except Exception as e:
            # Whatever went wrong around the skill (its result, a helper of the engine's), the step
            # ends failed with the exception named, and the run goes on to its `always:` steps.
            if isinstance(e, StoreError):
                run.store_failed(e)
            summary = printable(self.redactor.text(f"internal error in {step.skill}: {type(e).__name__}: {e}"))
            log.exception("%s: step %r crashed", host, label)
            if sid is not None:
                end = StepEnd(run_id=run.run_id, host=host, status="failed", summary=summary, duration_ms=0,
                              attempts=1, output=printable(self.redactor.text(traceback.format_exc())))
                await self._record(run, self.store.call(lambda s: s.step_finished(sid, end)))
            rec.status, rec.summary = "failed", summary
            res = StepResult.failed(summary)
            await safe(run.observer.step_finished(run.run_id, rec, res))
            return rec, res

    async def _execute_step(self, run: RunState, slot: StepSlot, ctx: dict[str, Any], prepared: Runnable,
                            sid: int | None, rec: StepRecord) -> tuple[StepRecord, StepResult]:
        step, host, label = slot.step, slot.host, slot.step.label

        async def write(text: str) -> None:
            if sid is None:
                return  # an always-step the failing store could not record: its output goes to the views only
            try:
                await self.store.call(lambda s: s.step_output(sid, text))
            except StoreError as e:
                run.store_failed(e)
                raise

        path = (self.settings.output_root / self.store.db_id / str(run.run_id) / f"{sid}.gz"
                if sid is not None else None)
        out = OutputBuffer(self.redactor, write, lambda line: run.observer.step_output(run.run_id, rec, line),
                           keep_bytes=self.settings.output_keep_bytes, path=path, run_id=run.run_id)
        t0 = time.monotonic()
        out.start()
        beat = asyncio.create_task(self._heartbeat(run, rec, out, t0))
        try:
            result, attempts = await self._attempts(run, slot, ctx, prepared, out, sid)
        finally:
            beat.cancel()
            try:
                await out.close()
            except StoreError:
                pass  # recorded by write(): the run fails, the step's result is still reported
        duration_ms = int((time.monotonic() - t0) * 1000)
        # Text from a host may carry NUL and invalid UTF-8 (surrogate escapes): shown escaped.
        result.summary = printable(self.redactor.text(result.summary))
        result.output = keep_last(printable(self.redactor.text(result.output)), RESULT_OUTPUT_KEEP,
                                  "the step's evidence")
        if out.file_error:
            result.warnings.append(f"its whole output could not be saved: {out.file_error}")
        result.warnings = run.new_warnings(host, [printable(self.redactor.text(w)) for w in result.warnings])
        for c in result.changes:  # a patched config may hold a token: never into changes.diff
            c.diff, c.path = printable(self.redactor.text(c.diff)), printable(self.redactor.text(c.path))
        for r in result.regressions:
            r.host = r.host or host
        end = StepEnd(run_id=run.run_id, host=host, status=result.status, summary=result.summary,
                      duration_ms=duration_ms, attempts=attempts,
                      data=printable_obj(self.redactor.obj(jsonable(result.data))),
                      metrics=result.metrics, changes=result.changes, warnings=result.warnings,
                      regressions=result.regressions,
                      output=out.stored_text() + ("\n" + result.output if result.output else ""),
                      output_bytes=out.nbytes, output_sha256=out.sha256,
                      output_file=str(out.file) if out.file is not None else None)
        recorded = sid is not None and await self._wrote(run, self.store.call(lambda s: s.step_finished(sid, end)))
        if not recorded:
            result.summary = f"{result.summary} (not recorded: the audit store failed)"
            log.error("%s: step %r ended %s but could not be recorded: %s", host, label, result.status,
                      run.store_error)
        rec.status, rec.summary, rec.duration_ms, rec.attempts = result.status, result.summary, duration_ms, attempts
        rec.usage = result.usage and result.status == "failed"
        rec.output_tail = out.tail(30) if not result.output else result.output[-4000:]
        if result.final:
            run.outcome.finals.append(printable(self.redactor.text(result.final)))
        run.outcome.metrics.extend((host, m) for m in result.metrics)
        run.outcome.warnings.extend(f"{host}: {w}" for w in result.warnings)
        run.outcome.regressions.extend(result.regressions)
        await safe(run.observer.step_finished(run.run_id, rec, result))
        return rec, result

    async def _heartbeat(self, run: RunState, rec: StepRecord, out: OutputBuffer, t0: float) -> None:
        """Every `heartbeat_s` while the step runs: its elapsed time and last output line."""
        while True:
            await asyncio.sleep(self.heartbeat_s)
            await safe(run.observer.step_heartbeat(run.run_id, rec, time.monotonic() - t0, out.tail(1)))

    async def _attempts(self, run: RunState, slot: StepSlot, ctx: dict[str, Any], bound: Runnable,
                        out: OutputBuffer, sid: int | None) -> tuple[StepResult, int]:
        """The first attempt and each retry; `always` steps ignore the run's cancellation."""
        step = slot.step
        cancel = None if slot.section == "always" else run.cancel

        async def approve(ar: ApprovalRequest) -> tuple[bool, str]:
            return await self._approve(ar, run.req, run.approver)

        attempts = 0
        # A lock-free run (read-only skills: `eagle logs`) shares the host with whatever run holds
        # it: its commands wait until no step of another run runs a playbook's code there, and an
        # attempt beside one is not trusted and made again (procs.quiet, procs.beside).
        lock_free = not run.req.dry_run and all(self.registry.read_only(s.skill)
                                                for s in [*run.playbook.steps, *run.playbook.always])
        untrusted = 0
        while True:
            attempts += 1
            if attempts > 1 and sid is not None:
                await self._record(run, self.store.call(lambda s: s.step_attempt(sid, attempts)))
            sctx = self._context(run, slot, ctx, out, approve)
            mark = 0
            if lock_free:
                mark, busy = await procs.quiet(self.store, slot.host, run.run_id, cancel, out.line)
                if busy:
                    return StepResult.failed(busy), attempts
            sp, token = procs.begin(self.store, run.run_id, sid, step.skill)
            left = ""
            try:
                result, cancelled_here = await attempt(bound, sctx, step, cancel)
            finally:
                left = await procs.end(self.store, sp, token, run.run_id, sid, slot.host,
                                       None if run.req.dry_run else self.pool.get(slot.host))
            if left:
                result.warnings.append(left)
            if sp.login_changed:   # (never retried: the next attempt would find its own change)
                return StepResult.failed(procs.refused(sp), warnings=result.warnings), attempts
            other = await procs.beside(self.store, slot.host, run.run_id, mark) if lock_free and not cancelled_here else ""
            if other:
                untrusted += 1
                result = StepResult.failed(f"not trusted: {other} ran on {slot.host} meanwhile, and a process of it "
                                           f"could have written into this output")
                if untrusted <= 3:
                    out.line(f"attempt {attempts}: {result.summary}; reading again")
                    continue
                return result, attempts
            if sctx.plan:
                run.outcome.plan.extend(f"{slot.host}: {step.label}: {p}" for p in sctx.plan)
            if result.status != "failed" or cancelled_here or attempts > step.retries:
                return result, attempts
            out.line(f"attempt {attempts} failed: {result.summary}; retrying in {step.retry_delay_s:g}s")
            if step.retry_delay_s:
                try:
                    await asyncio.wait_for(cancel.wait() if cancel else asyncio.Event().wait(),
                                           step.retry_delay_s)
                    return result, attempts  # cancelled while waiting to retry
                except asyncio.TimeoutError:
                    pass

    def _context(self, run: RunState, slot: StepSlot, ctx: dict[str, Any], out: OutputBuffer | None = None,
                 approve: Callable[[ApprovalRequest], Awaitable[tuple[bool, str]]] | None = None) -> SkillContext:
        paths = run.paths.get(slot.host)
        return SkillContext(
            host=self.pool.get(slot.host), host_name=slot.host, vars=ctx, run_id=run.run_id,
            step_idx=slot.idx, step_name=slot.step.label, dry_run=run.req.dry_run, confirm=slot.step.confirm,
            state_dir=paths.state_dir if paths else "", home=paths.home if paths else "", audit=AuditReads(self.store),
            _log=out.line if out else (lambda line: None), _log_text=out.text if out else None, _approve=approve)

    async def _failed_before_start(self, run: RunState, slot: StepSlot, message: str,
                                   params: dict[str, Any] | None = None,
                                   usage: bool = False) -> tuple[StepRecord, StepResult]:
        step = slot.step
        sid = await self._record(run, self.store.call(lambda s: s.step_started(
            run.run_id, slot.idx, slot.host, step.label, step.skill, self.redactor.obj(jsonable(params or {})),
            slot.section)))
        message = self.redactor.text(message)
        if sid is not None:
            await self._record(run, self.store.call(lambda s: s.step_finished(sid, StepEnd(
                run_id=run.run_id, host=slot.host, status="failed", summary=message, duration_ms=0, attempts=0))))
        rec = StepRecord(slot.host, slot.idx, slot.section, step.label, step.skill, "failed", message, 0, 0,
                         step_id=sid, usage=usage)
        res = StepResult.failed(message, usage=usage)
        await safe(run.observer.step_finished(run.run_id, rec, res))
        return rec, res

    async def _approve(self, ar: ApprovalRequest, req: RunRequest, approver: Approver | None) -> tuple[bool, str]:
        aid = await self.store.call(lambda s: s.approval_requested(ar.run_id, ar.step_idx, ar.host, ar.step, ar.action,
                                                                   [self.redactor.text(d) for d in ar.details]))
        if req.assume_yes:
            ok, who = True, f"{req.actor} (--yes)"
        elif approver is None:
            ok, who = False, ("nobody to ask: pass --yes to approve" if req.origin == "cli"
                              else "nobody to ask: the schedule does not say approve: true")
        else:
            try:
                ok, who = await asyncio.wait_for(approver(ar), self.settings.access.approval_timeout_s)
            except asyncio.TimeoutError:
                if await self.store.call(lambda s: s.approval_decided(aid, "timeout", "")):
                    return False, f"no decision within {self.settings.access.approval_timeout_s:g}s"
                return await self._stored_decision(aid)   # a click won the row as the wait ended
            except asyncio.CancelledError:   # the run was cancelled while it waited: say so in the row
                await asyncio.shield(self.store.call(lambda s: s.approval_decided(aid, "cancelled", "")))
                raise
        if await self.store.call(lambda s: s.approval_decided(aid, "approved" if ok else "denied", who)):
            return ok, who
        return await self._stored_decision(aid)

    async def _stored_decision(self, aid: int) -> tuple[bool, str]:
        """The decision the store kept (the first writer's, maybe another replica's): the run
        follows the row, never a click the row refused."""
        row = await self.store.call(lambda s: s.get_approval(aid))
        if row is None:
            return False, f"approval #{aid} is gone from the audit store"
        if row["status"] in ("approved", "denied"):
            return row["status"] == "approved", row["decided_by"] or ""
        return False, f"approval {row['status']}"


def shell_param(registry: SkillRegistry, skill: str, key: str) -> bool:
    """Whether the skill's parameter `key` is a shell command (its values are quoted as words)."""
    try:
        fields = registry.get_skill(skill).Params.model_fields
    except Exception:   # an unknown skill is lint's error, not this one's
        return False
    extra = fields[key].json_schema_extra if key in fields else None
    return bool(isinstance(extra, dict) and extra.get("shell"))
