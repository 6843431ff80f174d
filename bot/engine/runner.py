"""The engine: one entry point (`Engine.run`) for the CLI, Slack, console and scheduler.

Per host, steps run in order; hosts run concurrently (bounded). Every step row is
written before the step runs and again when it ends; the run row exists before any
step. Slack and the terminal are observers: their failures never fail a run.
"""
from __future__ import annotations

import asyncio
import getpass
import logging
import re
import time
import traceback
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Awaitable, Callable, TypeVar

from pydantic import ValidationError

from eaglebot.engine import limits, procs, templating
from eaglebot.config import Settings
from eaglebot.errors import EagleError, HostBusy, StoreError, UsageError
from eaglebot.engine.playbook import Playbook, Step, find_playbook, resolve_inputs
from eaglebot.engine.output import OutputBuffer, keep_last, printable, printable_obj
from eaglebot.engine.redact import Redactor
from eaglebot.engine.registry import SkillRegistry
from eaglebot.sdk import ApprovalRequest, Metric, Regression, SkillContext, SkillParams, StepResult
from eaglebot.store import AsyncStore
from eaglebot.transport import TransportPool
from eaglebot.transport.base import RUN

log = logging.getLogger("eaglebot.engine")

CANCEL_POLL_S = 1.0
RESULT_OUTPUT_KEEP = 64 * 1024  # characters of a skill's own evidence (StepResult.output) kept
HEARTBEAT_S = 10.0   # a sign of life (elapsed time, last output line) while a step runs longer


@dataclass
class RunRequest:
    playbook: str | Playbook
    hosts: list[str] | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    actor: str = field(default_factory=getpass.getuser)
    origin: str = "cli"              # cli | slack | schedule
    dry_run: bool = False
    assume_yes: bool = False
    rerun_of: int | None = None
    schedule: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    text: str | None = None          # what the person typed (audited when the request is refused)


@dataclass
class StepRecord:
    host: str
    idx: int
    section: str
    name: str
    skill: str
    status: str
    summary: str = ""
    duration_ms: int = 0
    attempts: int = 0
    output_tail: str = ""
    step_id: int | None = None
    tolerated: bool = False  # failed under continue_on_error: a warning, not a failure


