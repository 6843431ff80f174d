"""Approve / Deny in Slack: the buttons a `confirm` step posts in its run's thread, and the
click that decides it (approvers only; every refusal is an audit row).

Several replicas may serve one app (Slack delivers a click to any of them): the button's
value names the approval row (`<random>.<approval id>`). Every click is a check-and-set of
that row (the first decision wins, whichever replica takes it); a click on the replica
waiting on it also wakes the wait at once, one on another replica is found by the waiting
replica's poll. The engine acts on the row's decision, never on a click the row refused."""
from __future__ import annotations

import asyncio
import logging
import secrets
from datetime import datetime, timezone

from eaglebot.frontends import oplog
from eaglebot.frontends.chat.access import authorize_approval
from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack.context import PendingApproval, SlackContext
from eaglebot.frontends.slack.payload import ActionBody, BlockActionsBody
from eaglebot.frontends.slack.run_thread import SlackRunObserver
from eaglebot.sdk import ApprovalRequest

log = logging.getLogger("eaglebot.slack")

THREAD_WAIT_S = 15.0
POLL_S = 0.5   # how often a waiting approval looks for a decision another replica wrote


class SlackApprover:
    """Approve / Deny buttons in the run's thread; only approvers decide.

    The engine bounds the wait with `access.approval_timeout_s` (no answer = deny) and
    records the request, the decision and who made it in the audit store.
    """

    def __init__(self, ctx: SlackContext, observer: SlackRunObserver | None, channel: str | None):
        self.ctx = ctx
        self.observer = observer
        self.channel = channel

    async def __call__(self, ar: ApprovalRequest) -> tuple[bool, str]:
        ctx = self.ctx
        row = await ctx.services.store.call(lambda s: s.pending_approval(ar.run_id, ar.step_idx, ar.host))
        key = secrets.token_urlsafe(12) + (f".{row['id']}" if row else "")
        pending = PendingApproval(ar, asyncio.get_running_loop().create_future(), self.channel)
        ctx.pending[key] = pending
        oplog.line("approval_requested", f"approval requested for run #{ar.run_id}", run_id=ar.run_id, host=ar.host,
                   step=ar.step, action=ctx.redact(ar.action)[:300])
        obs = self.observer
        if obs:
            obs.set_note("waiting for approval")
        post_task: asyncio.Task[None] | None = None
        poll: asyncio.Task[None] | None = None
        try:
            thread = None
            if obs:
                try:
                    await asyncio.wait_for(asyncio.shield(obs.thread_ready.wait()), THREAD_WAIT_S)
                except asyncio.TimeoutError:
                    pass
                thread = obs.parent_ts
                pending.channel = obs.channel or self.channel
            if pending.channel:
                # Its own task: a timeout that cancels us must not lose the message's ts.
                post_task = ctx.spawn(self._post(pending, pending.channel, key, thread), name="eagle-approval-post")
            poll = ctx.spawn(_poll_decision(ctx, row["id"], pending), name="eagle-approval-poll") if row else None
            return await pending.future
        finally:
            if poll is not None:
                poll.cancel()
            ctx.pending.pop(key, None)
            if obs:
                obs.set_note(None)
            # Awaiting the future directly means a timeout cancels it too.
            if not pending.future.done() or pending.future.cancelled():
                pending.future.cancel()
                # its own task: this one may be the cancelled run's, and the store says which it was
                ctx.spawn(self._undecided(pending, post_task, row["id"] if row else None),
                          name="eagle-approval-closed")

    async def _post(self, pending: PendingApproval, channel: str, key: str, thread: str | None) -> None:
        ctx, ar = self.ctx, pending.request
        access = ctx.settings.access
        requester = self.observer.requester if self.observer else None
        excluded = requester if not access.self_approval else None
        mentions = " ".join(bk.mention(a) for a in access.approvers if a not in ("*", excluded))
        text = f"{mentions} approval needed for run #{ar.run_id} on {ar.host}: {ar.action}".strip()
        posted = await ctx.post(channel, text, bk.approval_blocks(
            ar, key, access.approvers, access.approval_timeout_s, requester, access.self_approval),
            thread_ts=thread)
        pending.ts = posted.ts
        await record_approval_message(ctx, ar, posted.channel or channel, posted.ts,
                                      self.observer.requester if self.observer else None)

    async def _undecided(self, pending: PendingApproval, post_task: asyncio.Task[None] | None,
                         approval_id: int | None) -> None:
        """An approval nobody decided here: cancelled (by whom) when its run was cancelled while it
        waited, else expired (when). One log line that says which (as the store does), and its card.
        A click that won the row as the wait ended decided it: its own card stands."""
        ar, store = pending.request, self.ctx.services.store
        row = await store.call(lambda s: s.get_approval(approval_id)) if approval_id is not None else None
        if row is not None and row["status"] in ("approved", "denied"):
            return
        run = await store.call(lambda s: s.get_run(ar.run_id))
        if run is not None and run.get("cancel_requested"):
            decision, who, at = "cancelled", await _canceller(self.ctx, ar.run_id), None
        else:
            decision, who, at = "expired", None, datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        oplog.line("approval_decided", f"approval for run #{ar.run_id} {decision}", run_id=ar.run_id,
                   host=ar.host, step=ar.step, by=who)
        if post_task is not None:
            await asyncio.gather(post_task, return_exceptions=True)
        if pending.ts and pending.channel:
            self.ctx.update(pending.channel, pending.ts, bk.decision_text(decision, who, at),
                            bk.approval_decided_blocks(ar, decision, who, at))


