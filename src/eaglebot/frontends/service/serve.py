"""`eagle serve`: the bot's composition root.

Builds the services once, checks the bot token, connects the Slack app (Socket Mode, or
HTTP with --http, behind service/http_guard.py; /metrics on `metrics_port` of its own), and joins the election of a leader among the replicas
on the same store (service/leader.py): the leader runs the configured schedules, with Slack
as their voice, and the health watch; every replica answers commands and clicks. On SIGHUP it
reloads the configuration (service/reload.py) and, on the leader, follows it with new
schedules and health watch; on SIGINT/SIGTERM it stops everything in order: the leader's
duties (and its lease), the connection, the runs the bot started (their always-steps run),
the store.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from eaglebot.config import Settings, load_settings
from eaglebot.engine.records import Observer
from eaglebot.errors import EagleError, UsageError
from eaglebot.frontends.service.http_guard import listen, raise_open_files_limit
from eaglebot.frontends.service.leader import Leadership
from eaglebot.frontends.service.metrics import Metrics, set_leader
from eaglebot.frontends.oplog import RunLog, outside_command, setup_logging
from eaglebot.frontends.service.reload import EnvFile, Reloader
from eaglebot.frontends.service.reload_peers import PeerReloads
from eaglebot.frontends.service.scheduler import Hooks, Scheduler, build_scheduler
from eaglebot.frontends.services import Services, Snapshot
from eaglebot.frontends.slack.app import SlackBot, build_app
from eaglebot.frontends.slack.client import make_client, slack_error
from eaglebot.frontends.slack.expire import expire_stale_approvals
from eaglebot.frontends.slack.http import GuardedSocketModeHandler
from eaglebot.frontends.slack.reload_hooks import SlackReload

log = logging.getLogger("eaglebot.serve")


def _env(name: str, why: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise UsageError(f"{name} is not set: {why} (docs/slack.md, 'Create the Slack app', says where each token comes from)")
    return value


def serve_main(settings: Settings, *, http_port: int | None = None, host: str = "127.0.0.1",
               env_file: str | None = None, verbose: bool = False) -> int:
    """`eagle serve`: Socket Mode (SLACK_APP_TOKEN) by default, HTTP with --http PORT."""
    env = EnvFile(Path(env_file)) if env_file else None
    if env is not None:
        env.apply(env.load())   # before the tokens are read; its values override the process's
        if settings.source is not None:
            settings = load_settings(settings.source)
    token = _env("SLACK_BOT_TOKEN", "the bot token (xoxb-...) from OAuth & Permissions")
    if http_port is None:
        secret, app_token = None, _env("SLACK_APP_TOKEN", "an app-level token (xapp-...) with connections:write")
    else:
        secret, app_token = _env("SLACK_SIGNING_SECRET", "the signing secret from Basic Information"), None
    setup_logging(settings.log_format, verbose=verbose, level=os.environ.get("EAGLE_LOG_LEVEL", "INFO"))
    raise_open_files_limit()   # before any socket: the HTTP port's cap is set from it
    return asyncio.run(serve(settings, token, secret, app_token, http_port, host, env=env, verbose=verbose))


async def serve(settings: Settings, token: str, secret: str | None, app_token: str | None,
                http_port: int | None, host: str, *, env: EnvFile | None = None, verbose: bool = False) -> int:
    services = await Services.open(settings)
    metrics = Metrics(services.store)

    def watchers() -> list[Observer]:   # every run's log lines and metrics, whatever config it runs under
        return [RunLog(services.redactor.text), metrics.observer()]
    services.engine.watchers.extend(watchers())
    client = make_client(settings, token, counters=metrics)
    try:
        answer = (await client.auth_test()).data
        ident = answer if isinstance(answer, dict) else {}
    except Exception as e:
        await services.close()
        if isinstance(e, SlackApiError):
            raise UsageError(f"Slack refused SLACK_BOT_TOKEN: {slack_error(e)}") from None
        raise EagleError(f"cannot reach Slack's Web API ({type(e).__name__}); check the network "
                         "or SLACK_API_URL, then `eagle doctor`") from None
    bot = build_app(services, client=client, signing_secret=secret, identity=ident)
    await expire_stale_approvals(bot.ctx)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    handler: GuardedSocketModeHandler | None = None
    listener = metrics_listener = None
    duties = LeaderDuties(services, bot, client)
    lead = Leadership(services.store, duties)
    duties.holder, duties.leading = lead.id, lead.is_leader
    election: asyncio.Task[None] | None = None
    following: asyncio.Task[None] | None = None

    async def follow(old: Snapshot, new: Snapshot, env_changed: set[str]) -> None:
        """After a reload: the log format; on the leader, the new config's schedules and health watch."""
        setup_logging(new.settings.log_format, verbose=verbose, level=os.environ.get("EAGLE_LOG_LEVEL", "INFO"))
        await duties.follow()

    reloader = Reloader(services, config=settings.source, env_file=env, watchers=watchers)
    reloader.checks.append(SlackReload(bot).check)
    reloader.on_reload.append(follow)
    peers = PeerReloads(services.store, reloader.reload)   # /eagle reload reaches every replica
    await peers.prime()
    services.reloader = peers.from_slack
    reloads: set[asyncio.Task[tuple[bool, str]]] = set()

    async def hup_reload() -> tuple[bool, str]:
        done, msg = await reloader.reload("signal")
        if not done:   # no one in Slack asked: the bot's channel hears it
            try:
                await bot.hooks.post(None, f":warning: SIGHUP: {services.redactor.text(msg)}")
            except Exception:
                log.exception("could not post the refused reload to the channel")
        return done, msg

    def on_hup() -> None:
        t = loop.create_task(hup_reload())
        reloads.add(t)
        t.add_done_callback(reloads.discard)
    try:
        loop.add_signal_handler(signal.SIGHUP, on_hup)
    except (NotImplementedError, RuntimeError, AttributeError):
        pass
    try:
        if http_port is None:
            handler = GuardedSocketModeHandler(bot.app, app_token, web_client=client)
            await handler.connect_async()  # type: ignore[no-untyped-call]  # slack_bolt leaves it unannotated
            log.info("connected to Slack in Socket Mode as %s", ident.get("user"))
        else:
            listener = await listen(bot.app.web_app(), host, http_port, on_shed=metrics.shed)
            log.info("serving Slack requests on http://%s:%s/slack/events as %s (at most %d connections)",
                     host, http_port, ident.get("user"), listener.gate.cap)
        if settings.metrics_port:
            metrics_listener = await metrics.serve(settings.metrics_host, settings.metrics_port)
            log.info("serving metrics on http://%s:%s/metrics", settings.metrics_host, settings.metrics_port)
        election = asyncio.create_task(lead.run(stop))
        following = asyncio.create_task(peers.run(stop))
        await stop.wait()
        log.info("stopping")
    finally:
        stop.set()
        for t in reloads:
            t.cancel()
        await asyncio.gather(*reloads, return_exceptions=True)
        if following is not None:
            await asyncio.gather(following, return_exceptions=True)
        if election is not None:   # steps down (schedules, health watch) and releases the lease
            await asyncio.gather(election, return_exceptions=True)
        await duties.close()
        if handler is not None:
            await handler.close_async()  # type: ignore[no-untyped-call]  # slack_bolt leaves it unannotated
        if listener is not None:
            await listener.close()
        if metrics_listener is not None:
            await metrics_listener.close()
        await bot.aclose(grace_s=60)  # systemd's TimeoutStopSec is 90
        await services.close()
    return 0


