"""The health watch's voice in Slack: one message per incident (host + GPU), posted when it
opens and edited in place as it evolves (suspect -> quarantined -> resolved), never one per
probe. The message's channel and ts live in the incident's `health_state` row, so a restart
of the bot keeps editing the same message. A Slack outage never stops the watch: the failure
is logged and the store still holds the state."""
from __future__ import annotations

import logging

from slack_sdk.web.async_client import AsyncWebClient

from eaglebot.engine.health_watch import HostReport
from eaglebot.frontends.fleet_text import alert_text
from eaglebot.frontends.slack.client import slack_error
from eaglebot.store.protocol_async import AsyncStoreProtocol

log = logging.getLogger("eaglebot.health")


async def post_health_alert(client: AsyncWebClient, store: AsyncStoreProtocol, channel: str | None,
                            report: HostReport) -> None:
    """Post or update the message of each incident this probe changed."""
    if not report.transitions:
        return
    rows = {r["gpu"]: r for r in await store.health_states(report.host)}
    for gpu, _before, after, reason in report.transitions:
        row = rows.get(gpu)
        text = alert_text(report.host, gpu, after, reason)
        try:
            if row is not None and row["channel"] and row["message_ts"]:
                await client.chat_update(channel=row["channel"], ts=row["message_ts"], text=text)
                if after == "healthy":   # the incident is over: a later one gets its own message
                    await store.health_set_alert(report.host, gpu, None, None)
            elif after != "healthy" and channel:
                resp = await client.chat_postMessage(channel=channel, text=text)
                await store.health_set_alert(report.host, gpu, str(resp.get("channel") or channel),
                                             str(resp.get("ts") or ""))
        except Exception as e:  # Slack is a view: the state is in the store whatever it answers
            log.warning("health alert for %s not posted: %s", report.host, slack_error(e))