@dataclass
class RunOutcome:
    """What a run did, as the engine saw it live; the front ends show a run from the audit
    store (`eaglebot.history.view.RunView`), the one view every front end shares."""

    run_id: int
    playbook: str
    hosts: list[str]
    status: str
    exit_code: int
    steps: list[StepRecord] = field(default_factory=list)
    metrics: list[tuple[str, Metric]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    regressions: list[Regression] = field(default_factory=list)
    error: str | None = None
    dry_run: bool = False
    plan: list[str] = field(default_factory=list)


class Observer:
    """Receives progress. Every method is optional and must not raise into the engine."""

    async def run_started(self, run_id: int, playbook: Playbook, hosts: list[str], req: RunRequest) -> None: ...

    async def step_started(self, run_id: int, rec: StepRecord) -> None: ...

    def step_output(self, run_id: int, rec: StepRecord, line: str) -> None: ...

    async def step_finished(self, run_id: int, rec: StepRecord, result: StepResult) -> None: ...

    async def step_heartbeat(self, run_id: int, rec: StepRecord, elapsed_s: float, last_line: str) -> None: ...

    async def run_finished(self, outcome: RunOutcome) -> None: ...


Approver = Callable[[ApprovalRequest], Awaitable[tuple[bool, str]]]
T = TypeVar("T")
PostRunHook = Callable[["Engine", RunOutcome, Playbook], Awaitable[list[Regression]]]


async def _safe(coro_or_none: Any) -> None:
    if coro_or_none is None:
        return
    try:
        await coro_or_none
    except Exception:  # an observer (Slack, terminal) never fails a run
        log.exception("observer failed")


@dataclass
class Prepared:
    playbook: Playbook
    hosts: list[str]
    inputs: dict[str, Any]


def takes_locks(pb: Playbook, registry: SkillRegistry) -> bool:
    """A run locks its hosts unless every step's skill declares `READ_ONLY = True` (it
    changes nothing on the host, e.g. server.logs): reading a log must work while a
    relaunch holds the host."""
    return not all(getattr(registry.get_skill(s.skill), "READ_ONLY", False) for s in [*pb.steps, *pb.always])


@dataclass
class RunState:
    """What every step of one run shares: the request, who watches, who approves, the
    run's cancellation and the outcome being built."""

    run_id: int
    req: RunRequest
    playbook: Playbook
    observer: Observer
    approver: Approver | None
    cancel: asyncio.Event
    outcome: RunOutcome
    store_error: str | None = None  # the audit store failed mid-run: the run fails, `always` still runs

    def store_failed(self, e: StoreError) -> None:
        if self.store_error is None:
            self.store_error = str(e)
            log.error("run #%s: %s; the run stops here, its always-steps still run (they may not be recorded)",
                      self.run_id, e)

    def conclude(self) -> None:
        """The run's status and exit code from its steps (DESIGN.md: 1 wins over 3)."""
        o = self.outcome
        failed = [s for s in o.steps if s.status == "failed" and not s.tolerated]
        if self.store_error is not None:
            o.status, o.exit_code = "failed", 1
            o.error = o.error or f"the audit store failed: {self.store_error}"
        elif self.cancel.is_set():
            o.status, o.exit_code = "cancelled", 1
        elif failed:
            o.status, o.exit_code = "failed", 1
            o.error = o.error or f"{failed[0].host}: {failed[0].name}: {failed[0].summary}"
        else:
            o.status = "succeeded"
            o.exit_code = 3 if any(r.kind == "regression" for r in o.regressions) else 0


@dataclass(frozen=True)
class Ready:
    """A step whose `when` held and whose params rendered and validated."""

    skill: ModuleType
    params: SkillParams


@dataclass(frozen=True)
class StepSlot:
    """Where a step runs: its host, its index in the run (`steps.idx`) and its section."""

    host: str
    idx: int
    section: str
    step: Step


class Engine:
    def __init__(self, settings: Settings, store: AsyncStore, pool: TransportPool | None = None,
                 *, redactor: Redactor | None = None, registry: SkillRegistry | None = None):
        self.settings = settings
        self.registry = registry if registry is not None else SkillRegistry.from_settings(settings)
        self.store = store
        self.pool = pool or TransportPool(settings)
        self.redactor = redactor or Redactor(settings.redact)
        self.post_run_hooks: list[PostRunHook] = []
        self._cancel_events: dict[int, asyncio.Event] = {}
        self.heartbeat_s = HEARTBEAT_S
        self._unreleased: set[int] = set()  # runs whose host locks a failing store kept
        self._unfinished: dict[int, RunOutcome] = {}  # runs whose end a failing store did not take
        # One cap across every run of this process (`max_hosts_total`), besides each run's own.
        self._all_hosts = asyncio.Semaphore(settings.max_hosts_total)

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

    # -- preparing ---------------------------------------------------------------------
    def prepare(self, req: RunRequest) -> Prepared:
        """Everything that can be checked before touching a host; raises UsageError."""
        pb = req.playbook if isinstance(req.playbook, Playbook) else find_playbook(
            req.playbook, self.settings.playbooks_path, self.registry)
        hosts = self.settings.resolve_hosts(req.hosts)
        inputs = resolve_inputs(pb, req.inputs)
        return Prepared(pb, hosts, inputs)

    async def record_rejected(self, req: RunRequest, err: EagleError) -> None:
        """A request refused before running (unknown playbook or host, invalid input, busy host)
        is an `events` row of kind `rejected`: who, what they typed, why. Not a run row, so
        history and statistics hold only runs that ran."""
        name = req.playbook.name if isinstance(req.playbook, Playbook) else str(req.playbook)
        # names are stored only when plain (a token or a control character in a name is not echoed)
        text = req.text or " ".join([plain_name(name), ",".join(plain_name(str(h)) for h in req.hosts or []),
                                     *(f"{plain_name(str(k))}={str(v)[:limits.MAX_VALUE_BYTES]}"
                                       for k, v in req.inputs.items()),
                                     *(["--dry-run"] if req.dry_run else [])]).replace("  ", " ")
        # What was typed may hold bytes that are not text (the reason it is refused): escaped, storable.
        await self.store.add_rejection("rejected", printable(req.actor),
                                       self.redactor.text(printable(text.strip()))[:500],
                                       self.redactor.text(printable(str(err))), req.rerun_of)

    async def start(self, req: RunRequest, observer: Observer | None = None,
                    approver: Approver | None = None) -> tuple[int, asyncio.Task[RunOutcome]]:
        """Create the run row and lock its hosts, then run it in a background task.

        Raises UsageError/HostBusy (after recording the rejection) when it cannot start.
        """
        try:
            prep = self.prepare(req)
        except UsageError as e:
            await self.record_rejected(req, e)
            raise
        if self._unfinished or self._unreleased:
            await self._retry_unrecorded()
        lock = prep.hosts if not req.dry_run and takes_locks(prep.playbook, self.registry) else []
        try:
            run_id = await self._create(req, prep, lock)
        except HostBusy as e:
            await self.record_rejected(req, e)
            raise
        self._cancel_events[run_id] = asyncio.Event()
        task = asyncio.create_task(self._execute(run_id, req, prep, observer or Observer(), approver))
        return run_id, task

    async def run(self, req: RunRequest, observer: Observer | None = None,
                  approver: Approver | None = None) -> RunOutcome:
        _, task = await self.start(req, observer, approver)
        return await task

    def cancel(self, run_id: int) -> bool:
        ev = self._cancel_events.get(run_id)
        if ev is None:
            return False
        ev.set()
        return True

    async def _create(self, req: RunRequest, prep: Prepared, lock: list[str]) -> int:
        pb = prep.playbook
        return await self.store.start_run(lock, dict(
            playbook=pb.name, hosts=prep.hosts, inputs=self.redactor.obj(prep.inputs),
            variables={}, actor=req.actor, origin=req.origin, dry_run=req.dry_run,
            rerun_of=req.rerun_of, schedule=req.schedule, channel=req.channel,
            thread_ts=req.thread_ts, source=pb.source))

    # -- executing -----------------------------------------------------------------------
    async def _execute(self, run_id: int, req: RunRequest, prep: Prepared, observer: Observer,
                       approver: Approver | None) -> RunOutcome:
        pb = prep.playbook
        run = RunState(run_id, req, pb, observer, approver,
                       self._cancel_events.setdefault(run_id, asyncio.Event()),
                       RunOutcome(run_id, pb.name, prep.hosts, "running", 0, dry_run=req.dry_run))
        outcome = run.outcome
        RUN.set(run_id)  # this task's context: the run's persistent shells are its own (transport.shell)
        poller = asyncio.create_task(self._poll_cancel(run_id, run.cancel))
        try:
            await _safe(observer.run_started(run_id, pb, prep.hosts, req))
            contexts = {h: self._context(pb, h, prep.inputs, run_id, req) for h in prep.hosts}
            await self._record(run, self.store.save_vars(
                run_id, {h: self.redactor.obj(_jsonable(c)) for h, c in contexts.items()}))
            sem = asyncio.Semaphore(self.settings.max_parallel_hosts)

            async def one(host: str) -> None:
                async with sem, self._all_hosts:
                    if not req.dry_run:
                        await self._clear_pending(run, host)
                    await self._run_host(run, host, contexts[host])

            await asyncio.gather(*(one(h) for h in prep.hosts))
            await self._post_run(run)
            run.conclude()
        except BaseException as e:
            cancelled = isinstance(e, asyncio.CancelledError)
            outcome.status, outcome.exit_code = ("cancelled" if cancelled else "failed"), 1
            outcome.error = outcome.error or ("cancelled" if cancelled else f"internal error: {e}")
            if not cancelled:
                log.exception("run %s crashed", run_id)
            raise
        finally:
            poller.cancel()
            self._cancel_events.pop(run_id, None)
            await asyncio.shield(self.pool.release_run(run_id))
            await asyncio.shield(self._finish(run_id, outcome))
            await _safe(observer.run_finished(outcome))
        return outcome

    async def _clear_pending(self, run: RunState, host: str) -> None:
        """Stop what an earlier run left behind on host (it crashed, or lost the host)."""
        try:
            msgs = await procs.clear_pending(self.store, self.pool.get(host), run.run_id, host)
        except Exception as e:  # the host's first step says why the host cannot be reached
            msgs = [f"leftover processes of earlier runs could not be checked: {e}"]
        for m in msgs:
            m = self.redactor.text(m)
            run.outcome.warnings.append(f"{host}: {m}")
            await self.store.add_warning(run.run_id, host, m)

    async def _post_run(self, run: RunState) -> None:
        """Post-run hooks (the history check): their failure is a warning, never a failed run."""
        for hook in self.post_run_hooks:
            try:
                extra = await hook(self, run.outcome, run.playbook)
            except Exception as e:
                log.warning("post-run hook failed: %s", e, exc_info=not isinstance(e, EagleError))
                msg = self.redactor.text(f"regression check failed: {e}")
                run.outcome.warnings.append(msg)
                await self._record(run, self.store.add_warning(run.run_id, "", msg))  # the views read the store
                continue
            for r in extra:
                run.outcome.regressions.append(r)
                await self._record(run, self.store.add_regression(run.run_id, r))

    async def _finish(self, run_id: int, outcome: RunOutcome) -> None:
        try:
            await self._record_end(run_id, outcome)
        except StoreError as e:
            outcome.status, outcome.exit_code = "failed", 1
            outcome.error = outcome.error or f"the audit store failed: {e}"
            # Retried before the next run starts (a long-lived bot); a CLI process that exits
            # leaves it to the next eagle command, which marks the run interrupted.
            self._unfinished[run_id] = outcome
            log.error("run #%s: could not record its end: %s", run_id, e)
        finally:
            try:
                await self.store.release_hosts(run_id)
            except StoreError as e:
                # Retried before the next run starts; freed anyway once this process is gone.
                self._unreleased.add(run_id)
                log.error("run #%s: could not free its host locks: %s", run_id, e)

    async def _record_end(self, run_id: int, outcome: RunOutcome) -> None:
        await self.store.finish_run(run_id, outcome.status, exit_code=outcome.exit_code,
                                    error=self.redactor.text(outcome.error) if outcome.error else None)
        # A step whose end the failing store could not take must not stay `running`.
        await self.store.close_open_steps(run_id, "not recorded: the audit store failed while it ran")

    async def _retry_unrecorded(self) -> None:
        """What a failing store could not take (a run's end, its host locks), once it works again."""
        try:
            for rid, outcome in list(self._unfinished.items()):
                await self._record_end(rid, outcome)
                del self._unfinished[rid]
            for rid in list(self._unreleased):
                await self.store.release_hosts(rid)
                self._unreleased.discard(rid)
        except StoreError:
            pass  # still failing: the new run will say so

    async def _poll_cancel(self, run_id: int, cancel: asyncio.Event) -> None:
        """Cancellation may come from another process (`eagle cancel`, the bot): poll the DB."""
        while not cancel.is_set():
            await asyncio.sleep(CANCEL_POLL_S)
            try:
                if await self.store.cancel_requested(run_id):
                    cancel.set()
            except Exception as e:
                log.warning("cancel poll failed: %s", e, exc_info=not isinstance(e, EagleError))

    def _context(self, pb: Playbook, host: str, inputs: dict[str, Any], run_id: int, req: RunRequest
                 ) -> dict[str, Any]:
        """Flat variables for one host. Priority: user inputs > host vars > input defaults > vars."""
        hostvars = self.settings.hosts[host].vars
        layers: list[dict[str, Any]] = [
            {"host": host, "run_id": run_id, "playbook": pb.name, "dry_run": req.dry_run},
            dict(pb.vars),
            {k: s.default for k, s in pb.inputs.items() if s.default is not None},
            dict(hostvars),
            dict(inputs),
        ]
        flat: dict[str, Any] = {}
        for layer in layers:
            flat.update(layer)
        # Defaults and vars may refer to each other ("{{ draft }}/config.json"). Each template
        # is rendered once, from the playbook's or config's text, against values that are
        # already final: a user's value is data and is never compiled as a template.
        pending = {k: v for k, v in flat.items() if k not in inputs and templating.contains_template(v)}
        for k in pending:
            del flat[k]
        while pending:
            progress = False
            for k, v in list(pending.items()):
                if templating.names_used(v) & set(pending):
                    continue  # wait for the vars it uses
                try:
                    flat[k] = templating.render_value(v, flat)
                except templating.TemplateFailure as e:
                    flat[k] = templating.unresolved(k, str(e))
                del pending[k]
                progress = True
            if not progress:  # a cycle: each of them is an error when a step uses it
                for k in pending:
                    flat[k] = templating.unresolved(k, f"{k!r} refers to itself through "
                                                       f"{', '.join(sorted(pending))}")
                break
        for k, v in list(flat.items()):
            if templating.is_unresolved(v):
                missing = [n for n in templating.names_used(layers_value(layers, k)) if n not in flat]
                if missing:
                    flat[k] = templating.unresolved(
                        k, f"host var `{missing[0]}` is not set on {host} (needed by `{k}`)")
        return flat

    async def _run_host(self, run: RunState, host: str, ctx: dict[str, Any]) -> None:
        higher = set(ctx)  # registered results never shadow inputs or vars
        stop_reason: str | None = None
        pb = run.playbook
        n = len(pb.steps)
        for section, steps, offset in (("steps", pb.steps, 0), ("always", pb.always, n)):
            for i, step in enumerate(steps):
                slot = StepSlot(host, offset + i, section, step)
                if section == "steps" and (stop_reason or run.cancel.is_set() or run.store_error):
                    reason = stop_reason or ("the audit store failed" if run.store_error else "the run was cancelled")
                    run.outcome.steps.append(await self._record_skipped(run, slot, f"not run: {reason}"))
                    continue
                rec, result = await self._run_step(run, slot, ctx)
                run.outcome.steps.append(rec)
                if step.register_ and step.register_ not in higher:
                    ctx[step.register_] = result.registered()
                if rec.status == "failed":
                    if step.continue_on_error:
                        rec.tolerated = True
                        msg = f"{rec.name} failed (continue_on_error): {rec.summary}"
                        run.outcome.warnings.append(f"{host}: {msg}")
                        await self._record(run, self.store.add_warning(run.run_id, host, msg))
                    elif section == "steps" and not stop_reason and not run.req.dry_run:
                        # (a dry run goes on: every step shows its plan even when a probe failed)
                        stop_reason = ("the run was cancelled" if run.cancel.is_set()
                                       else f"step {rec.name!r} failed")

    async def _record_skipped(self, run: RunState, slot: StepSlot, summary: str) -> StepRecord:
        step = slot.step
        sid = await self._record(run, self.store.step_started(run.run_id, slot.idx, slot.host, step.label,
                                                              step.skill, {}, slot.section))
        if sid is not None:
            await self._record(run, self.store.step_finished(sid, run_id=run.run_id, host=slot.host, status="skipped",
                                                             summary=summary, duration_ms=0, attempts=0))
        return StepRecord(slot.host, slot.idx, slot.section, step.label, step.skill, "skipped", summary, 0, 0,
                          step_id=sid)

    def _render(self, step: Step, ctx: dict[str, Any]) -> tuple[ModuleType, dict[str, Any]]:
        mod = self.registry.get_skill(step.skill)
        fields = mod.Params.model_fields
        rendered = {}
        for k, v in step.with_.items():
            extra = fields[k].json_schema_extra if k in fields else None
            shell = bool(isinstance(extra, dict) and extra.get("shell"))
            rendered[k] = templating.render_value(v, ctx, shell=shell)
        return mod, rendered

    async def _prepare_step(self, run: RunState, slot: StepSlot, ctx: dict[str, Any]
                            ) -> Ready | tuple[StepRecord, StepResult]:
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
                await _safe(run.observer.step_finished(run.run_id, rec, res))
                return rec, res
        rendered: dict[str, Any] = {}
        try:
            mod, rendered = self._render(step, ctx)
            return Ready(mod, mod.Params.model_validate(rendered))
        except templating.TemplateFailure as e:
            return await self._failed_before_start(run, slot, str(e))
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            return await self._failed_before_start(run, slot, f"invalid parameter {loc}: {err['msg']}",
                                                   params=rendered)

    async def _run_step(self, run: RunState, slot: StepSlot, ctx: dict[str, Any]
                        ) -> tuple[StepRecord, StepResult]:
        prepared = await self._prepare_step(run, slot, ctx)
        if not isinstance(prepared, Ready):
            return prepared
        mod, params = prepared.skill, prepared.params
        step, host, label = slot.step, slot.host, slot.step.label
        sid = await self._record(run, self.store.step_started(
            run.run_id, slot.idx, host, label, step.skill, self.redactor.obj(params.model_dump(mode="json")),
            slot.section))
        if sid is None and slot.section == "steps":  # no row, no run: a step never runs unaudited
            rec = StepRecord(host, slot.idx, slot.section, label, step.skill, "failed",
                             f"not run: the audit store failed: {run.store_error}")
            res = StepResult.failed(rec.summary)
            await _safe(run.observer.step_finished(run.run_id, rec, res))
            return rec, res
        rec = StepRecord(host, slot.idx, slot.section, label, step.skill, "running", step_id=sid)
        await _safe(run.observer.step_started(run.run_id, rec))

        async def write(text: str) -> None:
            if sid is None:
                return  # an always-step the failing store could not record: its output goes to the views only
            try:
                await self.store.step_output(sid, text)
            except StoreError as e:
                run.store_failed(e)
                raise

        path = (self.settings.output_root / self.store.sync.db_id / str(run.run_id) / f"{sid}.gz"
                if sid is not None else None)
        out = OutputBuffer(self.redactor, write, lambda line: run.observer.step_output(run.run_id, rec, line),
                           keep_bytes=self.settings.output_keep_bytes, path=path, run_id=run.run_id)
        t0 = time.monotonic()
        out.start()
        beat = asyncio.create_task(self._heartbeat(run, rec, out, t0))
        try:
            result, attempts = await self._attempts(run, slot, ctx, mod, params, out, sid)
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
        result.warnings = [printable(self.redactor.text(w)) for w in result.warnings]
        for c in result.changes:  # a patched config may hold a token: never into changes.diff
            c.diff, c.path = printable(self.redactor.text(c.diff)), printable(self.redactor.text(c.path))
        for r in result.regressions:
            r.host = r.host or host
        recorded = sid is not None and await self._wrote(run, self.store.step_finished(
            sid, run_id=run.run_id, host=host, status=result.status, summary=result.summary,
            duration_ms=duration_ms, attempts=attempts,
            data=printable_obj(self.redactor.obj(_jsonable(result.data))),
            metrics=result.metrics, changes=result.changes, warnings=result.warnings,
            regressions=result.regressions,
            output=out.stored_text() + ("\n" + result.output if result.output else ""),
            output_bytes=out.nbytes, output_sha256=out.sha256,
            output_file=str(out.file) if out.file is not None else None))
        if not recorded:
            result.summary = f"{result.summary} (not recorded: the audit store failed)"
            log.error("%s: step %r ended %s but could not be recorded: %s", host, label, result.status,
                      run.store_error)
        rec.status, rec.summary, rec.duration_ms, rec.attempts = result.status, result.summary, duration_ms, attempts
        rec.output_tail = out.tail(30) if not result.output else result.output[-4000:]
        run.outcome.metrics.extend((host, m) for m in result.metrics)
        run.outcome.warnings.extend(f"{host}: {w}" for w in result.warnings)
        run.outcome.regressions.extend(result.regressions)
        await _safe(run.observer.step_finished(run.run_id, rec, result))
        return rec, result

    async def _heartbeat(self, run: RunState, rec: StepRecord, out: OutputBuffer, t0: float) -> None:
        """Every `heartbeat_s` while the step runs: its elapsed time and last output line."""
        while True:
            await asyncio.sleep(self.heartbeat_s)
            await _safe(run.observer.step_heartbeat(run.run_id, rec, time.monotonic() - t0, out.tail(1)))

    async def _attempts(self, run: RunState, slot: StepSlot, ctx: dict[str, Any], mod: ModuleType,
                        params: SkillParams, out: OutputBuffer, sid: int | None) -> tuple[StepResult, int]:
        """The first attempt and each retry; `always` steps ignore the run's cancellation."""
        step = slot.step
        cancel = None if slot.section == "always" else run.cancel

        async def approve(ar: ApprovalRequest) -> tuple[bool, str]:
            return await self._approve(ar, run.req, run.approver)

        attempts = 0
        while True:
            attempts += 1
            if attempts > 1 and sid is not None:
                await self._record(run, self.store.step_attempt(sid, attempts))
            sctx = SkillContext(
                host=self.pool.get(slot.host), host_name=slot.host, vars=ctx, run_id=run.run_id,
                step_idx=slot.idx, step_name=step.label, dry_run=run.req.dry_run, confirm=step.confirm,
                state_dir=self.settings.state_dir, audit=self.store, _log=out.line, _log_text=out.text,
                _approve=approve)
            sp, token = procs.begin(self.store, run.run_id, sid)
            left = ""
            try:
                result, cancelled_here = await self._attempt(mod, sctx, params, step, cancel)
            finally:
                left = await procs.end(self.store, sp, token, run.run_id, sid, slot.host,
                                       None if run.req.dry_run else self.pool.get(slot.host))
            if left:
                result.warnings.append(left)
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

    async def _attempt(self, mod: Any, sctx: SkillContext, params: Any, step: Step,
                       cancel: asyncio.Event | None) -> tuple[StepResult, bool]:
        """One attempt of a skill, bounded by timeout_s and the run's cancellation."""
        task = asyncio.create_task(mod.run(sctx, params))
        waiters = {task}
        cancel_wait = asyncio.create_task(cancel.wait()) if cancel else None
        if cancel_wait:
            waiters.add(cancel_wait)
        try:
            done, _ = await asyncio.wait(waiters, timeout=step.timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if cancel_wait:
                cancel_wait.cancel()
        if task in done:
            try:
                res = task.result()
            except EagleError as e:  # StepFailed, TransportError, …: their text is the summary
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

    async def _failed_before_start(self, run: RunState, slot: StepSlot, message: str,
                                   params: dict[str, Any] | None = None) -> tuple[StepRecord, StepResult]:
        step = slot.step
        sid = await self._record(run, self.store.step_started(
            run.run_id, slot.idx, slot.host, step.label, step.skill, self.redactor.obj(_jsonable(params or {})),
            slot.section))
        message = self.redactor.text(message)
        if sid is not None:
            await self._record(run, self.store.step_finished(sid, run_id=run.run_id, host=slot.host, status="failed",
                                                             summary=message, duration_ms=0, attempts=0))
        rec = StepRecord(slot.host, slot.idx, slot.section, step.label, step.skill, "failed", message, 0, 0,
                         step_id=sid)
        res = StepResult.failed(message)
        await _safe(run.observer.step_finished(run.run_id, rec, res))
        return rec, res

    async def _approve(self, ar: ApprovalRequest, req: RunRequest, approver: Approver | None) -> tuple[bool, str]:
        aid = await self.store.approval_requested(ar.run_id, ar.step_idx, ar.host, ar.step, ar.action,
                                                  [self.redactor.text(d) for d in ar.details])
        if req.assume_yes:
            ok, who = True, f"{req.actor} (--yes)"
        elif approver is None:
            ok, who = False, ("nobody to ask: pass --yes to approve" if req.origin == "cli"
                              else "nobody to ask: the schedule does not say approve: true")
        else:
            try:
                ok, who = await asyncio.wait_for(approver(ar), self.settings.access.approval_timeout_s)
            except asyncio.TimeoutError:
                await self.store.approval_decided(aid, "timeout", "")
                return False, f"no decision within {self.settings.access.approval_timeout_s:g}s"
        await self.store.approval_decided(aid, "approved" if ok else "denied", who)
        return ok, who


_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.,/-]{0,127}$")


def plain_name(name: str) -> str:
    """A run, host or input name as stored or echoed: as given when it is a plain name, else
    a placeholder (a name is never a vehicle for control characters, markup or a bomb)."""
    return name if _PLAIN.match(name) else "(invalid name)"


def layers_value(layers: list[dict[str, Any]], key: str) -> Any:
    """The highest-priority raw (unrendered) value of `key` among the variable layers."""
    for layer in reversed(layers):
        if key in layer:
            return layer[key]
    return None


def _jsonable(v: Any) -> Any:
    if templating.is_unresolved(v):
        return None
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items() if not templating.is_unresolved(x)}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)  # a Path, a datetime, …