class LeaderDuties:
    """What only the leader replica runs: the schedules and the health watch (each term anew),
    and the sweep for runs whose replica died (interrupted; their approvals expired)."""

    def __init__(self, services: Services, bot: SlackBot, client: AsyncWebClient):
        self.services, self.bot, self.client = services, bot, client
        self.holder: str | None = None   # the replica's id: who claims the schedules' fires
        self.leading: Callable[[], bool] = lambda: True   # the replica's term has not run out
        self.sched: Scheduler | None = None
        self.watch: asyncio.Task[None] | None = None
        self._term = asyncio.Event()
        self._retiring: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        set_leader(True)
        self._start_scheduler()
        self._term = asyncio.Event()
        self.watch = start_health_watch(self.services, self.client, self._term)

    def _start_scheduler(self, missed_while: str | None = None) -> None:
        self.sched = start_scheduler(self.services, self.bot.hooks, self.holder, missed_while)
        self.sched.leading = self.leading

    def _retire(self) -> None:
        """The scheduler fires nothing more; its scheduled runs under way finish."""
        if self.sched is not None:
            t = asyncio.get_running_loop().create_task(self.sched.retire())
            self._retiring.add(t)
            t.add_done_callback(self._retiring.discard)
            self.sched = None

    async def follow(self) -> None:
        """A reload while leading: the new config's schedules (the old scheduler's running jobs
        finish first) and health watch (once the old one stopped)."""
        if self.sched is None:
            return
        # the new scheduler's catch-up and the watch's runs are not the `/eagle reload` command's
        with outside_command():
            self._retire()
            self._start_scheduler("before this reload")
            self._term.set()
            if self.watch is not None:
                await asyncio.gather(self.watch, return_exceptions=True)
            self._term = asyncio.Event()
            self.watch = start_health_watch(self.services, self.client, self._term)

    async def stop(self) -> None:
        set_leader(False)
        self._retire()
        self._term.set()
        watch, self.watch = self.watch, None
        if watch is not None:
            await asyncio.gather(watch, return_exceptions=True)

    async def sweep(self) -> None:
        await self.services.store.call(lambda s: s.recover())   # also done by any `eagle` command that opens the store
        await expire_stale_approvals(self.bot.ctx)

    async def close(self) -> None:
        """At exit: retired schedulers stop now (their runs are cancelled with the bot's)."""
        for t in list(self._retiring):
            t.cancel()
        await asyncio.gather(*self._retiring, return_exceptions=True)


