"""The health watch's voice in Slack: one message per incident (host + GPU), posted when it
opens and edited in place as it evolves (suspect -> quarantined -> resolved), never one per
probe. The message's channel and ts live in the incident's `health_state` row, so a restart
of the bot keeps editing the same message. A Slack outage never stops the watch: the failure
is logged and the store still holds the state.

Within Slack's rate limits (about one message per second per channel) when many hosts go bad
at once: once more than `burst` incidents opened within one interval, the next ones are
gathered and posted as one summary message per `window_s` (`HealthAlerts`)."""
from __future__ import annotations

import asyncio
import logging
import re
import shlex
import time
from collections import deque
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, TYPE_CHECKING

from slack_sdk.models.blocks import ActionsBlock, ButtonElement
from slack_sdk.web.async_client import AsyncWebClient

from eaglebot.engine.fleet_health import OPEN_FROM
from eaglebot.engine.health_watch import HostReport
from eaglebot.frontends.fleet_text import alert_text, summary_text
from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack.client import slack_error
from eaglebot.store import parse_iso
from eaglebot.store.rows import HealthStateRow

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import ServiceState

log = logging.getLogger("eaglebot.health")


HEALTH_RUN_ACTION = "eagle_health_run"          # the button's value is an `/eagle` text, run as typed
HEALTH_SILENCE_ACTION = "eagle_health_silence"  # value "HOST GPU": no updates of the incident for 24 h
SILENCE_S = 24 * 3600


_BROADCAST = re.compile(r"@(channel|here|everyone)\b", re.IGNORECASE)


def safe(s: object) -> str:
    """A string a host wrote (a reason, a kernel log line), as Slack shows it and never acts on it:
    `<`, `>`, `&` escaped (no `<!channel>`, no `<https://...|disguised link>`, no `<@U...>`), and
    `@channel` kept from pinging with a zero-width joiner."""
    return _BROADCAST.sub(lambda m: "@\u2060" + m.group(1), bk.escape(s))


def safe_alert_text(host: str, gpu: int, state: str, reason: str) -> str:
    """The incident's message text for Slack, everything the host wrote escaped."""
    return alert_text(safe(host), gpu, state, safe(reason))


def alert_blocks(host: str, gpu: int, state: str, reason: str, *, silenced: str | None = None) -> list[dict[str, Any]]:
    """The incident's message: what, and while it is open, the buttons to act on it.
    `silenced`: mrkdwn the caller built (a user mention and a time), shown as is."""
    blocks = [bk.section(safe_alert_text(host, gpu, state, reason))]
    if state == "healthy":
        return blocks
    why = shlex.quote(reason[:150])
    blocks.append(ActionsBlock(block_id=f"eagle_health_{host}_{gpu}"[:255], elements=[
        ButtonElement(text="Drain", action_id=f"{HEALTH_RUN_ACTION}_drain", value=f"drain {host} reason={why}",
                      style="danger"),
        ButtonElement(text="Run health (DCGM level 2)", action_id=f"{HEALTH_RUN_ACTION}_health",
                      value=f"health {host} dcgm_level=2"),
        ButtonElement(text="Silence 24 h", action_id=HEALTH_SILENCE_ACTION, value=f"{host} {gpu}"),
    ]).to_dict())
    blocks.append(bk.context(("silenced by " + silenced + " · " if silenced else "")
                             + "Drain asks an approver first · `eagle fleet` or `/eagle fleet` shows every host"))
    return blocks


def silenced(row: HealthStateRow | None) -> bool:
    until = parse_iso(row["silenced_until"]) if row else None
    return until is not None and until > datetime.now(timezone.utc)


async def post_health_alert(client: AsyncWebClient, store: Door[ServiceState], channel: str | None,
                            report: HostReport) -> None:
    """Post or update the message of each incident this probe changed (a silenced one only
    when it is resolved)."""
    if not report.transitions and not report.notes:
        return
    rows = {r["gpu"]: r for r in await store.call(lambda s: s.health_states(report.host))}
    for gpu, _before, after, reason in report.transitions:
        row = rows.get(gpu)
        if after == "expected":          # the bot's own teardown: shown in `eagle fleet`, never alerted
            continue
        text = safe_alert_text(report.host, gpu, after, reason)
        blocks = alert_blocks(report.host, gpu, after, reason)
        if after != "healthy" and silenced(row):
            continue
        try:
            if row is not None and row["channel"] and row["message_ts"]:
                await client.chat_update(channel=row["channel"], ts=row["message_ts"], text=text, blocks=blocks)
                if after == "healthy":   # the incident is over: a later one gets its own message
                    await store.call(lambda s: s.health_set_alert(report.host, gpu, None, None))
            elif after != "healthy" and channel:
                resp = await client.chat_postMessage(channel=channel, text=text, blocks=blocks)
                await store.call(lambda s: s.health_set_alert(report.host, gpu, str(resp.get("channel") or channel),
                                                              str(resp.get("ts") or "")))
        except Exception as e:  # Slack is a view: the state is in the store whatever it answers
            log.warning("health alert for %s not posted: %s", report.host, slack_error(e))
    for gpu, note in report.notes:
        await _post_note(client, channel, rows.get(gpu), report.host, gpu, note)


