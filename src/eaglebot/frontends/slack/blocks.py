"""Slack Block Kit rendering: pure functions over plain dicts, Slack's limits enforced.

Built with `slack_sdk.models.blocks`; every text that came from a host, a user or a
log is escaped (`&`, `<`, `>`) so output can never ping `<!channel>` or forge a link.
Limits (the SDK does not check the per-message ones): <= 50 blocks, section text
<= 3000 characters, header <= 150, <= 10 fields, context <= 10 elements.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from eaglebot.frontends.format import fmt_duration, fmt_value, slack_times
from eaglebot.frontends.recap_text import recap_table, recap_total
from eaglebot.history.reasons import clip_items
from eaglebot.sdk import ApprovalRequest

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_HEADER = 150
MAX_FIELDS = 10
SLACK_RECAP_LINES = 20  # hosts the run summary's recap lists; more: attached as run-ID-recap.txt
MAX_FIELD = 2000
MAX_CONTEXT = 10
CODE_CHUNK = MAX_SECTION - 8  # room for the ``` fences

APPROVE_ACTION = "eagle_approve"
DENY_ACTION = "eagle_deny"

STATUS_EMOJI = {
    "ok": ":white_check_mark:", "changed": ":large_green_circle:", "skipped": ":white_circle:",
    "failed": ":x:", "running": ":hourglass_flowing_sand:", "pending": ":white_circle:",
    "succeeded": ":white_check_mark:", "cancelled": ":no_entry_sign:", "interrupted": ":warning:",
    "unreachable": ":electric_plug:",
}


def escape(s: object) -> str:
    """Slack's three control characters, so text is shown as typed, never as a mention."""
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_CLI_INPUT = re.compile(r"(?<![\w-])-e (\w+)=")


def slack_syntax(s: str) -> str:
    """A step's advice in Slack's words: the CLI's `-e key=value` is `key=value` after `/eagle PLAYBOOK`."""
    return _CLI_INPUT.sub(r"\1=", s)


def clip(s: str, limit: int, note: str = "…") -> str:
    """At most `limit` characters; never ends inside an escape entity (`&l` of `&lt;`)."""
    if len(s) <= limit:
        return s
    cut = s[: max(0, limit - len(note))]
    amp = cut.rfind("&", max(0, len(cut) - 4))
    if amp >= 0 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + note


def cut_for_escape(raw: str, size: int) -> list[str]:
    """Cut raw text into pieces whose escaped form holds at most `size` characters: cut
    first, escape after, so an entity is never split."""
    if len(raw) * 5 <= size or len(escape(raw)) <= size:
        return [raw]
    out: list[str] = []
    start = n = 0
    for i, ch in enumerate(raw):
        w = 5 if ch == "&" else 4 if ch in "<>" else 1
        if n + w > size:
            out.append(raw[start:i])
            start, n = i, 0
        n += w
    out.append(raw[start:])
    return out


def tail(s: str, limit: int) -> tuple[str, bool]:
    """The last `limit` characters, cut at a line start; True when something was cut."""
    if len(s) <= limit:
        return s, False
    cut = s[-limit:]
    nl = cut.find("\n")
    if 0 <= nl < 200:
        cut = cut[nl + 1:]
    return cut, True


def mention(user: str | None) -> str:
    if not user:
        return "someone"
    if user.startswith("U") or user.startswith("W"):
        return f"<@{escape(user)}>"
    return escape(user)


# -- block constructors ---------------------------------------------------------------------

def section(md: str, fields: Iterable[str] = ()) -> dict[str, Any]:
    fl = [MarkdownTextObject(text=clip(f, MAX_FIELD)) for f in list(fields)[:MAX_FIELDS]]
    if md:
        return SectionBlock(text=MarkdownTextObject(text=clip(md, MAX_SECTION)), fields=fl or None).to_dict()
    return SectionBlock(fields=fl).to_dict()


def header(text: str) -> dict[str, Any]:
    return HeaderBlock(text=PlainTextObject(text=clip(text, MAX_HEADER))).to_dict()


def context(*mds: str) -> dict[str, Any]:
    return ContextBlock(elements=[MarkdownTextObject(text=clip(m, MAX_SECTION)) for m in mds[:MAX_CONTEXT]]).to_dict()


def code_sections(text: str, *, max_blocks: int = 10, keep: str = "head") -> list[dict[str, Any]]:
    """Monospace text in as many sections as it needs (split at lines), with a cut note."""
    text = text.rstrip("\n") or " "
    # A line longer than a chunk is cut into chunk-sized pieces (before escaping, so no
    # entity is split), so none is clipped.
    pieces = [escape(p) for line in text.split("\n") for p in cut_for_escape(line, CODE_CHUNK)]
    chunks = _join_lines(pieces, CODE_CHUNK)
    cut = len(chunks) - max_blocks
    if cut > 0:
        chunks = chunks[:max_blocks] if keep == "head" else chunks[-max_blocks:]
    out = [section(f"```{c}```") for c in chunks]
    if cut > 0:
        out.append(context(f"_{cut} more part(s) cut to fit Slack; the audit store has all of it_"))
    return out