async def _canceller(ctx: SlackContext, run_id: int) -> str | None:
    """Who asked to cancel the run (the `cancel_requested` event: `by U123`), when recorded."""
    for e in await ctx.services.store.call(lambda s: s.events("cancel_requested", limit=200)):
        if e["run_id"] == run_id and e["message"].startswith("by "):
            return e["message"][3:].strip() or None
    return None


async def record_approval_message(ctx: SlackContext, ar: ApprovalRequest, channel: str | None, ts: str | None,
                                  requester: str | None) -> None:
    """The approval row remembers its Slack message, so a restart can resolve it visibly."""
    try:
        row = await ctx.services.store.call(lambda s: s.pending_approval(ar.run_id, ar.step_idx, ar.host))
        if row is not None:
            await ctx.services.store.call(lambda s: s.set_approval_message(row["id"], channel, ts, requester))
    except Exception:
        log.exception("could not record the approval message of run %s", ar.run_id)


async def _poll_decision(ctx: SlackContext, approval_id: int, pending: PendingApproval) -> None:
    """Resolve the wait when the approval's row was decided elsewhere (another replica's click)."""
    while not pending.future.done():
        await asyncio.sleep(POLL_S)
        try:
            row = await ctx.services.store.call(lambda s: s.get_approval(approval_id))
        except Exception:
            log.exception("reading approval #%s failed", approval_id)
            continue
        if row is not None and row["status"] != "pending" and not pending.future.done():
            pending.future.set_result((row["status"] == "approved", row["decided_by"] or ""))


NO_LONGER_WAITING = "This approval is no longer waiting (it was decided or timed out)."