async def _post_note(client: AsyncWebClient, channel: str | None, row: HealthStateRow | None, host: str, gpu: int,
                     note: str) -> None:
    """What the watch left alone (a person's drain), in the incident's thread, else the channel."""
    what = f"{host} (the host)" if gpu < 0 else f"{host} GPU {gpu}"
    text = f":information_source: {safe(what)}: {safe(note)}"
    where = (row["channel"] if row is not None and row["channel"] else None) or channel
    if not where:
        return
    try:
        await client.chat_postMessage(channel=where, text=text, blocks=[bk.section(text)],
                                      thread_ts=row["message_ts"] if row is not None and row["channel"] else None)
    except Exception as e:
        log.warning("health note for %s not posted: %s", host, slack_error(e))


class HealthAlerts:
    """The watch's `notify`: single messages up to `burst` new incidents per interval, then summaries."""

    def __init__(self, client: AsyncWebClient, store: Door[ServiceState], channel: str | None, interval_s: float,
                 *, burst: int = 10, window_s: float = 10.0):
        self.client, self.store, self.channel = client, store, channel
        self.interval_s, self.burst, self.window_s = interval_s, burst, window_s
        self._opened: deque[float] = deque()
        self._gathered: list[tuple[str, int, str, str]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def notify(self, report: HostReport) -> None:
        now = time.monotonic()
        while self._opened and now - self._opened[0] > self.interval_s:
            self._opened.popleft()
        single = []
        for t in report.transitions:
            gpu, before, after, reason = t
            if before in OPEN_FROM and after not in OPEN_FROM:
                self._opened.append(now)
                if len(self._opened) > self.burst:
                    self._gathered.append((report.host, gpu, after, reason))
                    if self._flusher is None or self._flusher.done():
                        self._flusher = asyncio.create_task(self._flush_later())
                    continue
            single.append(t)
        if single or report.notes:
            await post_health_alert(self.client, self.store, self.channel, replace(report, transitions=single))

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.window_s)
        await self.flush()

    async def flush(self) -> None:
        """Post what was gathered as one message (also at shutdown)."""
        items, self._gathered = self._gathered, []
        if not items or not self.channel:
            return
        safe_items = [(safe(host), gpu, state, safe(reason)) for host, gpu, state, reason in items]
        text = summary_text(safe_items)
        try:
            await self.client.chat_postMessage(channel=self.channel, text=text, blocks=_sections(text))
        except Exception as e:
            log.warning("health summary of %d incidents not posted: %s", len(items), slack_error(e))

    async def aclose(self) -> None:
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
        await self.flush()


def _sections(text: str) -> list[dict[str, Any]]:
    """mrkdwn text in as many sections as its lines need (a section holds 3,000 characters)."""
    out: list[dict[str, Any]] = []
    chunk = ""
    for line in text.split("\n"):
        if chunk and len(chunk) + len(line) + 1 > bk.MAX_SECTION - 100:
            out.append(bk.section(chunk))
            chunk = ""
        chunk = f"{chunk}\n{line}" if chunk else line
    return out + [bk.section(chunk)] if chunk else out


async def silence_incident(client: AsyncWebClient, store: Door[ServiceState], allowed: bool, user: str, value: str,
                           channel: str | None, ts: str | None) -> str:
    """The Silence 24 h button: no updates of that incident for a day (its resolution still
    edits the message), recorded as an event; the message says who silenced it. The answer."""
    if not allowed:
        return "only operators can silence an alert; add your Slack user id to access.operators in eagle.yaml"
    host, _, gpu_text = value.rpartition(" ")
    try:
        gpu = int(gpu_text)
    except ValueError:
        return "this button does not name an incident"
    until = datetime.now(timezone.utc).timestamp() + SILENCE_S
    iso = datetime.fromtimestamp(until, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if not await store.call(lambda s: s.health_silence(host, gpu, iso, user)):
        return f"{host} has no open incident to silence"
    row = next((r for r in await store.call(lambda s: s.health_states(host)) if r["gpu"] == gpu), None)
    if row is not None and channel and ts:
        try:
            await client.chat_update(channel=channel, ts=ts, text=safe_alert_text(host, gpu, row["state"], row["reason"] or ""),
                                     blocks=alert_blocks(host, gpu, row["state"], row["reason"] or "",
                                                         silenced=f"<@{re.sub(r'[^A-Za-z0-9]', '', user)}> until "
                                                                  f"{iso[:16].replace('T', ' ')} UTC"))
        except Exception as e:
            log.warning("silenced alert for %s not updated: %s", host, slack_error(e))
    return f"alerts of {safe(host)} {'(the host)' if gpu < 0 else f'GPU {gpu}'} silenced for 24 h"
