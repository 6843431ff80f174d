"""`eagle serve`: the bot's composition root.

Builds the services once, checks the bot token, connects the Slack app (Socket Mode, or
HTTP with --http), and joins the election of a leader among the replicas on the same store
(frontends/leader.py): the leader starts the configured schedules with Slack as their voice
and the health watch; every replica answers commands and clicks. On SIGINT/SIGTERM it stops
everything in order: the leader's duties (and its lease), the connection, the runs the bot
started (their always-steps run), the store.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Callable

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from eaglebot.config import Settings
from eaglebot.errors import EagleError, UsageError
from eaglebot.frontends.leader import Leadership
from eaglebot.frontends.scheduler import Hooks, Scheduler, build_scheduler
from eaglebot.frontends.services import Services
from eaglebot.frontends.slack.app import SlackBot, build_app
from eaglebot.frontends.slack.client import make_client, slack_error
from eaglebot.frontends.slack.expire import expire_stale_approvals

log = logging.getLogger("eaglebot.serve")


def _env(name: str, why: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise UsageError(f"{name} is not set: {why} (see 'Connect to Slack' in README.md)")
    return value


def serve_main(settings: Settings, *, http_port: int | None = None, host: str = "127.0.0.1") -> int:
    """`eagle serve`: Socket Mode (SLACK_APP_TOKEN) by default, HTTP with --http PORT."""
    token = _env("SLACK_BOT_TOKEN", "the bot token (xoxb-...) from OAuth & Permissions")
    if http_port is None:
        secret, app_token = None, _env("SLACK_APP_TOKEN", "an app-level token (xapp-...) with connections:write")
    else:
        secret, app_token = _env("SLACK_SIGNING_SECRET", "the signing secret from Basic Information"), None
    logging.basicConfig(level=os.environ.get("EAGLE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(serve(settings, token, secret, app_token, http_port, host))


async def serve(settings: Settings, token: str, secret: str | None, app_token: str | None,
                http_port: int | None, host: str) -> int:
    services = await Services.open(settings)
    client = make_client(settings, token)
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
    runner = handler = None
    duties = LeaderDuties(services, bot, client)
    lead = Leadership(services.store, duties)
    duties.holder, duties.leading = lead.id, lead.is_leader
    election: asyncio.Task[None] | None = None
    try:
        if http_port is None:
            from eaglebot.frontends.slack.http import GuardedSocketModeHandler

            handler = GuardedSocketModeHandler(bot.app, app_token, web_client=client)
            await handler.connect_async()  # type: ignore[no-untyped-call]  # slack_bolt leaves it unannotated
            log.info("connected to Slack in Socket Mode as %s", ident.get("user"))
        else:
            from aiohttp import web

            runner = web.AppRunner(bot.app.web_app())
            await runner.setup()
            await web.TCPSite(runner, host, http_port).start()
            log.info("serving Slack requests on http://%s:%s/slack/events as %s", host, http_port, ident.get("user"))
        election = asyncio.create_task(lead.run(stop))
        await stop.wait()
        log.info("stopping")
    finally:
        stop.set()
        if election is not None:   # steps down (scheduler, health watch) and releases the lease
            await asyncio.gather(election, return_exceptions=True)
        if handler is not None:
            await handler.close_async()  # type: ignore[no-untyped-call]  # slack_bolt leaves it unannotated
        if runner is not None:
            await runner.cleanup()
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

    async def start(self) -> None:
        self._term = asyncio.Event()
        self.sched = start_scheduler(self.services, self.bot.hooks, self.holder)
        self.sched.leading = self.leading
        self.watch = start_health_watch(self.services, self.client, self._term)

    async def stop(self) -> None:
        self._term.set()
        sched, watch, self.sched, self.watch = self.sched, self.watch, None, None
        if sched is not None:
            try:
                sched.shutdown()
            except Exception:
                log.exception("scheduler shutdown failed")
        if watch is not None:
            await asyncio.gather(watch, return_exceptions=True)

    async def sweep(self) -> None:
        await self.services.store.recover()   # also done by any `eagle` command that opens the store
        await expire_stale_approvals(self.bot.ctx)


def start_health_watch(services: Services, client: AsyncWebClient, stop: asyncio.Event) -> asyncio.Task[None] | None:
    """The fleet health watch (`health_watch:` in eagle.yaml), alerting in Slack, until `stop`."""
    cfg = services.settings.health_watch
    if cfg is None:
        return None
    from eaglebot.engine.fleet_hook import auto_drain
    from eaglebot.engine.health_watch import HealthWatch, HostReport
    from eaglebot.frontends.slack.health_alerts import HealthAlerts

    alerts = HealthAlerts(client, services.store, cfg.channel or services.settings.slack.channel, cfg.interval_s)

    drains: set[asyncio.Task[int | None]] = set()

    async def notify(report: HostReport) -> None:
        await alerts.notify(report)
        if cfg is not None and cfg.auto_drain:   # a drain takes minutes: the watch goes on meanwhile
            t = asyncio.get_running_loop().create_task(auto_drain(services.engine, report))
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


def start_scheduler(services: Services, hooks: Hooks, holder: str | None = None) -> Scheduler:
    """Start the configured schedules' jobs on this loop (`holder`: the replica claiming fires)."""
    sched = build_scheduler(services, hooks, holder)
    sched.start()
    return sched