async def decide(ctx: SlackContext, body: BlockActionsBody, action: ActionBody) -> None:
    """A click on Approve or Deny (after the ack): the first decision the store takes wins, on
    whichever replica it lands; the waiting run follows the row, and a later click is told
    who decided what."""
    user = (body.get("user") or {}).get("id", "")
    response_url = body.get("response_url")
    key = str(action.get("value") or "")
    approve = action.get("action_id") == bk.APPROVE_ACTION
    tail = key.rpartition(".")[2]
    approval_id = int(tail) if tail.isdigit() else None
    pending = ctx.pending.get(key)
    if pending is None and approval_id is not None:
        await decide_elsewhere(ctx, approval_id, approve, user, response_url)
        return
    if pending is None or pending.future.done() or approval_id is None:
        await _too_late(ctx, approval_id, response_url)
        return
    ar = pending.request
    run = await ctx.services.store.call(lambda s: s.get_run(ar.run_id))
    if await _refused(ctx, ar, run["actor"] if run else None, approve, user, response_url):
        return
    decision = "approved" if approve else "denied"
    if not await ctx.services.store.call(lambda s: s.approval_decided(approval_id, decision, user)):
        await _too_late(ctx, approval_id, response_url)
        return
    if not pending.future.done():   # the engine reads the row either way; this only wakes it now
        pending.future.set_result((approve, user))
    _decided(ctx, ar, decision, user, pending.channel, pending.ts)


async def decide_elsewhere(ctx: SlackContext, approval_id: int, approve: bool, user: str,
                           response_url: str | None) -> None:
    """A click on an approval another replica waits on: the decision goes to the store, where
    that replica's poll finds it (a stale button of a run that is gone decides nothing)."""
    store = ctx.services.store
    row = await store.call(lambda s: s.get_approval(approval_id))
    run = await store.call(lambda s: s.get_run(row["run_id"])) if row else None
    if row is None or row["status"] != "pending" or run is None or run["status"] != "running":
        await _too_late(ctx, approval_id, response_url)
        return
    ar = ApprovalRequest(run_id=row["run_id"], host=row["host"], step=row["step"], action=row["action"],
                         details=[], step_idx=row["step_idx"])
    if await _refused(ctx, ar, run["actor"], approve, user, response_url):
        return
    decision = "approved" if approve else "denied"
    if not await store.call(lambda s: s.approval_decided(approval_id, decision, user)):
        await _too_late(ctx, approval_id, response_url)
        return
    _decided(ctx, ar, decision, user, row["channel"], row["message_ts"])


async def _too_late(ctx: SlackContext, approval_id: int | None, response_url: str | None) -> None:
    """Answer a click that decided nothing with the decision the store kept, and whose it was."""
    row = await ctx.services.store.call(lambda s: s.get_approval(approval_id)) if approval_id is not None else None
    if row is None or row["status"] == "pending":
        await ctx.respond(response_url, NO_LONGER_WAITING)
        return
    by = f" by {bk.mention(row['decided_by'])}" if row["status"] in ("approved", "denied") and row["decided_by"] \
        else ""
    await ctx.respond(response_url, f"This approval is no longer waiting: it was {row['status']}{by}; "
                                    "your click changed nothing.")


async def _refused(ctx: SlackContext, ar: ApprovalRequest, requester: str | None, approve: bool, user: str,
                   response_url: str | None) -> bool:
    """A click `user` may not make: its log line, its audit row and the answer to them (True)."""
    why = authorize_approval(ctx.settings.access, user, requester, configured=ctx.settings.access_configured)
    if not why:
        return False
    verb = "approve" if approve else "deny"
    oplog.rejected(user, f"{verb} run #{ar.run_id} on {ar.host}", why)
    what = f"{verb} {ar.action!r} on {ar.host}"
    await ctx.services.store.call(lambda s: s.add_rejection("access_denied", user, what, why, ar.run_id))
    await ctx.respond(response_url, f":no_entry: {bk.escape(why)}; your click was recorded.")
    return True


def _decided(ctx: SlackContext, ar: ApprovalRequest, decision: str, user: str, channel: str | None,
             ts: str | None) -> None:
    """A decision taken: its log line, and the card in the thread says who decided."""
    oplog.line("approval_decided", f"approval for run #{ar.run_id} {decision}", run_id=ar.run_id, by=user,
               host=ar.host, step=ar.step)
    if channel and ts:
        ctx.update(channel, ts, bk.decision_text(decision, user), bk.approval_decided_blocks(ar, decision, user))