def limit(blocks: list[dict[str, Any]], note: str = "see `/eagle show` for the rest") -> list[dict[str, Any]]:
    """At most 50 blocks: the last one says what was cut."""
    if len(blocks) <= MAX_BLOCKS:
        return blocks
    cut = len(blocks) - (MAX_BLOCKS - 1)
    return blocks[: MAX_BLOCKS - 1] + [context(f"_{cut} more block(s) cut to fit Slack: {note}_")]


def text_blocks(text: str, *, title: str | None = None, code: bool = False) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [header(title)] if title else []
    if code:
        out += code_sections(text, max_blocks=MAX_BLOCKS - len(out) - 1)
    else:
        out += [section(escape(piece)) for piece in cut_for_escape(text, MAX_SECTION) if piece]
    return limit(out)


def error_blocks(message: str) -> list[dict[str, Any]]:
    return [section(f":warning: {slack_times(escape(slack_syntax(message)))}")]


# -- runs ------------------------------------------------------------------------------

def _step_line(s: Mapping[str, Any]) -> str:
    emoji = STATUS_EMOJI.get(s["status"], ":grey_question:")
    took = f" ({s['duration_ms'] / 1000:.1f}s)" if s.get("duration_ms") else ""
    summary = f" — {escape(clip(slack_syntax(s['summary']), 200))}" if s.get("summary") else ""
    host = f"`{escape(s['host'])}` " if s.get("multi_host") else ""
    return f"{emoji} {host}*{escape(s['name'])}*{took}{summary}"


def _join_lines(lines: list[str], limit_chars: int = MAX_SECTION) -> list[str]:
    """Group lines into section-sized texts."""
    out: list[str] = []
    cur = ""
    for line in lines:
        line = clip(line, limit_chars)
        if cur and len(cur) + 1 + len(line) > limit_chars:
            out.append(cur)
            cur = line
        else:
            cur = f"{cur}\n{line}" if cur else line
    if cur:
        out.append(cur)
    return out


def run_title(view: Mapping[str, Any]) -> str:
    hosts = ", ".join(view.get("hosts") or []) or "-"
    dry = " (dry-run)" if view.get("dry_run") else ""
    return f"*{escape(view['playbook'])}*{dry} on `{escape(hosts)}` by {mention(view.get('actor'))}"