def start_health_watch(services: Services, client: AsyncWebClient, stop: asyncio.Event) -> asyncio.Task[None] | None:
    """The fleet health watch (`health_watch:` in eagle.yaml), alerting in Slack, until `stop`."""
    cfg = services.settings.health_watch
    if cfg is None:
        return None
    from eaglebot.engine.fleet_hook import watch_actions
    from eaglebot.engine.health_watch import HealthWatch, HostReport
    from eaglebot.frontends.slack.health_alerts import HealthAlerts

    alerts = HealthAlerts(client, services.store, cfg.channel or services.settings.slack.channel, cfg.interval_s)

    drains: set[asyncio.Task[None]] = set()

    async def notify(report: HostReport) -> None:
        await alerts.notify(report)
        # A drain takes minutes: the watch goes on meanwhile.
        t = asyncio.get_running_loop().create_task(watch_actions(services.engine, report))
        drains.add(t)
        t.add_done_callback(drains.discard)
    watch = HealthWatch(services.settings, services.store, services.pool, cfg, notify=notify)
    log.info("health watch: %d hosts every %gs", len(watch.hosts), cfg.interval_s)

    async def run() -> None:
        try:
            await watch.run(stop)
        finally:
            await alerts.aclose()
    return asyncio.create_task(run())


def start_scheduler(services: Services, hooks: Hooks, holder: str | None = None,
                    missed_while: str | None = None) -> Scheduler:
    """Start the configured schedules' jobs on this loop (`holder`: the replica claiming fires;
    `missed_while`: when the fires its start reports missed were, if not while the bot was down)."""
    sched = build_scheduler(services, hooks, holder)
    if missed_while:
        sched.missed_while = missed_while
    sched.start()
    return sched
