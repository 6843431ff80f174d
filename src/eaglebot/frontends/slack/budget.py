"""Slack's whole-message limit: every message the bot posts or edits stays within a budget.

Slack answers `msg_blocks_too_long` once the text of a message's blocks adds up to roughly
11-13k characters, even when every block is within its own limit (slackapi/bolt-js #2509,
#2867; REFERENCE.md "Slack message size"). slack_sdk checks neither, so this module does:
`fit` is the last guard for every message (it keeps the blocks in order while they fit and
says how many it left out); `progress_blocks` and `summary_blocks` summarise a large run with
counts up front, and the observer uploads the full text to the thread as a file.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

from eaglebot.frontends.format import fmt_value
from eaglebot.frontends.slack import blocks as bk
from eaglebot.history.reasons import clip_items

MESSAGE_BUDGET = 11_000   # characters of text in all the blocks of one message together
_NOTE_RESERVE = 300       # room for the note that says what was left out


def text_len(blocks: object) -> int:
    """Characters of text in blocks, counted the way Slack's limit counts them: every `text`."""
    if isinstance(blocks, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else text_len(v) for k, v in blocks.items())
    if isinstance(blocks, list):
        return sum(text_len(b) for b in blocks)
    return 0


def fit(blocks: list[dict[str, Any]], budget: int = MESSAGE_BUDGET,
        note: str = "the full text is in the audit store (`/eagle show`)") -> list[dict[str, Any]]:
    """The blocks in order while they fit in `budget` (and Slack's 50 blocks); the rest replaced
    by one line saying how many were left out. Buttons (actions blocks) are always kept."""
    blocks = bk.limit(blocks)
    if text_len(blocks) <= budget:
        return blocks
    keep: list[dict[str, Any]] = []
    room = budget - _NOTE_RESERVE - text_len([b for b in blocks if b.get("type") == "actions"])
    cut = 0
    for b in blocks:
        n = text_len(b)
        if b.get("type") == "actions":
            keep.append(b)
        elif not cut and n <= room:
            keep.append(b)
            room -= n
        else:
            cut += 1
    keep.append(bk.context(f"_{cut} more block(s) left out to stay within Slack's message size: {bk.clip(note, 200)}_"))
    return keep


def status_counts(steps: list[Mapping[str, Any]]) -> str:
    c = Counter(s["status"] for s in steps)
    order = ["running", "failed", "unreachable", "ok", "changed", "skipped", "pending"]
    parts = [f"{c[k]} {k}" for k in order if c.get(k)] + [f"{n} {k}" for k, n in c.items() if k not in order]
    return ", ".join(parts)


def _hosts_line(label: str, hosts: list[str], limit: int = 20) -> str:
    shown = ", ".join(f"`{bk.escape(h)}`" for h in hosts[:limit])
    more = f" and {len(hosts) - limit} more" if len(hosts) > limit else ""
    return f"{label} ({len(hosts)}): {shown}{more}"


def progress_blocks(view: Mapping[str, Any], budget: int = MESSAGE_BUDGET // 2) -> list[dict[str, Any]]:
    """The progress message: every step line when they fit, else counts per status plus the
    steps that are running or failed."""
    full = bk.run_progress_blocks(view)
    if text_len(full) <= budget:
        return full
    steps = list(view.get("steps") or [])
    hosts = sorted({s["host"] for s in steps})
    lines = [f"*{len(steps)} steps on {len(hosts)} host(s)*: {status_counts(steps)}"]
    failed = sorted({s["host"] for s in steps if s["status"] == "failed"})
    if failed:
        lines.append(":x: " + _hosts_line("failed on", failed))
    interesting = [s for s in steps if s["status"] in ("running", "failed")]
    out = [bk.section("\n".join(lines))]
    out += [bk.section(t) for t in bk._join_lines([bk._step_line(s) for s in interesting])]
    return fit(out, budget, "the full list is in the summary file at the end")


def summary_is_too_long(blocks: list[dict[str, Any]]) -> bool:
    return text_len(blocks) > MESSAGE_BUDGET or len(blocks) > bk.MAX_BLOCKS


def summary_blocks(head: str, view: Mapping[str, Any], attached: str) -> list[dict[str, Any]]:
    """A run's final summary in counts, for a run too large for one message; `attached` names
    the file with the full text."""
    rid = view.get("run_id")
    status = view["status"]
    steps = list(view.get("steps") or [])
    hosts = list(view.get("hosts") or sorted({s["host"] for s in steps}))
    out: list[dict[str, Any]] = [bk.section(head), bk.header(f"run #{rid} {view['playbook']}: {status}")]
    out.append(bk.context(f"{bk.run_title({**view, 'hosts': [f'{len(hosts)} hosts']})} · `/eagle show {rid}`"))
    lines = [f"*{len(steps)} steps on {len(hosts)} host(s)*: {status_counts(steps)}"]
    failed = [s for s in steps if s["status"] == "failed"]
    if failed:
        lines.append(":x: " + _hosts_line("failed on", sorted({s["host"] for s in failed})))
    recap = view.get("recap") or []
    for word, mark in (("unreachable", ":electric_plug:"), ("untouched", ":double_vertical_bar:")):
        named = [h["name"] for h in recap if h["status"] == word]
        if named:
            lines.append(f"{mark} " + _hosts_line(word, named))
    if view.get("error") and status != "succeeded":
        lines.append(f":x: *{bk.escape(bk.clip(view['error'], 500))}*")
    out.append(bk.section("\n".join(lines)))
    regs = [r for r in view.get("regressions") or [] if r.get("kind", "regression") == "regression"]
    if regs:
        shown = regs[:10]
        rl = [f":rotating_light: *{len(regs)} regression(s)*"
              + (f" (the first {len(shown)}; all of them in `{attached}`)" if len(regs) > len(shown) else "")]
        rl += [f"• `{bk.escape(r.get('host') or '')}` {bk.escape(r['metric'])}: {fmt_value(r['reference'])} → "
               f"{fmt_value(r['value'])} ({r['delta_pct']:+.1f}%)" for r in shown]
        out.append(bk.section(bk.clip("\n".join(rl), bk.MAX_SECTION)))
    if failed:
        first = failed[0]
        tail, _ = bk.tail(str(first.get("output_tail") or ""), 1500)
        if tail:
            out.append(bk.context(f"log tail of *{bk.escape(first['name'])}* on `{bk.escape(first['host'])}` "
                                  "(the full log is attached)"))
            out += bk.code_sections(tail, max_blocks=1, keep="tail")
    metrics = list(view.get("metrics") or [])
    if metrics:
        fields = [f"*{bk.escape(m['name'])}* ({bk.escape(m['host'])})\n{fmt_value(m['value'], m.get('unit') or '')}"
                  for m in metrics[:bk.MAX_FIELDS]]
        out.append(bk.section(f"*key metrics* ({len(metrics)} in all)", fields))
    warnings = list(view.get("warnings") or [])
    if warnings:
        out.append(bk.section(f":warning: *{len(warnings)} warning(s)*, e.g. {bk.escape(clip_items(warnings[0], 300))}"))
    out.append(bk.context(f"too long for one Slack message: the full summary is attached as `{attached}`"))
    return fit(out, note=f"see `{attached}`")