def run_parent_blocks(view: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The channel message of a run: who ran what where, and its status."""
    status = view["status"]
    note = f" — {escape(view['note'])}" if view.get("note") and status == "running" else ""
    took = f" in {fmt_duration(view['duration_s'])}" if view.get("duration_s") is not None and status != "running" else ""
    line = f"{STATUS_EMOJI.get(status, '')} {run_title(view)} — *{status}*{took}{note}"
    rid = view.get("run_id")
    ctx = f"run #{rid} · `/eagle show {rid}`" + (f" · `/eagle cancel {rid}`" if status == "running" else "")
    return [section(line), context(ctx)]


def run_progress_blocks(view: Mapping[str, Any]) -> list[dict[str, Any]]:
    steps = view.get("steps") or []
    if not steps:
        return [context("starting…")]
    lines = [_step_line(s) for s in steps]
    blocks = [section(t) for t in _join_lines(lines)]
    return limit(blocks)


def run_summary_blocks(view: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The final summary: steps, key metrics, warnings, regressions, failure and its log tail."""
    status = view["status"]
    rid = view.get("run_id")
    blocks: list[dict[str, Any]] = [header(f"run #{rid} {view['playbook']}: {status}")]
    took = fmt_duration(view.get("duration_s")) if view.get("duration_s") is not None else "-"
    blocks.append(context(f"{run_title(view)} · took {took} · `/eagle show {rid}`"))
    regs = [r for r in view.get("regressions") or [] if r.get("kind", "regression") == "regression"]
    if regs:
        groups: dict[object, list[dict[str, Any]]] = {}   # one line per incident, however many metrics it moved
        for i, r in enumerate(regs):
            key = (r.get("host"), r["incident"]) if r.get("incident") is not None else i
            groups.setdefault(key, []).append(r)
        lines = []
        for group in groups.values():
            r = group[0]
            iid = f" (incident #{r['incident']})" if len(group) > 1 else ""
            moved = ", ".join(f"{escape(g['metric'])}: {fmt_value(g['value'])} vs {fmt_value(g['reference'])} "
                              f"({g['delta_pct']:+.1f}%)" for g in group)
            lines.append(f":rotating_light: *REGRESSION* `{escape(r.get('host') or '')}`{iid} {moved}"
                         f" — {escape(clip_items(r.get('reason') or '', 300))}")
        blocks += [section(t) for t in _join_lines(lines)]
    if view.get("error") and status != "succeeded":
        blocks.append(section(f":x: *{escape(clip(slack_syntax(view['error']), 2800))}*"))
    steps = view.get("steps") or []
    if steps:
        blocks += [section(t) for t in _join_lines([_step_line(s) for s in steps])][:15]
    failed = [s for s in steps if s["status"] == "failed" and s.get("output_tail")]
    for s in failed[:2]:
        text, cut = tail(s["output_tail"], 2500)
        blocks.append(context(f"log tail of *{escape(s['name'])}* on `{escape(s['host'])}`"
                              + (" (truncated: `/eagle show` has the rest)" if cut else "")))
        blocks += code_sections(text, max_blocks=1, keep="tail")
    metrics = view.get("metrics") or []
    if metrics:
        multi = len({m["host"] for m in metrics}) > 1
        fields = [f"*{escape(m['name'])}*{' (' + escape(m['host']) + ')' if multi else ''}\n"
                  f"{fmt_value(m['value'], m.get('unit') or '')}" for m in metrics]
        blocks.append(section("*key metrics*", fields[:MAX_FIELDS]))
        if len(fields) > MAX_FIELDS:
            blocks.append(context(f"_{len(fields) - MAX_FIELDS} more metric(s): `/eagle show {rid}`_"))
    warnings = view.get("warnings") or []
    if warnings:
        blocks += [section(t) for t in _join_lines([":warning: *warnings*"] + [f"• {escape(clip(slack_syntax(w), 500))}"
                                                                             for w in warnings])][:5]
    recap = view.get("recap") or []
    if recap:  # the hosts in trouble first; all of them in the attached run-ID-recap.txt
        blocks.append(section(f"*recap* {escape(recap_total(recap))}"))
        blocks += code_sections(recap_table(recap, limit=SLACK_RECAP_LINES), max_blocks=1)
    plan = view.get("plan") or []
    if plan:
        blocks.append(section("*plan* (dry-run: nothing was run on the hosts)"))
        blocks += code_sections("\n".join(plan), max_blocks=5)
    return limit(blocks, f"`/eagle show {rid}`")


# -- approvals --------------------------------------------------------------------------------

def approvers_text(approvers: list[str], requester: str | None = None, self_approval: bool = True) -> str:
    """Who may decide, in words: never the requester when self-approval is off."""
    if not approvers:
        return "nobody yet (set access.approvers in eagle.yaml)"
    excluded = requester if requester and not self_approval else None
    named = [a for a in approvers if a != "*" and a != excluded]
    if "*" in approvers:
        who = " ".join(mention(a) for a in named) or "any approver"
        return f"{who} but not {mention(excluded)}, who asked (self-approval is off)" if excluded else who
    if not named:
        return (f"nobody: the only approver, {mention(excluded)}, asked for this run and self-approval is off "
                "(add approvers or set access.self_approval: true)")
    return " ".join(mention(a) for a in named)


def approval_blocks(req: ApprovalRequest, key: str, approvers: list[str], timeout_s: float,
                    requester: str | None = None, self_approval: bool = True) -> list[dict[str, Any]]:
    """Approve / Deny buttons saying exactly what will happen and who may decide."""
    who = approvers_text(approvers, requester, self_approval)
    blocks = [
        section(f":raised_hand: *Approval needed* for run #{req.run_id} on `{escape(req.host)}`, "
                f"step *{escape(req.step)}*:\n{escape(req.action)}"),
    ]
    if req.details:
        blocks += code_sections("\n".join(req.details), max_blocks=3)
    blocks.append(ActionsBlock(block_id=f"eagle_approval_{key}", elements=[
        ButtonElement(text="Approve", action_id=APPROVE_ACTION, value=key, style="primary"),
        ButtonElement(text="Deny", action_id=DENY_ACTION, value=key, style="danger"),
    ]).to_dict())
    blocks.append(context(f"Only approvers can decide: {who}. No answer within "
                          f"{fmt_duration(timeout_s)} means deny."))
    return limit(blocks)


def decision_text(decision: str, who: str | None = None, at: str | None = None) -> str:
    """The outcome as it was: approved by X, denied by X, cancelled by X, expired at T."""
    if decision == "expired":
        return f"Expired at {at or '?'} UTC with no decision: denied, nothing was done"
    verb = {"approved": "Approved", "denied": "Denied", "cancelled": "Cancelled"}.get(decision, decision)
    if decision == "cancelled":
        return f"{verb}{f' by {mention(who)}' if who else ''}: the run was cancelled while it waited"
    return f"{verb}{f' by {mention(who)}' if who else ''}"


def approval_decided_blocks(req: ApprovalRequest, decision: str, who: str | None,
                            at: str | None = None) -> list[dict[str, Any]]:
    icon = {"approved": ":white_check_mark:", "denied": ":no_entry:", "cancelled": ":black_square_for_stop:",
            "expired": ":hourglass:"}.get(decision, "")
    left = f"\n*{escape(req.if_refused)}*" if req.if_refused and decision in ("denied", "expired") else ""
    blocks = [section(f"{icon} {decision_text(decision, who, at)}: run #{req.run_id} on `{escape(req.host)}`, step *{escape(req.step)}*:\n"
                      f"{escape(req.action)}{left}")]
    if req.details:
        blocks += code_sections("\n".join(req.details), max_blocks=3)
    return limit(blocks)
