"""Scheduled runs: APScheduler 3.x jobs from the config's `schedules:`.

Each job calls the same engine entry point as the CLI and Slack (origin "schedule"),
waits for the run, posts regressions and uploads a trend plot of the run's key metric
(`eaglebot.history.view.key_metric`) to the run's thread.
APScheduler's memory job store forgets fires missed while the bot was down, so misfires
are derived from the audit store at start: the schedule's last run or recorded fire
against the cron's fire times since. Nothing a job does may crash the scheduler.

Hooks (`eagle serve` passes Slack's; without hooks everything goes to the log):
    observer(schedule_cfg) -> eaglebot.engine.runner.Observer
    async post(channel, text)
    async upload(channel, thread_ts, path, title)
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Coroutine, Protocol, TYPE_CHECKING

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from eaglebot.config import ScheduleConfig, Settings
from eaglebot.errors import EagleError, HostBusy, HostQuarantined, UsageError
from eaglebot.frontends.cron import fires_between, fmt_utc, iso_utc, next_fire, slot_at, trigger_for, when
from eaglebot.engine.playbook import Playbook
from eaglebot.engine.schedules import TUNE, check_schedules
from eaglebot.frontends.service import schedule_tune
from eaglebot.engine.runner import Observer, RunOutcome, RunRequest, StepRecord
from eaglebot.frontends.format import fmt_time, table
from eaglebot.frontends.schedule_alarm import ALARM, ALARM_CHECK_S, alarm_text, overdue, reference, since
from eaglebot.frontends.schedule_view import schedule_rows, schedule_state
from eaglebot.frontends.services import Services
from eaglebot.history.view import RunView
from eaglebot.sdk import StepResult
from eaglebot.store import now_iso, open_store, parse_iso

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import ScheduleReads, SchedulerStore

log = logging.getLogger("eaglebot.scheduler")

MAX_MISSED_LISTED = 50
ALARM_JOB = "eaglebot-missing-run-alarm"


class Hooks(Protocol):
    def observer(self, schedule: ScheduleConfig) -> Observer: ...

    async def post(self, channel: str | None, text: str) -> str | None: ...

    async def upload(self, channel: str | None, thread_ts: str | None, path: Path, title: str) -> None: ...


# -- listing ---------------------------------------------------------------------------

def _next_fire_text(row: dict[str, Any]) -> str:
    """A cron fires on a minute; an `every: 30s` to the second, which the minute alone would hide."""
    d = parse_iso(row["next_fire"]) if row["every"] else None
    return d.strftime("%Y-%m-%d %H:%M:%S") if d is not None else fmt_time(row["next_fire"])


def schedule_list_main(settings: Settings, as_json: bool = False, store: ScheduleReads | None = None) -> int:
    """`eagle schedule list`; `store`: the one to read (the caller's, which closes it), else
    the config's."""
    if store is None:
        own = open_store(settings.audit_store, key_file=settings.audit_key_path)
        try:
            return schedule_list_main(settings, as_json, own)
        finally:
            own.close()
    try:
        rows = schedule_rows(settings, store)
    except UsageError as e:
        print(f"eagle: {e}", file=sys.stderr)
        return e.exit_code
    problems = [p for r in rows for p in r["errors"]]
    for p in problems:
        print(f"eagle: {p}", file=sys.stderr)
    code = 2 if problems else 0
    if as_json:
        print(json.dumps(rows, indent=2))
        return code
    if not rows:
        print("no schedules configured (add `schedules:` to eagle.yaml)")
        return 0
    print(table(["name", "playbook", "hosts", "cron", "next fire (UTC)", "last run", "state"],
                [[r["name"], r["playbook"], ",".join(r["hosts"]) or "(default)",
                  when(r["cron"], r["every"], r["timezone"]), _next_fire_text(r),
                  f"#{r['last_run_id']} {r['last_status']}" if r["last_run_id"] else "-", schedule_state(r)]
                 for r in rows]))
    return code


# -- default hooks: the log ---------------------------------------------------------------

class _LogObserver(Observer):
    def __init__(self, name: str):
        self.name = name

    async def run_started(self, run_id: int, playbook: Playbook, hosts: list[str], req: RunRequest) -> None:
        log.info("schedule %s: run #%s %s on %s started", self.name, run_id, playbook.name, ",".join(hosts))

    async def step_finished(self, run_id: int, rec: StepRecord, result: StepResult) -> None:
        log.info("schedule %s: run #%s [%s] %s: %s %s", self.name, run_id, rec.host, rec.name, rec.status,
                 rec.summary)

    async def run_finished(self, outcome: RunOutcome) -> None:
        log.info("schedule %s: run #%s %s", self.name, outcome.run_id, outcome.status)


class LogHooks:
    """Used when no front end supplies hooks: everything goes to the log."""

    text_summaries = True

    def observer(self, schedule: ScheduleConfig) -> Observer:
        return _LogObserver(schedule.name)

    async def post(self, channel: str | None, text: str) -> str | None:
        log.warning("[%s] %s", channel or "-", text)
        return None

    async def upload(self, channel: str | None, thread_ts: str | None, path: Path, title: str) -> None:
        log.info("[%s] trend plot %s: %s", channel or "-", title, path)


# -- the scheduler -------------------------------------------------------------------------

def _describe(cfg: ScheduleConfig) -> str:
    return f"{cfg.playbook} on {', '.join(cfg.hosts) if cfg.hosts else 'the default hosts'}"


def outcome_summary(cfg: ScheduleConfig, v: RunView, audit_head: str | None = None) -> str:
    lines = [f"scheduled run {cfg.name}: run #{v.run_id} {v.playbook} on {', '.join(v.hosts)}: {v.status}"]
    if v.error and v.status != "succeeded":
        lines.append(f"error: {v.error}")
    for m in v.metrics:
        lines.append(f"  {m['host']}: {m['name']} = {m['value']:g} {m['unit'] or ''}".rstrip())
    if audit_head:  # the anchor outside the DB (`eagle audit verify --head HASH`)
        lines.append(f"audit head: {audit_head}")
    return "\n".join(lines)


ANCHOR_JOB = "_audit_anchor"


class Scheduler:
    """The bot's schedules. `start()` inside the running loop; `shutdown()` to stop."""

    def __init__(self, services: Services, hooks: Hooks | None = None, holder: str | None = None):
        """`holder`: who claims the fires (the replica's id; default this process)."""
        self.services = services
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        # Whether this replica may fire now (serve: the leader's term has not run out): a
        # replica frozen past its term does not start fires before its loop steps it down.
        self.leading: Callable[[], bool] = lambda: True
        self.settings: Settings = services.settings
        self.hooks = hooks or LogHooks()
        self._cfgs = {c.name: c for c in self.settings.schedules}
        if len(self._cfgs) != len(self.settings.schedules):
            raise UsageError("schedules: two schedules have the same name")
        self._triggers = {name: trigger_for(cfg) for name, cfg in self._cfgs.items()}
        self._sched: AsyncIOScheduler | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._firing = 0   # jobs under way (a retired scheduler waits for them)
        # schedule -> the run whose hold on a host was last posted: a heartbeat that fires every
        # minute while that run waits for an approval says so once, not at every fire
        self._busy_told: dict[str, int | None] = {}
        self.missed_while = "while the bot was down"   # a reload's scheduler: "before this reload"

    @property
    def store(self) -> Door[SchedulerStore]:
        return self.services.store

    def _channel(self, cfg: ScheduleConfig) -> str | None:
        return cfg.channel or self.settings.slack.channel

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._sched = AsyncIOScheduler(event_loop=loop, timezone=timezone.utc)
        invalid = set()
        for problem in check_schedules(self.settings, self.services.registry):
            log.error("%s: not scheduled", problem)   # `eagle doctor` and `eagle lint` say so too
            invalid.add(problem.name)
            cfg = self._cfgs.get(problem.name)
            self._spawn(self._post(self._channel(cfg) if cfg else self.settings.slack.channel,
                                   f":x: {problem}: not scheduled until eagle.yaml is fixed"))
        for name, cfg in self._cfgs.items():
            if name in invalid:
                continue
            self._sched.add_job(self._job, self._triggers[name], args=[name], id=name, name=name,
                                max_instances=1, coalesce=True, misfire_grace_time=cfg.misfire_grace_s,
                                replace_existing=True)
        # Once a day the audit chain's head goes to the channel: an anchor outside the DB
        # that `eagle audit verify --head HASH` checks against (store/chain.py).
        self._sched.add_job(self.post_audit_anchor, CronTrigger(hour=0, minute=5, timezone=timezone.utc),
                            id=ANCHOR_JOB, name=ANCHOR_JOB, max_instances=1, coalesce=True,
                            replace_existing=True)
        self._sched.add_job(self.check_alarms, IntervalTrigger(seconds=ALARM_CHECK_S), id=ALARM_JOB,
                            name=ALARM_JOB, max_instances=1, coalesce=True, replace_existing=True)
        self._sched.add_listener(self._on_event, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)
        self._sched.start()
        self._spawn(self.check_misfires())

    async def retire(self) -> None:
        """Fire nothing more, and shut down once the jobs under way are over: a reload's old
        scheduler, whose scheduled runs finish with their config (shutdown would cancel them)."""
        try:
            if self._sched is not None and self._sched.running:
                self._sched.pause()
            while self._firing:
                await asyncio.sleep(1)
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        if self._sched is not None and self._sched.running:
            self._sched.shutdown(wait=False)
        for t in list(self._tasks):
            t.cancel()

    async def post_audit_anchor(self) -> str | None:
        """Post the audit chain's head to the bot's channel; returns the text posted."""
        channel = self.settings.slack.channel
        if not channel:
            return None
        head = await self.store.call(lambda s: s.audit_head())
        if not head["hash"]:
            return None
        text = (f"audit chain head {head['hash']} (entry #{head['seq']}, {fmt_utc(datetime.now(timezone.utc))}); "
                f"check the audit DB against it: `eagle audit verify --head {head['hash']}`")
        await self._post(channel, text)
        return text

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _post(self, channel: str | None, text: str) -> None:
        try:
            await self.hooks.post(channel, text)
        except Exception:
            log.exception("posting to %s failed: %s", channel, text)

    def _on_event(self, event: JobExecutionEvent) -> None:
        cfg = self._cfgs.get(event.job_id)
        if cfg is None:
            return
        when = ", ".join(fmt_utc(t) for t in getattr(event, "scheduled_run_times", None) or
                         [event.scheduled_run_time])
        if event.code == EVENT_JOB_MAX_INSTANCES:
            text = (f":warning: schedule {cfg.name} ({_describe(cfg)}) skipped its fire at {when}: "
                    f"the previous run of it is still going")
        else:
            text = (f":warning: schedule {cfg.name} ({_describe(cfg)}) missed its fire at {when} "
                    f"by more than its grace time of {cfg.misfire_grace_s}s; it runs again at the next cron time")
        try:
            self._spawn(self._post(self._channel(cfg), text))
        except RuntimeError:
            log.warning(text)

    # -- misfires ---------------------------------------------------------------------
    async def check_misfires(self, now: datetime | None = None) -> list[str]:
        """Report fires missed while the bot was down; the latest one still within its
        grace time is run now. Returns the messages posted."""
        now = now or datetime.now(timezone.utc)
        posted: list[str] = []
        for name, cfg in self._cfgs.items():
            try:
                msg = await self._misfire_one(cfg, now)
            except Exception:
                log.exception("misfire check of schedule %s failed", name)
                continue
            if msg:
                posted.append(msg)
                await self._post(self._channel(cfg), msg)
        return posted

    async def _misfire_one(self, cfg: ScheduleConfig, now: datetime) -> str | None:
        last_run = await self.store.call(lambda s: s.last_schedule_run(cfg.name))
        last_fire = await self.store.call(lambda s: s.last_fire(cfg.name))
        refs = [d for d in (parse_iso(last_run["started_at"]) if last_run else None,
                            parse_iso(last_fire["fire_time"]) if last_fire else None) if d is not None]
        if not refs:
            # First time this schedule is seen: remember it, so a later outage is noticed.
            await self.store.call(lambda s: s.record_fire(cfg.name, iso_utc(now), "registered"))
            return None
        ref = max(refs)
        missed = fires_between(self._triggers[cfg.name], ref, now)
        if not missed:
            return None
        catch_up = (now - missed[-1]).total_seconds() <= cfg.misfire_grace_s
        for t in missed[-MAX_MISSED_LISTED:]:
            await self.store.call(lambda s: s.record_fire(cfg.name, iso_utc(t), "missed"))
        n = len(missed)
        shown = ", ".join(fmt_utc(t) for t in missed[-3:]) + (" ..." if n > 3 else "")
        if last_run:
            run_started = parse_iso(last_run["started_at"])
            assert run_started is not None   # a run row gets started_at when it is created
            last = f"last run #{last_run['id']} ({last_run['status']}) at {fmt_utc(run_started)}"
        else:
            last = "no run recorded yet"
        text = (f":warning: schedule {cfg.name} ({_describe(cfg)}) missed {n} run{'s' if n != 1 else ''} "
                f"{self.missed_while} ({shown}); {last}.")
        if catch_up and self._sched is not None and self._sched.get_job(cfg.name) is not None:
            self._sched.modify_job(cfg.name, next_run_time=datetime.now(timezone.utc))
            text += f" The latest is within its grace time ({cfg.misfire_grace_s}s): running it now."
        else:
            nxt = next_fire(self._triggers[cfg.name], now)
            text += f" Next run at {fmt_utc(nxt)}." if nxt else ""
        return text

    async def check_alarms(self, now: datetime | None = None) -> list[str]:
        """Name each schedule whose due run did not start within its grace, once. Returns the texts."""
        now = now or datetime.now(timezone.utc)
        posted = []
        states = await self.store.call(lambda s: s.schedule_states())
        for name, cfg in self._cfgs.items():
            try:
                last_run = await self.store.call(lambda s: s.last_schedule_run(name))
                first = await self.store.call(lambda s: s.schedule_fires(name, "", 1)) if last_run is None else []
                ref = reference(last_run, first[0] if first else None)
                due = next_fire(self._triggers[name], ref) if ref else None
                fires = await self.store.call(lambda s: s.schedule_fires(name, since(due), 1000)) if due else []
                state = states.get(name)
                o = overdue(self._triggers[name], cfg.misfire_grace_s, ref, last_run, fires, now,
                            state["changed_by"] if state and state["paused"] else None)
                if o is None or o.posted:
                    continue
                text = alarm_text(name, _describe(cfg), o)
                await self._post(self._channel(cfg), text)
                await self.store.call(lambda s: s.record_fire(name, iso_utc(o.due), ALARM))
                posted.append(text)
            except Exception:
                log.exception("missing-run check of schedule %s failed", name)
        return posted

    # -- the job ----------------------------------------------------------------------------
    async def _job(self, name: str) -> int | None:
        """One fire of a schedule: the run's id, or None when it did not run (a paused
        schedule, a busy host, a crash, which it reports and survives)."""
        cfg = self._cfgs[name]
        if not self.leading():
            log.warning("schedule %s: not the leader any more; its fire is left to the next one", name)
            return None
        self._firing += 1
        try:
            if (state := (await self.store.call(lambda s: s.schedule_states())).get(name)) and state["paused"]:
                at = now_iso()
                await self.store.call(lambda s: s.record_fire(name, at, "paused"))
                log.info("schedule %s is paused: not run", name)
                return None
            slot = slot_at(self._triggers[name], datetime.now(timezone.utc), cfg.misfire_grace_s)
            return await self.run_schedule(cfg, slot)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # never let one job take the scheduler down
            log.exception("schedule %s crashed", name)
            await self._post(self._channel(cfg), f":x: scheduled run {name} ({_describe(cfg)}) crashed: {e}")
            return None
        finally:
            self._firing -= 1

    async def run_schedule(self, cfg: ScheduleConfig, slot: datetime | None = None) -> int | None:
        """One scheduled run for the fire at `slot` (default now), start to report. Returns its
        run id (None if it never started, or another replica claimed that fire)."""
        store, engine = self.store, self.services.engine
        channel = self._channel(cfg)
        at = iso_utc(slot) if slot else now_iso()
        fire_id = await store.call(lambda s: s.claim_fire(cfg.name, at, self.holder))
        if fire_id is None:   # a fire is run once, by whichever replica claimed it first
            log.info("schedule %s: the fire at %s was claimed already", cfg.name, slot)
            return None
        if cfg.playbook == TUNE:   # a nightly `eagle tune` (frontends/service/schedule_tune.py)
            return await schedule_tune.fire(engine, store, self.hooks, cfg, fire_id, channel)
        req = RunRequest(playbook=cfg.playbook, hosts=list(cfg.hosts) or None, inputs=dict(cfg.inputs),
                         actor=f"schedule:{cfg.name}", origin="schedule", schedule=cfg.name,
                         assume_yes=cfg.approve, channel=channel)
        try:
            observer = self.hooks.observer(cfg)
        except Exception:
            log.exception("schedule %s: building the observer failed", cfg.name)
            observer = _LogObserver(cfg.name)
        try:
            run_id, task = await engine.start(req, observer=observer)
        except HostQuarantined as e:   # the missing-run alarm reads why the run did not start
            await store.call(lambda s: s.update_fire(fire_id, "quarantined"))
            await self._post(channel, f":no_entry: scheduled run {cfg.name} ({_describe(cfg)}) did not start: {e}")
            return None
        except HostBusy as e:
            await store.call(lambda s: s.update_fire(fire_id, "busy"))
            log.info("schedule %s: the fire did not start: %s", cfg.name, e)
            if cfg.name not in self._busy_told or self._busy_told[cfg.name] != e.run_id:
                self._busy_told[cfg.name] = e.run_id
                await self._post(channel, f":warning: scheduled run {cfg.name} ({_describe(cfg)}) did not start: {e} "
                                          f"(said once while that run holds the host; the skipped fires are logged)")
            return None
        except EagleError as e:
            await store.call(lambda s: s.update_fire(fire_id, "error"))
            await self._post(channel, f":x: scheduled run {cfg.name} ({_describe(cfg)}) did not start: {e}")
            return None
        await store.call(lambda s: s.update_fire(fire_id, "running", run_id))
        self._busy_told.pop(cfg.name, None)
        outcome = await task
        await store.call(lambda s: s.update_fire(fire_id, outcome.status, run_id))
        rid = run_id
        view = await store.call(lambda s: RunView.load(s, rid))
        if view is None:  # pruned under us: nothing left to report on
            return run_id
        channel = view.run.get("channel") or channel
        thread_ts = view.run.get("thread_ts")
        if getattr(self.hooks, "text_summaries", False):
            await self._post(channel, outcome_summary(cfg, view, (await store.call(lambda s: s.audit_head()))["hash"]))
        await self._report_regressions(cfg, view, channel)
        await self._upload_trends(cfg, view, channel, thread_ts)
        return run_id

    async def _report_regressions(self, cfg: ScheduleConfig, v: RunView, channel: str | None) -> None:
        regs, imps = v.regressions_of("regression"), v.regressions_of("improvement")
        if not regs and not imps:
            return
        lines = []
        if regs:
            lines.append(f":rotating_light: scheduled run {cfg.name}: run #{v.run_id} ({v.playbook}) "
                         f"flagged {len(regs)} regression{'s' if len(regs) != 1 else ''}:")
        else:
            lines.append(f":chart_with_upwards_trend: scheduled run {cfg.name}: run #{v.run_id} ({v.playbook}) improved:")
        for group in v.regression_groups():   # one line per incident, however many metrics it moved
            r = group[0]
            if (r.get("kind") or "regression") != "regression":
                continue
            if len(group) > 1:
                lines.append(f"• REGRESSION {r['host']} (incident #{v.incident_of(r)}, "
                             f"{', '.join(g['metric'] for g in group)}): {r['reason']}")
            else:
                lines.append(f"• REGRESSION {r['host']}: {r['reason']}")
        for r in imps:
            lines.append(f"• improvement {r['host']}: {r['reason']}")
        lines.append(f"details: `/eagle show {v.run_id}`")
        await self._post(channel, "\n".join(lines))

    async def _upload_trends(self, cfg: ScheduleConfig, v: RunView, channel: str | None,
                             thread_ts: str | None) -> None:
        key_metric = v.key_metric
        if v.dry_run or key_metric is None:
            return
        from eaglebot.frontends.plot import plot_trend

        key = key_metric["name"]
        hosts = list(dict.fromkeys(m["host"] for m in v.metrics if m["name"] == key))
        with tempfile.TemporaryDirectory(prefix="eagle-trend-") as d:
            for h in hosts:
                path = Path(d) / f"trend-{v.playbook}-{h}-{key}.png"
                try:
                    await self.store.call(lambda s: plot_trend(s, v.playbook, h, key, path,
                                                               cfg=self.settings.regression))
                    await self.hooks.upload(channel, thread_ts, path,
                                            f"{v.playbook} on {h}: {key}, recent runs (run #{v.run_id})")
                except Exception:
                    log.exception("schedule %s: trend plot for %s failed", cfg.name, h)


def build_scheduler(services: Services, hooks: Hooks | None = None, holder: str | None = None) -> Scheduler:
    """Jobs for every configured schedule; `.start()` inside the running loop."""
    return Scheduler(services, hooks, holder)
