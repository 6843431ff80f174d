"""The engine: one entry point (`Engine.run`) for the CLI, Slack, console and scheduler.

Per host, steps run in order; hosts run concurrently (bounded). Every step row is
written before the step runs and again when it ends; the run row exists before any
step. Slack and the terminal are observers: their failures never fail a run.
This module is the run's lifecycle (prepare, lock, run each host, post-run hooks, record
the end); one step is `steps`, one attempt `attempts`, the run's records `records`.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Awaitable, Callable, TYPE_CHECKING

from eaglebot.engine import hostvars, limits, procs, rolling
from eaglebot.facts.host import paths
from eaglebot.config import Settings
from eaglebot.engine.quarantine import health_guard
from eaglebot.errors import AccessDenied, EagleError, HostBusy, HostUnreachable, StoreError, UsageError
from eaglebot.engine.context import host_context, missing_var_error
from eaglebot.engine.playbook import Playbook, find_playbook, resolve_inputs
from eaglebot.engine.output import printable
from eaglebot.engine.records import (CHAT_ORIGINS, Approver, Observer, Prepared, RunOutcome, RunRequest, RunState, StepRecord,
                                     StepSlot, Tee, jsonable, plain_name, safe)
from eaglebot.engine.redact import Redactor
from eaglebot.engine.registry import SkillRegistry
from eaglebot.engine.steps import StepRunner, shell_param
from eaglebot.sdk import PATH_VARS, ApprovalRequest, Regression, StepResult, expand_home
from eaglebot.store.rows import NewRun
from eaglebot.transport import TransportPool

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import EngineStore

# Names the front ends and tests import from here, the engine's one entry point.
__all__ = ["Approver", "Engine", "HEARTBEAT_S", "Observer", "PostRunHook", "PreRunHook", "RunOutcome",
           "RunRequest", "StepRecord", "plain_name", "takes_locks"]

log = logging.getLogger("eaglebot.engine")

PostRunHook = Callable[["Engine", RunOutcome, Playbook], Awaitable[list[Regression]]]
# Before a run that changes its hosts: what an interrupted experiment left there is finished
# first (tuning/interrupted.py); each sentence returned is a warning of the run.
PreRunHook = Callable[["Engine", RunRequest, list[str]], Awaitable[list[str]]]

CANCEL_POLL_S = 1.0
HEARTBEAT_S = 10.0   # a sign of life (elapsed time, last output line) while a step runs longer


def takes_locks(pb: Playbook, registry: SkillRegistry) -> bool:
    """A run locks its hosts unless every step's skill declares `READ_ONLY = True` (it
    changes nothing on the host, e.g. server.logs): reading a log must work while a
    relaunch holds the host."""
    return not all(registry.read_only(s.skill) for s in [*pb.steps, *pb.always])


class Engine(StepRunner):
    def __init__(self, settings: Settings, store: Door[EngineStore], pool: TransportPool | None = None,
                 *, redactor: Redactor | None = None, registry: SkillRegistry | None = None):
        self.settings = settings
        self.registry = registry if registry is not None else SkillRegistry.from_settings(settings)
        self.store = store
        self.pool = pool or TransportPool(settings)
        self.redactor = redactor or Redactor(settings.redact)
        self.post_run_hooks: list[PostRunHook] = []
        self.pre_run_hooks: list[PreRunHook] = []
        # Observers of every run of this engine besides its own (`eagle serve`'s log lines, metrics).
        self.watchers: list[Observer] = []
        self._cancel_events: dict[int, asyncio.Event] = {}
        self.heartbeat_s = HEARTBEAT_S
        self._unreleased: set[int] = set()  # runs whose host locks a failing store kept
        self._unfinished: dict[int, RunOutcome] = {}  # runs whose end a failing store did not take
        # One cap across every run of this process (`max_hosts_total`), besides each run's own.
        self._all_hosts = asyncio.Semaphore(settings.max_hosts_total)


    # -- preparing ---------------------------------------------------------------------
    def prepare(self, req: RunRequest) -> Prepared:
        """Everything that can be checked before touching a host; raises UsageError."""
        pb = req.playbook if isinstance(req.playbook, Playbook) else find_playbook(
            req.playbook, self.settings.playbooks_path, self.registry)
        self.authorize(pb.name, req.actor, req.origin)
        hosts = self.settings.resolve_hosts(req.hosts)
        inputs = resolve_inputs(pb, req.inputs)
        # A key file that is not there is the config's mistake, not the host's: one sentence, no connect tries.
        for h in hosts:
            if (bad_key := self.settings.key_problem(h)) is not None:
                raise UsageError(f"host {h}: {bad_key}")
        # A variable nobody set fails the request before any step on any host; a dry run goes
        # on (it shows every step's plan) and the step that needs it fails with the same words.
        for h in hosts if not req.dry_run else []:
            ctx = host_context(self.settings.hosts[h].vars, pb, h, inputs, 0, req.dry_run)
            missing = missing_var_error(pb, ctx, h, lambda skill, key: shell_param(self.registry, skill, key))
            if missing:
                raise UsageError(missing)
        warnings = hostvars.run_warnings(pb, self.registry, self.settings.playbooks_path,
                                         {h: self.settings.hosts[h].vars for h in hosts})
        batch = req.batch if req.batch is not None else (
            str(pb.batch) if pb.batch is not None and len(hosts) > pb.batch_above else None)
        max_fail = req.max_fail if req.max_fail is not None else (
            str(pb.max_fail) if pb.max_fail is not None else None)
        if batch is not None:
            batch = rolling.check_amount(batch, "--batch", zero_ok=False)
        if max_fail is not None:
            max_fail = rolling.check_amount(max_fail, "--max-fail", zero_ok=True)
        return Prepared(pb, hosts, inputs, batch, max_fail, warnings)

    def authorize(self, playbook: str, actor: str, origin: str) -> None:
        """The one check of a playbook's allowlist (`access.playbooks`): every run any word starts
        passes here (`prepare`), and the tuning words call it up front for the playbooks they act
        for, before they record anything. Raises AccessDenied."""
        if origin in CHAT_ORIGINS and (why := self.settings.access.playbook_refusal(playbook, actor)):
            raise AccessDenied(why)

    async def authorized(self, playbooks: list[str], actor: str, origin: str, text: str) -> None:
        """`authorize` each of `playbooks` for a word that acts for them before its first run (a
        tuning, a bisect, an apply); a refusal is audited (`access_denied`), then raised."""
        for name in playbooks:
            try:
                self.authorize(name, actor, origin)
            except AccessDenied as e:
                await self.record_rejected(RunRequest(name, actor=actor, origin=origin, text=text), e)
                raise

    def _drain_limit(self) -> int | None:
        cfg = self.settings.health_watch
        if cfg is None:
            return None
        # Here, not at the top: the watch's decisions (and the health facts they read) are not
        # loaded by a run in a deployment without a health watch (`eagle run` starts faster).
        from eaglebot.engine.fleet_health import breaker_limit

        return breaker_limit(len(self.settings.resolve_hosts(cfg.hosts)), cfg.max_quarantined_pct)

    async def record_rejected(self, req: RunRequest, err: EagleError) -> None:
        """A request refused before running (unknown playbook or host, invalid input, busy host)
        is an `events` row of kind `rejected` (`access_denied` for a user off a playbook's
        allowlist): who, what they typed, why. Not a run row, so history and statistics hold
        only runs that ran."""
        name = req.playbook.name if isinstance(req.playbook, Playbook) else str(req.playbook)
        # names are stored only when plain (a token or a control character in a name is not echoed)
        text = req.text or " ".join([plain_name(name), ",".join(plain_name(str(h)) for h in req.hosts or []),
                                     *(f"{plain_name(str(k))}={str(v)[:limits.MAX_VALUE_BYTES]}"
                                       for k, v in req.inputs.items()),
                                     *(["--dry-run"] if req.dry_run else [])]).replace("  ", " ")
        # What was typed may hold bytes that are not text (the reason it is refused): escaped, storable.
        kind = "access_denied" if isinstance(err, AccessDenied) else "rejected"
        await self.store.call(lambda s: s.add_rejection(kind, printable(req.actor),
                                                        self.redactor.text(printable(text.strip()))[:500],
                                                        self.redactor.text(printable(str(err))), req.rerun_of))

    async def ask_approval(self, ar: ApprovalRequest, req: RunRequest,
                           approver: Approver | None) -> tuple[bool, str]:
        """An approval outside a step (a tuning's relaunch with its result): the same rows, timeout
        and `--yes` as a `confirm` step's."""
        return await self._approve(ar, req, approver)

    async def start(self, req: RunRequest, observer: Observer | None = None,
                    approver: Approver | None = None) -> tuple[int, asyncio.Task[RunOutcome]]:
        """Create the run row and lock its hosts, then run it in a background task.

        Raises UsageError/HostBusy (after recording the rejection) when it cannot start.
        """
        try:
            prep = self.prepare(req)
            prep = await health_guard(self.store, req, prep, self._drain_limit())
        except UsageError as e:
            await self.record_rejected(req, e)
            raise
        if self._unfinished or self._unreleased:
            await self._retry_unrecorded()
        lock = prep.hosts if not req.dry_run and takes_locks(prep.playbook, self.registry) else []
        for hook in self.pre_run_hooks if lock else []:
            prep.warnings += await hook(self, req, lock)
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

    @property
    def busy(self) -> bool:
        """A run started here has not ended yet."""
        return bool(self._cancel_events)

    def cancel(self, run_id: int) -> bool:
        ev = self._cancel_events.get(run_id)
        if ev is None:
            return False
        ev.set()
        return True

    async def _create(self, req: RunRequest, prep: Prepared, lock: list[str]) -> int:
        pb = prep.playbook
        return await self.store.call(lambda s: s.start_run(lock, NewRun(
            playbook=pb.name, hosts=prep.hosts, inputs=self.redactor.obj(prep.inputs),
            variables={}, actor=req.actor, origin=req.origin, dry_run=req.dry_run,
            rerun_of=req.rerun_of, schedule=req.schedule, channel=req.channel,
            thread_ts=req.thread_ts, source=pb.source, parent_run_id=req.parent_run_id)))

    # -- executing -----------------------------------------------------------------------
    async def _execute(self, run_id: int, req: RunRequest, prep: Prepared, observer: Observer,
                       approver: Approver | None) -> RunOutcome:
        pb = prep.playbook
        if self.watchers:
            observer = Tee(observer, self.watchers)
        run = RunState(run_id, req, pb, observer, approver,
                       self._cancel_events.setdefault(run_id, asyncio.Event()),
                       RunOutcome(run_id, pb.name, prep.hosts, "running", 0, dry_run=req.dry_run))
        outcome = run.outcome
        poller = asyncio.create_task(self._poll_cancel(run_id, run.cancel))
        try:
            await safe(observer.run_started(run_id, pb, prep.hosts, req))
            contexts = {h: host_context(self.settings.hosts[h].vars, pb, h, prep.inputs, run_id, req.dry_run)
                        for h in prep.hosts}
            await self._record(run, self.store.call(lambda s: s.save_vars(
                run_id, {h: self.redactor.obj(jsonable(c)) for h, c in contexts.items()})))
            for msg in prep.warnings:
                msg = self.redactor.text(msg)
                outcome.warnings.append(msg)
                await self._record(run, self.store.call(lambda s: s.add_warning(run_id, "", msg)))
            cap = self.settings.max_parallel_hosts
            sem = asyncio.Semaphore(cap) if cap else None

            async def one(host: str) -> None:
                async with (sem or contextlib.nullcontext()), self._all_hosts:
                    if not await self._reach(run, host):
                        return
                    if not req.dry_run:
                        await self._clear_pending(run, host)
                    await self._run_host(run, host, contexts[host])

            await self._rolling(run, prep, one)
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
            await asyncio.shield(self._finish(run_id, outcome))
            await safe(observer.run_finished(outcome))
        return outcome

    async def _rolling(self, run: RunState, prep: Prepared, one: Callable[[str], Awaitable[None]]) -> None:
        """All hosts at once, or batch after batch (`--batch`) while the failure budget
        (`--max-fail`) holds; the hosts of the batches not started are `untouched`."""
        groups = rolling.batches(prep.hosts, prep.batch)
        allowed = rolling.budget(prep.max_fail, len(prep.hosts))
        for i, group in enumerate(groups):
            bad = run.outcome.bad_hosts()
            if i and (len(bad) > allowed or run.cancel.is_set() or run.store_error):
                run.outcome.untouched = [h for g in groups[i:] for h in g]
                why = (f"{len(bad)} host(s) failed, more than --max-fail {prep.max_fail} allows"
                       if len(bad) > allowed else
                       "the run was cancelled" if run.cancel.is_set() else "the audit store failed")
                msg = (f"{why}: no new batch started; {len(run.outcome.untouched)} host(s) untouched: "
                       f"{', '.join(run.outcome.untouched)}")
                run.outcome.warnings.append(msg)
                said = self.redactor.text(msg)
                await self._record(run, self.store.call(lambda s: s.add_warning(run.run_id, "", said)))
                return
            await asyncio.gather(*(one(h) for h in group))

    async def _reach(self, run: RunState, host: str) -> bool:
        """Open the host's connection before its first step (the connect retries are the
        transport's); a host still out of reach is `unreachable`: its first step's row says
        why, the others are skipped. False then."""
        try:
            await self.pool.reach(host)
            return True
        except HostUnreachable as e:
            why = self.redactor.text(str(e))
        except Exception:  # a host key, a login, a missing known_hosts: the first step says so
            return True
        pb = run.playbook
        n = len(pb.steps)
        slots = [StepSlot(host, i, "steps", s) for i, s in enumerate(pb.steps)] + [
            StepSlot(host, n + i, "always", s) for i, s in enumerate(pb.always)]
        for k, slot in enumerate(slots):
            rec = await self._record_skipped(run, slot, why if k == 0 else "not run: the host is unreachable",
                                             status="unreachable" if k == 0 else "skipped")
            run.outcome.steps.append(rec)
            if k == 0:
                await safe(run.observer.step_finished(run.run_id, rec, StepResult.failed(why)))
        return False

    async def _clear_pending(self, run: RunState, host: str) -> None:
        """Stop what an earlier run left behind on host (it crashed, or lost the host)."""
        try:
            msgs = await procs.clear_pending(self.store, self.pool.get(host), run.run_id, host)
        except Exception as e:  # the host's first step says why the host cannot be reached
            msgs = [f"leftover processes of earlier runs could not be checked: {e}"]
        for m in msgs:
            m = self.redactor.text(m)
            run.outcome.warnings.append(f"{host}: {m}")
            await self.store.call(lambda s: s.add_warning(run.run_id, host, m))

    async def _post_run(self, run: RunState) -> None:
        """Post-run hooks (the history check): their failure is a warning, never a failed run."""
        for hook in self.post_run_hooks:
            try:
                extra = await hook(self, run.outcome, run.playbook)
            except Exception as e:
                log.warning("post-run hook failed: %s", e, exc_info=not isinstance(e, EagleError))
                msg = self.redactor.text(f"regression check failed: {e}")
                run.outcome.warnings.append(msg)
                # the views read the store
                await self._record(run, self.store.call(lambda s: s.add_warning(run.run_id, "", msg)))
                continue
            for r in extra:
                run.outcome.regressions.append(r)
                await self._record(run, self.store.call(lambda s: s.add_regression(run.run_id, r)))

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
                await self.store.call(lambda s: s.release_hosts(run_id))
            except StoreError as e:
                # Retried before the next run starts; freed anyway once this process is gone.
                self._unreleased.add(run_id)
                log.error("run #%s: could not free its host locks: %s", run_id, e)

    async def _record_end(self, run_id: int, outcome: RunOutcome) -> None:
        error = self.redactor.text(outcome.error) if outcome.error else None
        await self.store.call(lambda s: s.finish_run(run_id, outcome.status, exit_code=outcome.exit_code, error=error))
        # A step whose end was never recorded must not stay `running`; its summary says why.
        await self.store.call(lambda s: s.close_open_steps(run_id, self.redactor.text(_unfinished_step(outcome))))

    async def _retry_unrecorded(self) -> None:
        """What a failing store could not take (a run's end, its host locks), once it works again."""
        try:
            for rid, outcome in list(self._unfinished.items()):
                await self._record_end(rid, outcome)
                del self._unfinished[rid]
            for rid in list(self._unreleased):
                await self.store.call(lambda s: s.release_hosts(rid))
                self._unreleased.discard(rid)
        except StoreError:
            pass  # still failing: the new run will say so

    async def _poll_cancel(self, run_id: int, cancel: asyncio.Event) -> None:
        """Cancellation may come from another process (`eagle cancel`, the bot): poll the DB."""
        while not cancel.is_set():
            await asyncio.sleep(CANCEL_POLL_S)
            try:
                if await self.store.call(lambda s: s.cancel_requested(run_id)):
                    cancel.set()
            except Exception as e:
                log.warning("cancel poll failed: %s", e, exc_info=not isinstance(e, EagleError))

    async def _resolve_paths(self, run: RunState, host: str) -> str | None:
        """Ask the host for its home and to make and name the state folder (`state_dir`: `~` and
        $VARS are the host's), once per run; None, or why it could not (the host's first step
        fails with it, its `always:` steps still run, without a state folder)."""
        state_dir = self.settings.state_dir
        # A dry run, or a run whose skills all only read (server.logs), names the folder and makes nothing.
        create = not run.req.dry_run and takes_locks(run.playbook, self.registry)
        try:
            res = await self.pool.get(host).run(paths.command(state_dir, create=create), timeout=60)
        except EagleError as e:   # a host key, a login, a dropped connection: the transport's own sentence
            return str(e)
        try:
            run.paths[host] = paths.parse(res.stdout)
            return None
        except ValueError as e:
            last = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or [f"exit status {res.exit_status}"]
            why = f"{e}: {last[0][:300]}"
        return (f"the state folder {state_dir!r} (state_dir in eagle.yaml) could not be made on {host}: {why}; "
                f"set state_dir to a folder the login user may write")

    async def _run_host(self, run: RunState, host: str, ctx: dict[str, Any]) -> None:
        higher = set(ctx)  # registered results never shadow inputs or vars
        stop_reason: str | None = None
        pb = run.playbook
        n = len(pb.steps)
        no_paths = await self._resolve_paths(run, host)
        if no_paths is None:
            for k in PATH_VARS & set(ctx):
                if isinstance(ctx[k], str):
                    ctx[k] = expand_home(ctx[k], run.paths[host].home)
        for section, steps, offset in (("steps", pb.steps, 0), ("always", pb.always, n)):
            for i, step in enumerate(steps):
                slot = StepSlot(host, offset + i, section, step)
                if no_paths is not None and section == "steps" and not stop_reason:
                    rec, _ = await self._failed_before_start(run, slot, no_paths)
                    run.outcome.steps.append(rec)
                    stop_reason = "the host's state folder could not be made"
                    continue
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
                        await self._record(run, self.store.call(lambda s: s.add_warning(run.run_id, host, msg)))
                    elif section == "steps" and not stop_reason and not run.req.dry_run:
                        # (a dry run goes on: every step shows its plan even when a probe failed)
                        stop_reason = ("the run was cancelled" if run.cancel.is_set()
                                       else f"step {rec.name!r} failed")


def _unfinished_step(outcome: RunOutcome) -> str:
    """The summary of a step the run left `running`: the store failing took its end, a crash
    (an internal error) or a cancellation stopped the run before it ended."""
    if outcome.status == "cancelled":
        return "not finished: the run was cancelled"
    if outcome.error and not outcome.error.startswith("the audit store failed"):
        return f"not finished: the run stopped: {outcome.error}"
    return "not recorded: the audit store failed while it ran"
