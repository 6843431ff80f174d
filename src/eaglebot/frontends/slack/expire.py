"""Approvals left pending by a bot that stopped: resolved visibly when `eagle serve` starts.

A pending approval is a store row (with the Slack message that asks). When the process that
waited on it is gone, its run is `interrupted` (Store.recover) and its buttons lead nowhere:
the buttons' keys lived in the old process's memory, so a stale click kills nothing. At start
the bot marks each such approval `expired`, audits it, replaces the buttons with a line saying
so, and tells the run's thread that the run was interrupted.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack.context import SlackContext

log = logging.getLogger("eaglebot.slack")

EXPIRED = "expired: the bot restarted; nothing was killed"


def expired_blocks(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [bk.section(f":hourglass: *Expired: the bot restarted; nothing was killed.* Run #{row['run_id']} on "
                       f"`{bk.escape(row.get('host') or '')}`, step *{bk.escape(row.get('step') or '')}*:\n"
                       f"{bk.escape(bk.clip(row.get('action') or '', 1000))}"),
            bk.context(f"run #{row['run_id']} was interrupted · `/eagle rerun {row['run_id']}` to try again")]


async def expire_stale_approvals(ctx: SlackContext) -> list[int]:
    """Resolve every pending approval whose run is no longer running; returns their ids."""
    store = ctx.services.store
    done: list[int] = []
    for row in await store.call(lambda s: s.stale_approvals()):
        if not await store.call(lambda s: s.approval_decided(row["id"], "expired", "restart")):
            continue   # another process resolved it first
        done.append(row["id"])
        said = f"approval #{row['id']} ({row.get('action')!r} on {row.get('host')}): {EXPIRED}"
        await store.call(lambda s: s.add_event(row["run_id"], "approval_expired", said))
        channel = row.get("channel") or row.get("run_channel")
        if channel and (ts := row["message_ts"]):
            ctx.update(channel, ts, EXPIRED, expired_blocks(row))
            await ctx.coalescer.flush(channel, ts)
        thread = row.get("run_thread_ts")
        if channel and thread:
            text = (f"run #{row['run_id']} ({row.get('playbook')}) was {row.get('run_status') or 'interrupted'}: "
                    f"the bot restarted while step {row.get('step')!r} on {row.get('host')} waited for approval; "
                    f"nothing was killed. `/eagle rerun {row['run_id']}` to try again.")
            await ctx.post(channel, text, [bk.section(f":warning: {bk.escape(text)}")], thread_ts=thread)
    if done:
        log.info("expired %d approval(s) left pending by a previous bot", len(done))
    return done
