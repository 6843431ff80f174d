"""A router `Reply` as Block Kit: the Slack face of what `eagle chat` prints as text
(`chat/reply.py` holds the `Reply` and its typed bodies)."""
from __future__ import annotations

from typing import Any

from eaglebot.frontends.chat.reply import (Body, CancelRequested, Failure, Listing, LogTail, Note, Reply,
                                           RunShown, SweepDone, TuneDone)
from eaglebot.frontends.slack import blocks as bk
from eaglebot.frontends.slack.tuning import sweep_blocks, tune_blocks

LOG_CHARS = 3500  # of a server log's tail: two code sections, well inside one message
NOTE_MARKS = {"baseline": ":triangular_flag_on_post: "}


def reply_blocks(reply: Reply) -> list[dict[str, Any]]:
    return body_blocks(reply.body)


def body_blocks(body: Body) -> list[dict[str, Any]]:
    if isinstance(body, Listing):
        return bk.text_blocks(body.text, title=body.title, code=True)
    if isinstance(body, Failure):
        return bk.error_blocks(body.message)
    if isinstance(body, Note):
        return [bk.section(NOTE_MARKS.get(body.mark or "", "") + bk.escape(body.text))]
    if isinstance(body, CancelRequested):
        return [bk.section(f":no_entry_sign: cancel requested for run #{body.run_id} "
                           f"(*{bk.escape(body.playbook)}*) by {bk.mention(body.by)}; "
                           "its always-steps still run")]
    if isinstance(body, RunShown):
        return bk.run_summary_blocks(body.view.summary())
    if isinstance(body, LogTail):
        shown, cut = bk.tail(body.text, LOG_CHARS)
        blocks = [bk.header(f"server log on {body.host}")] + bk.code_sections(shown, max_blocks=2, keep="tail")
        if cut:
            blocks.append(bk.context(f"_showing the last {len(shown)} characters of the last {body.lines} lines_"))
        return blocks
    if isinstance(body, SweepDone):
        return sweep_blocks(body)
    if isinstance(body, TuneDone):
        return tune_blocks(body)
    raise TypeError(f"no Block Kit for {type(body).__name__}")  # a new Body kind needs a case here
