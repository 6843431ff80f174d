"""The per-host recap as text, for the terminal (`eagle run`, `eagle show`, `eagle watch`) and
chat (`/eagle show`, the Slack summary's file when the table is long)."""
from __future__ import annotations

from eaglebot.frontends.format import fmt_duration, table
from eaglebot.history.recap import HostRecap, recap_counts
from eaglebot.history.view import RunView

RECAP_LINES = 40  # hosts a chat message lists (those in trouble first); the rest: `eagle show`
ORDER = ("failed", "unreachable", "untouched", "running", "changed", "ok", "skipped")


def recap_total(recap: list[HostRecap]) -> str:
    """`8 hosts: 2 ok, 1 failed, 5 untouched`."""
    counts = recap_counts(recap)
    parts = [f"{counts[s]} {s}" for s in ORDER if counts.get(s)]
    return f"{len(recap)} host{'s' if len(recap) != 1 else ''}: " + ", ".join(parts)


def recap_table(recap: list[HostRecap], *, limit: int | None = None) -> str:
    """The recap, one line per host; hosts in trouble first when `limit` cuts it."""
    rows = list(recap)
    if limit is not None and len(rows) > limit:
        rows = sorted(rows, key=lambda r: ORDER.index(r["status"]) if r["status"] in ORDER else len(ORDER))[:limit]
    body = table(["host", "status", "ok", "changed", "failed", "unreachable", "skipped", "time", "first failure"],
                 [[r["name"], r["status"], r["ok"], r["changed"], r["failed"], r["unreachable"], r["skipped"],
                   fmt_duration(r["duration_s"]) if r["duration_s"] is not None else "-", r["failure"] or ""]
                  for r in rows])
    more = len(recap) - len(rows)
    return body + (f"\n… and {more} more host(s)" if more > 0 else "")


def recap_block(view: RunView, *, limit: int | None = None) -> str:
    """The recap under a run's text (`eagle show`, `/eagle show`): '' for a one-host run."""
    if len(view.hosts) < 2:
        return ""
    recap = view.recap()
    return f"\n\nrecap, {recap_total(recap)}:\n" + recap_table(recap, limit=limit)
