"""A run in Slack: its parent message, the progress in its thread, and the summary when it ends.

The engine's callbacks only change the observer's in-memory view; one worker task per run
does all the posting, so a slow or failing Slack never blocks a run.
"""
from __future__ import annotations

import asyncio
import logging
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from eaglebot.engine.playbook import Playbook
from eaglebot.engine.runner import Observer, RunOutcome, RunRequest, StepRecord
from eaglebot.frontends.format import fmt_duration, show_text
from eaglebot.frontends.recap_text import recap_table, recap_total
from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack import budget
from eaglebot.frontends.slack.client import NOT_IN_CHANNEL
from eaglebot.frontends.slack.context import SlackContext
from eaglebot.history.view import RunView
from eaglebot.sdk import StepResult

log = logging.getLogger("eaglebot.slack")


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
                        rid, channel, ts = self.run_id, self.channel, self.parent_ts
                        if rid is not None:   # (it is: run_started came first)
                            await ctx.services.store.call(lambda s: s.set_run_thread(rid, channel, ts))
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
        last_parent: list[dict[str, Any]] | None = None
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
            head = (await self.ctx.services.store.call(lambda s: s.audit_head()))["hash"]
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
        recap = summary.get("recap") or []
        if len(recap) > bk.SLACK_RECAP_LINES:  # the message lists the hosts in trouble first
            files.append((f"run-{o.run_id}-recap.txt", f"{recap_total(recap)}\n{recap_table(recap)}\n"))
        try:
            rows = await self.ctx.services.store.call(lambda s: s.steps(o.run_id))
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
