"""The Slack front end: a Bolt AsyncApp built by `build_app(services, ...)`.

It only parses, authorizes, renders and posts. Every run goes through
`Engine.start` (via `commands.handle`), like the CLI. `eagle serve` (frontends/serve.py)
builds it, connects it to Slack and starts the scheduler next to it. The slash-command listener
parses the text and checks access (both pure), acks, and only then does anything
that touches the DB or a host, in a background task. Slack is a view of the audit
store: a Slack failure is logged, never raised into a run.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import re
import secrets
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Coroutine, TypeVar

from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from eaglebot.config import ScheduleConfig, Settings
from eaglebot.engine.output import printable
from eaglebot.engine.playbook import Playbook
from eaglebot.engine.runner import Observer, RunOutcome, RunRequest, StepRecord
from eaglebot.frontends.chat import router as commands
from eaglebot.frontends.format import fmt_duration, show_text
from eaglebot.frontends.services import Services
from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack import budget
from eaglebot.frontends.slack.http import GuardedApp
from eaglebot.frontends.slack.replies import reply_blocks
from eaglebot.frontends.slack.tuning import register as register_tuning
from eaglebot.history.view import RunView
from eaglebot.sdk import ApprovalRequest, StepResult

log = logging.getLogger("eaglebot.slack")
_T = TypeVar("_T")

NOT_IN_CHANNEL = {"not_in_channel", "channel_not_found", "is_archived"}
UPDATES_PER_MINUTE = 45          # chat.update is Tier 3 (~50/min per workspace): stay under it
THREAD_WAIT_S = 15.0


def make_client(settings: Settings, token: str | None, *, backoff_s: float = 0.5,
                timeout_s: int = 30) -> AsyncWebClient:
    """The bot's Web API client: SLACK_API_URL honoured, 429s and 5xx retried."""
    kw: dict[str, Any] = {}
    if url := settings.slack_api_url():
        kw["base_url"] = url
    calc = BackoffRetryIntervalCalculator(backoff_factor=backoff_s)
    return AsyncWebClient(token=token, timeout=timeout_s, retry_handlers=[
        AsyncConnectionErrorRetryHandler(max_retry_count=2, interval_calculator=calc),
        AsyncRateLimitErrorRetryHandler(max_retry_count=3),
        AsyncServerErrorRetryHandler(max_retry_count=2, interval_calculator=calc),
    ], **kw)


def slack_error(e: Exception) -> str:
    if isinstance(e, SlackApiError):
        try:
            return str(e.response.get("error") or e.response.status_code)
        except Exception:
            return "slack_api_error"
    return type(e).__name__


# -- coalesced edits ---------------------------------------------------------------------

class UpdateCoalescer:
    """Every chat.update of the bot goes through here.

    Only the newest content of a message is kept; a message is edited at most once per
    `per_message_s`, and the whole bot at most `per_minute` times a minute, across runs.
    """

    def __init__(self, client: AsyncWebClient, per_message_s: float = 1.0, per_minute: int = UPDATES_PER_MINUTE):
        self.client = client
        self.per_message_s = per_message_s
        self.per_minute = per_minute
        self._pending: dict[tuple[str, str], tuple[str, list[dict[str, Any]]]] = {}
        self._last: dict[tuple[str, str], float] = {}
        self._sent: deque[float] = deque()
        self._waiters: dict[tuple[str, str], list[asyncio.Future[None]]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.edits = 0

    def posted(self, channel: str, ts: str) -> None:
        """A message was just posted: its first edit waits a full interval."""
        self._last[(channel, ts)] = time.monotonic()

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        self._pending[(channel, ts)] = (text, blocks)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="eagle-slack-updates")
        self._wake.set()

    async def flush(self, channel: str, ts: str, timeout: float = 30.0) -> None:
        key = (channel, ts)
        if key not in self._pending:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(key, []).append(fut)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            log.warning("edit of %s not sent within %ss", key, timeout)

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            if not self._pending:
                await self._wake.wait()
                continue
            now = time.monotonic()
            while self._sent and now - self._sent[0] >= 60:
                self._sent.popleft()
            if len(self._sent) >= self.per_minute:
                await self._sleep(60 - (now - self._sent[0]))
                continue
            due = {k: self._last.get(k, float("-inf")) for k in self._pending}
            key = min(due, key=due.__getitem__)
            wait = due[key] + self.per_message_s - now
            if wait > 0:
                await self._sleep(wait)
                continue
            text, blocks = self._pending.pop(key)
            self._last[key] = now
            self._sent.append(now)
            try:
                await self.client.chat_update(channel=key[0], ts=key[1], text=text, blocks=blocks)
                self.edits += 1
            except Exception as e:  # Slack down: the audit store has it all
                log.warning("chat.update %s failed: %s", key, slack_error(e))
            if key not in self._pending:
                for f in self._waiters.pop(key, []):
                    if not f.done():
                        f.set_result(None)
            if len(self._last) > 2000:
                cutoff = now - 3600
                self._last = {k: v for k, v in self._last.items() if v > cutoff or k in self._pending}

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), max(0.01, seconds))
        except asyncio.TimeoutError:
            pass

    async def aclose(self, timeout: float = 5.0) -> None:
        for key in list(self._pending):
            await self.flush(*key, timeout=timeout)
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass


# -- shared state of one app -------------------------------------------------------------

@dataclass
class Posted:
    ts: str | None
    channel: str | None = None
    error: str | None = None


@dataclass
class PendingApproval:
    request: ApprovalRequest
    future: asyncio.Future[tuple[bool, str]]   # (approved, by whom)
    channel: str | None = None
    ts: str | None = None


class SlackContext:
    """What the listeners, observers and approvers of one app share."""

    def __init__(self, services: Services, client: AsyncWebClient):
        self.services = services
        self.settings: Settings = services.settings
        self.client = client
        self.coalescer = UpdateCoalescer(client, per_message_s=max(1.0, self.settings.slack.progress_interval_s))
        self.pending: dict[str, PendingApproval] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.runs: dict[int, asyncio.Task[RunOutcome]] = {}
        self.redact = services.redactor.text

    def spawn(self, coro: Coroutine[Any, Any, _T], name: str = "eagle-slack") -> asyncio.Task[_T]:
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("slack task %s failed", task.get_name(), exc_info=task.exception())

    async def post(self, channel: str, text: str, blocks: list[dict[str, Any]] | None = None, *,
                   thread_ts: str | None = None, broadcast: bool = False) -> Posted:
        """chat.postMessage with the bot token; never raises."""
        try:
            kw: dict[str, Any] = {"channel": channel, "text": self.redact(text)[:3000]}
            if blocks:
                kw["blocks"] = self.blocks(blocks)
            if thread_ts:
                kw["thread_ts"] = thread_ts
                if broadcast:
                    kw["reply_broadcast"] = True
            resp = await self.client.chat_postMessage(**kw)
            ts, ch = resp.get("ts"), resp.get("channel") or channel
            if ts:
                self.coalescer.posted(ch, ts)
            return Posted(ts, ch)
        except Exception as e:
            err = slack_error(e)
            log.warning("chat.postMessage to %s failed: %s", channel, err)
            return Posted(None, channel, err)

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]]) -> None:
        self.coalescer.update(channel, ts, self.redact(text)[:3000], self.blocks(blocks))

    def blocks(self, blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Within Slack's limits, and no secret in any text (belt and braces: the store is redacted too)."""
        def walk(v: Any) -> Any:
            if isinstance(v, dict):
                return {k: (self.redact(x) if k == "text" and isinstance(x, str) else walk(x)) for k, x in v.items()}
            if isinstance(v, list):
                return [walk(x) for x in v]
            return v

        limited: list[dict[str, Any]] = budget.fit(walk(bk.limit(blocks)))
        return limited

    async def respond(self, response_url: str | None, text: str, blocks: list[dict[str, Any]] | None = None, *,
                      public: bool = False) -> bool:
        """Answer through the command's response_url (valid 30 min, 5 times); never raises."""
        if not response_url:
            return False
        try:
            resp = await AsyncWebhookClient(response_url, timeout=15).send(
                text=self.redact(text)[:3000], blocks=self.blocks(blocks) if blocks else None,
                response_type="in_channel" if public else "ephemeral", replace_original=False)
            if resp.status_code >= 400:
                log.warning("response_url answered %s", resp.status_code)
                return False
            return True
        except Exception as e:
            log.warning("response_url failed: %s", type(e).__name__)
            return False

    async def upload(self, channel: str, thread_ts: str | None, path: str | Path, title: str) -> Posted:
        try:
            resp = await self.client.files_upload_v2(channel=channel, thread_ts=thread_ts, file=str(path),
                                                     filename=Path(path).name, title=title)
            info: dict[str, Any] = resp.get("file", {}) if hasattr(resp, "get") else {}
            return Posted(info.get("id"), channel)
        except Exception as e:
            err = slack_error(e)
            log.warning("files_upload_v2 to %s failed: %s", channel, err)
            return Posted(None, channel, err)

    def invite_hint(self, channel: str | None, run_id: int | None = None) -> str:
        where = f"<#{channel}>" if channel else "this channel"
        after = f" Run #{run_id} keeps running; `/eagle show {run_id}` has everything." if run_id else ""
        return (f":wave: I can't post in {where}: invite me with `/invite @eaglebot` "
                f"(or run the command in a channel I'm in).{after}")


# -- runs ----------------------------------------------------------------------------------

class SlackRunObserver(Observer):
    """A run in Slack: a parent message in the channel, progress and summary in its thread.

    The engine's calls only change in-memory state; one worker task does the posting,
    so a slow or failing Slack never blocks a run.
    """

    def __init__(self, ctx: SlackContext, channel: str | None, requester: str | None = None,
                 response_url: str | None = None, anchor: bool = False):
        self.ctx = ctx
        # Scheduled runs end with the audit chain's head: an anchor kept outside the DB, in
        # Slack, that `eagle audit verify --head HASH` checks (store/chain.py).
        self.anchor = anchor
        self.channel = channel
        self.requester = requester
        self.response_url = response_url
        self.parent_ts: str | None = None
        self.progress_ts: str | None = None
        self.thread_ready = asyncio.Event()
        self.view: dict[str, Any] = {"status": "running", "steps": [], "playbook": "?", "hosts": []}
        self._steps: dict[tuple[str, int], dict[str, Any]] = {}
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._t0 = time.monotonic()
        self.outcome: RunOutcome | None = None
        self.run_id: int | None = None
        self.not_in_channel = False
        self._full_text: str | None = None

    # engine callbacks: cheap, never wait on Slack
    async def run_started(self, run_id: int, playbook: Playbook, hosts: list[str], req: RunRequest) -> None:
        self.run_id = run_id
        self.view.update(run_id=run_id, playbook=playbook.name, hosts=list(hosts), actor=self.requester or req.actor,
                         dry_run=req.dry_run)
        self._t0 = time.monotonic()
        self._task = self.ctx.spawn(self._work(), name=f"eagle-run-{run_id}-slack")

    async def step_started(self, run_id: int, rec: StepRecord) -> None:
        self._step(rec)

    async def step_finished(self, run_id: int, rec: StepRecord, result: StepResult) -> None:
        self._step(rec)

    async def step_heartbeat(self, run_id: int, rec: StepRecord, elapsed_s: float, last_line: str) -> None:
        """A long step shows it is alive in the progress message (edits go through the coalescer)."""
        entry = self._steps.get((rec.host, rec.idx))
        if entry is None or entry["status"] != "running":
            return
        last = f" — last: {bk.clip(last_line.strip(), 150)}" if last_line.strip() else ""
        entry["summary"] = f"running for {fmt_duration(elapsed_s)}{last}"
        self.view["steps"] = list(self._steps.values())
        self._dirty.set()

    async def run_finished(self, outcome: RunOutcome) -> None:
        self.outcome = outcome
        self.view.update(status=outcome.status, duration_s=time.monotonic() - self._t0, error=outcome.error)
        for rec in outcome.steps:
            self._step(rec)
        self._dirty.set()
        if self._task is None:  # run_started was never called (should not happen)
            self._task = self.ctx.spawn(self._work())

    def set_note(self, note: str | None) -> None:
        self.view["note"] = note
        self._dirty.set()

    def _step(self, rec: StepRecord) -> None:
        multi = len(self.view.get("hosts") or []) > 1
        self._steps[(rec.host, rec.idx)] = {
            "host": rec.host, "name": rec.name, "status": rec.status, "summary": rec.summary,
            "duration_ms": rec.duration_ms, "output_tail": rec.output_tail if rec.status == "failed" else "",
            "multi_host": multi}
        self.view["steps"] = list(self._steps.values())
        self._dirty.set()

    # the worker: all Slack calls of this run
    def _parent_text(self) -> str:
        v = self.view
        return (f"{v['playbook']} on {', '.join(v['hosts'])} by {bk.mention(v.get('actor'))}"
                f" — {v['status']}" + (f" (run #{v.get('run_id')})" if v.get("run_id") else ""))

    async def _work(self) -> None:
        ctx, v = self.ctx, self.view
        try:
            if self.channel:
                posted = await ctx.post(self.channel, self._parent_text(), bk.run_parent_blocks(v))
                if posted.ts and posted.channel:   # (a posted message has both)
                    self.channel, self.parent_ts = posted.channel, posted.ts
                    try:
                        if self.run_id is not None:   # (it is: run_started came first)
                            await ctx.services.store.set_run_thread(self.run_id, self.channel, self.parent_ts)
                    except Exception:
                        log.exception("could not record the thread of run %s", self.run_id)
                    prog = await ctx.post(self.channel, "progress", budget.progress_blocks(v),
                                          thread_ts=self.parent_ts)
                    self.progress_ts = prog.ts
                elif posted.error in NOT_IN_CHANNEL:
                    self.not_in_channel = True
                    await ctx.respond(self.response_url, ctx.invite_hint(self.channel, self.run_id))
        finally:
            self.thread_ready.set()
        last_parent: Any = None
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self.parent_ts and self.channel:
                parent = bk.run_parent_blocks(v)
                if parent != last_parent:
                    ctx.update(self.channel, self.parent_ts, self._parent_text(), parent)
                    last_parent = parent
            if self.progress_ts and self.channel:
                ctx.update(self.channel, self.progress_ts, "progress", budget.progress_blocks(v))
            if self.outcome is not None:
                break
        await self._final()

    async def _final(self) -> None:
        ctx, o = self.ctx, self.outcome
        assert o is not None
        for ts in (self.parent_ts, self.progress_ts):
            if ts and self.channel:
                await ctx.coalescer.flush(self.channel, ts)
        if not self.channel:
            return
        summary = await self._summary(o)
        regressions = [r for r in summary.get("regressions") or [] if r.get("kind", "regression") == "regression"]
        who = bk.mention(self.requester) if self.requester else ""
        head = f"{who} run #{o.run_id} *{bk.escape(o.playbook)}* finished: *{o.status}*".strip()
        if regressions:
            head += f" — :rotating_light: {len(regressions)} regression(s)"
        blocks = [bk.section(head)] + bk.run_summary_blocks(summary)
        files = await self._attachments(o, summary, too_long=budget.summary_is_too_long(blocks))
        if files and files[0][0].endswith("-summary.txt"):
            blocks = budget.summary_blocks(head, summary, files[0][0])
        text = f"{who} run #{o.run_id} {o.playbook}: {o.status}".strip()
        anchor = await self._audit_head() if self.anchor else None
        if anchor:
            blocks.append(bk.context(f"audit head: `{anchor}`"))
            text += f" (audit head: {anchor})"
        if self.not_in_channel:
            # The requester got the invite hint; the result reaches them while response_url lives (30 min).
            await ctx.respond(self.response_url, text, blocks)
            return
        await ctx.post(self.channel, text, blocks, thread_ts=self.parent_ts,
                       broadcast=bool(regressions and self.parent_ts))
        await self._upload(files)

    async def _audit_head(self) -> str | None:
        try:
            head = (await self.ctx.services.store.audit_head())["hash"]
            return str(head) if head else None
        except Exception:  # the summary still goes out without its anchor
            log.exception("could not read the audit chain's head")
            return None

    async def _attachments(self, o: RunOutcome, summary: dict[str, Any], *, too_long: bool) -> list[tuple[str, str]]:
        """(file name, text) to attach to the thread: the full summary when it does not fit in a
        message, and the full log of every failed step (the summary shows only its tail)."""
        files: list[tuple[str, str]] = []
        if too_long:
            files.append((f"run-{o.run_id}-summary.txt", self._full_text or budget_text(summary)))
        try:
            rows = await self.ctx.services.store.steps(o.run_id)
        except Exception:
            log.exception("could not read the steps of run %s", o.run_id)
            rows = []
        failed = [r for r in rows if r["status"] == "failed" and (r.get("output") or "").strip()]
        for r in failed[:3]:
            name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{r['host']}-{r['name']}")[:80]
            files.append((f"run-{o.run_id}-{name}.log", str(r["output"])))
        if len(failed) > 3:
            files.append((f"run-{o.run_id}-more-failed-logs.log", "\n\n".join(
                f"== {r['host']}: {r['name']}\n{r['output']}" for r in failed[3:])))
        return files

    async def _upload(self, files: list[tuple[str, str]]) -> None:
        if not files or not self.channel:
            return
        with tempfile.TemporaryDirectory(prefix="eagle-slack-") as d:
            for name, text in files:
                path = Path(d) / name
                path.write_text(self.ctx.redact(text))
                up = await self.ctx.upload(self.channel, self.parent_ts, path, name)
                if up.error:
                    log.warning("could not attach %s to run #%s: %s", name, self.run_id, up.error)


    async def _summary(self, o: RunOutcome) -> dict[str, Any]:
        """The run as the audit store has it, the view `/eagle show` renders too, plus the
        engine's dry-run plan (which the store does not keep). If the store cannot be read,
        the live view (steps and status) still tells how the run ended."""
        try:
            view = await self.ctx.services.store.call(lambda s: RunView.load(s, o.run_id))
        except Exception:
            log.exception("could not read run %s back from the audit store", o.run_id)
            view = None
        summary: dict[str, Any] = dict(view.summary()) if view is not None else dict(self.view)
        summary["plan"] = list(o.plan)
        self._full_text = show_text(view) if view is not None else None
        return summary


def budget_text(summary: dict[str, Any]) -> str:
    """A plain-text summary when the audit store could not be read back (the live view)."""
    lines = [f"run #{summary.get('run_id')} {summary.get('playbook')}: {summary.get('status')}"]
    lines += [f"{s['host']}  {s['name']}  {s['status']}  {s.get('summary') or ''}" for s in summary.get("steps") or []]
    return "\n".join(lines)


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
        key = secrets.token_urlsafe(12)
        pending = PendingApproval(ar, asyncio.get_running_loop().create_future(), self.channel)
        ctx.pending[key] = pending
        obs = self.observer
        if obs:
            obs.set_note("waiting for approval")
        post_task: asyncio.Task[None] | None = None
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
            return await pending.future
        finally:
            ctx.pending.pop(key, None)
            if obs:
                obs.set_note(None)
            # Awaiting the future directly means a timeout cancels it too.
            if not pending.future.done() or pending.future.cancelled():
                pending.future.cancel()
                if post_task is not None:
                    post_task.add_done_callback(lambda _t: self._timed_out(pending))

    async def _post(self, pending: PendingApproval, channel: str, key: str, thread: str | None) -> None:
        ctx, ar = self.ctx, pending.request
        approvers = ctx.settings.access.approvers
        mentions = " ".join(bk.mention(a) for a in approvers if a != "*")
        text = f"{mentions} approval needed for run #{ar.run_id} on {ar.host}: {ar.action}".strip()
        posted = await ctx.post(channel, text, bk.approval_blocks(
            ar, key, approvers, ctx.settings.access.approval_timeout_s), thread_ts=thread)
        pending.ts = posted.ts
        await record_approval_message(ctx, ar, posted.channel or channel, posted.ts,
                                      self.observer.requester if self.observer else None)

    def _timed_out(self, pending: PendingApproval) -> None:
        if pending.ts and pending.channel:
            self.ctx.update(pending.channel, pending.ts, "no decision in time: denied",
                            bk.approval_decided_blocks(pending.request, "timeout", None))

    @staticmethod
    async def decide(ctx: SlackContext, body: dict[str, Any], action: dict[str, Any]) -> None:
        """A click on Approve or Deny (after the ack)."""
        user = (body.get("user") or {}).get("id", "")
        response_url = body.get("response_url")
        key = str(action.get("value") or "")
        approve = action.get("action_id") == bk.APPROVE_ACTION
        pending = ctx.pending.get(key)
        if pending is None or pending.future.done():
            await ctx.respond(response_url, "This approval is no longer waiting (it was decided or timed out).")
            return
        ar = pending.request
        run = await ctx.services.store.get_run(ar.run_id)
        why = commands.authorize_approval(ctx.settings.access, user, run["actor"] if run else None,
                                          configured=ctx.settings.access_configured)
        if why:
            await ctx.services.store.add_rejection("access_denied", user,
                                                   f"{'approve' if approve else 'deny'} {ar.action!r} on {ar.host}",
                                                   why, ar.run_id)
            await ctx.respond(response_url, f":no_entry: {bk.escape(why)}; your click was recorded.")
            return
        pending.future.set_result((approve, user))
        decision = "approved" if approve else "denied"
        if pending.ts and pending.channel:
            ctx.update(pending.channel, pending.ts, f"{decision} by {user}",
                       bk.approval_decided_blocks(ar, decision, user))


async def record_approval_message(ctx: SlackContext, ar: ApprovalRequest, channel: str | None, ts: str | None,
                                  requester: str | None) -> None:
    """The approval row remembers its Slack message, so a restart can resolve it visibly."""
    try:
        row = await ctx.services.store.pending_approval(ar.run_id, ar.step_idx, ar.host)
        if row is not None:
            await ctx.services.store.set_approval_message(row["id"], channel, ts, requester)
    except Exception:
        log.exception("could not record the approval message of run %s", ar.run_id)


class SlackFrontend:
    """What `commands.handle` needs for a run started from a slash command."""

    def __init__(self, ctx: SlackContext, channel: str | None, user: str, response_url: str | None):
        self.ctx, self.channel, self.user, self.response_url = ctx, channel, user, response_url

    def observer(self, req: RunRequest) -> Observer:
        return SlackRunObserver(self.ctx, self.channel, self.user, self.response_url)

    def approver(self, req: RunRequest, observer: Observer | None) -> SlackApprover:
        return SlackApprover(self.ctx, observer if isinstance(observer, SlackRunObserver) else None, self.channel)


class SlackScheduleHooks:
    """What the scheduler needs from Slack (`scheduler.Hooks`); `eagle serve` hands it over."""

    def __init__(self, ctx: SlackContext):
        self.ctx = ctx

    def observer(self, schedule_cfg: ScheduleConfig) -> Observer:
        channel = getattr(schedule_cfg, "channel", None) or self.ctx.settings.slack.channel
        return SlackRunObserver(self.ctx, channel, None, None, anchor=True) if channel else Observer()

    async def post(self, channel: str | None, text: str) -> str | None:
        channel = channel or self.ctx.settings.slack.channel
        if not channel:
            log.warning("no Slack channel for: %s", text)
            return None
        return (await self.ctx.post(channel, text, [bk.section(bk.escape(text))])).ts

    async def upload(self, channel: str | None, thread_ts: str | None, path: str | Path, title: str) -> None:
        channel = channel or self.ctx.settings.slack.channel
        if channel:
            await self.ctx.upload(channel, thread_ts, path, title)


# -- the app ---------------------------------------------------------------------------------

@dataclass
class SlackBot:
    app: AsyncApp
    ctx: SlackContext
    hooks: SlackScheduleHooks = field(init=False)

    def __post_init__(self) -> None:
        self.hooks = SlackScheduleHooks(self.ctx)

    async def aclose(self, grace_s: float = 30.0) -> None:
        """Cancel the runs this bot started (their always-steps run), then stop posting."""
        runs = {rid: t for rid, t in self.ctx.runs.items() if not t.done()}
        for rid in runs:
            self.ctx.services.engine.cancel(rid)
        if runs:
            await asyncio.wait(runs.values(), timeout=grace_s)
        if self.ctx.tasks:
            await asyncio.wait(list(self.ctx.tasks), timeout=5)
        await self.ctx.coalescer.aclose()


def build_app(services: Services, *, client: AsyncWebClient | None = None, token: str | None = None,
              signing_secret: str | None = None, identity: dict[str, Any] | None = None) -> SlackBot:
    """A Bolt AsyncApp for `services`. Tokens come from the caller (the environment), never the config."""
    client = client or make_client(services.settings, token)
    ctx = SlackContext(services, client)
    cache: dict[str, Any] = {"identity": identity}

    async def authorize(enterprise_id: str | None, team_id: str | None, logger: logging.Logger) -> AuthorizeResult:
        # One auth.test for the life of the app (`eagle serve` does it at start), not per request.
        if cache["identity"] is None:
            cache["identity"] = (await client.auth_test()).data
        return AuthorizeResult.from_auth_test_response(auth_test_response=cache["identity"],
                                                       bot_token=client.token)

    # Bolt's own client carries no token: each request gets the bot token from `authorize`.
    bolt_client = AsyncWebClient(base_url=client.base_url, timeout=client.timeout,
                                 retry_handlers=list(client.retry_handlers or []))
    secret = signing_secret or secrets.token_hex(32)
    app = GuardedApp(
        client=bolt_client,
        # Without a secret (Socket Mode) no HTTP request can be signed correctly.
        signing_secret=secret,
        authorize=authorize,
        raise_error_for_unhandled_request=False,
        # Our listeners only parse, check access, ack and spawn: running them inline answers
        # Slack sooner than Bolt's background-listener mode, which polls for the ack every 10 ms.
        process_before_response=True,
    )
    app.eagle_signing_secret = secret

    def rejected(actor: str, what: str, why: str) -> None:
        # After the answer, off the request's path: the ack never waits on the DB.
        # (printable: a Socket Mode payload's JSON may carry a lone surrogate, which SQLite refuses)
        ctx.spawn(services.store.add_rejection("rejected", printable(actor) or "unknown",
                                               services.redactor.text(printable(what)), printable(why)),
                  name="eagle-rejected")
    app.eagle_reject = rejected

    @app.command(re.compile(r"^/eagle"))
    async def on_eagle(ack: AsyncAck, body: dict[str, Any]) -> None:
        text = body.get("text") or ""
        user = body.get("user_id") or ""
        cmd = commands.parse(text)
        if cmd.error:
            await ack(text=f":warning: {bk.escape(services.redactor.text(cmd.error))}")
            return
        why = commands.authorize(services.settings.access, cmd, user, configured=services.settings.access_configured)
        if why:
            await ack(text=f":no_entry: {bk.escape(why)}")
            ctx.spawn(commands.audit_refusal(services, user, cmd, why), name="eagle-refusal")
            return
        await ack()
        ctx.spawn(_execute(ctx, cmd, user, body.get("channel_id"), body.get("response_url")), name="eagle-command")

    @app.action(re.compile(f"^({bk.APPROVE_ACTION}|{bk.DENY_ACTION})$"))
    async def on_approval(ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        ctx.spawn(SlackApprover.decide(ctx, body, action), name="eagle-approval")

    register_tuning(app, ctx, _execute)   # the sweep's "Apply best" button
    return SlackBot(app, ctx)


async def _execute(ctx: SlackContext, cmd: commands.Command, user: str, channel: str | None,
                   response_url: str | None) -> None:
    """Everything after the ack: the router, then the reply where it belongs."""
    caller = commands.Caller(user, channel=channel, origin="slack",
                             frontend=SlackFrontend(ctx, channel, user, response_url))
    reply = await commands.handle(ctx.services, cmd, caller)
    if reply.task is not None:
        if reply.run_id is not None:
            ctx.runs[reply.run_id] = reply.task
            reply.task.add_done_callback(functools.partial(_run_done, ctx, reply.run_id))
        if not channel:
            await ctx.respond(response_url, reply.text)
        return
    if reply.file is not None and channel:
        parent = await ctx.post(channel, reply.text, reply_blocks(reply))
        if parent.ts:
            up = await ctx.upload(channel, parent.ts, reply.file, reply.file.name)
            if up.error:
                await ctx.respond(response_url, f"could not upload the plot: {up.error}")
        elif parent.error in NOT_IN_CHANNEL:
            await ctx.respond(response_url, ctx.invite_hint(channel))
        return
    await ctx.respond(response_url, reply.text, reply_blocks(reply), public=reply.public and not reply.is_error)


def _run_done(ctx: SlackContext, run_id: int, task: asyncio.Task[RunOutcome]) -> None:
    ctx.runs.pop(run_id, None)
    if not task.cancelled() and task.exception() is not None:
        log.error("run #%s crashed", run_id, exc_info=task.exception())
