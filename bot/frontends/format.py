"""Runs as plain text (terminal, `eagle chat`). Pure functions over store rows.

Slack Block Kit rendering lives in `blocks.py`; both read the same dicts.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from eaglebot.store import parse_iso

STATUS_ICON = {"ok": "ok", "changed": "changed", "skipped": "skipped", "failed": "FAILED", "running": "running"}


def duration_s(run: dict) -> float | None:
    a, b = parse_iso(run.get("started_at")), parse_iso(run.get("finished_at"))
    if a and b:
        return (b - a).total_seconds()
    return None


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def fmt_time(iso: str | None) -> str:
    d = parse_iso(iso)
    return d.strftime("%Y-%m-%d %H:%M") if d else "-"


def fmt_value(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    s = f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"
    return f"{s} {unit}".strip()


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def history_text(runs: list[dict], key_metrics: dict[int, str] | None = None) -> str:
    if not runs:
        return "no runs yet"
    key_metrics = key_metrics or {}
    rows = [[f"#{r['id']}", r["playbook"], ",".join(r.get("hosts") or []) or "-", r.get("actor") or "-",
             r.get("origin") or "-", fmt_time(r.get("started_at")), r["status"],
             fmt_duration(duration_s(r)), key_metrics.get(r["id"], "")] for r in runs]
    return table(["id", "playbook", "hosts", "who", "via", "started (UTC)", "status", "took", "key metric"], rows)


def show_text(run: dict, steps: list[dict], metrics: list[dict], warnings: list[dict],
              regressions: list[dict], changes: list[dict], *, with_output: bool = False) -> str:
    hosts = ",".join(run.get("hosts") or []) or "-"
    head = (f"run #{run['id']} {run['playbook']} on {hosts}: {run['status']}"
            f" (by {run.get('actor') or '-'} via {run.get('origin') or '-'},"
            f" {fmt_time(run.get('started_at'))} UTC, took {fmt_duration(duration_s(run))})")
    out = [head]
    if run.get("dry_run"):
        out.append("dry-run: nothing was changed")
    if run.get("inputs"):
        out.append("inputs: " + " ".join(f"{k}={v}" for k, v in run["inputs"].items()))
    if run.get("error"):
        out.append(f"error: {run['error']}")
    if steps:
        rows = [[s["idx"] + 1, s["host"], s["name"], s["skill"], STATUS_ICON.get(s["status"], s["status"]),
                 f"{(s['duration_ms'] or 0) / 1000:.2f}s", (s["summary"] or "")[:120]] for s in steps]
        out += ["", table(["#", "host", "step", "skill", "status", "took", "summary"], rows)]
    if metrics:
        out += ["", "metrics:"] + [f"  {m['host']}: {m['name']} = {fmt_value(m['value'], m['unit'] or '')}"
                                  f" ({m['better']} is better)" for m in metrics]
    if warnings:
        out += ["", "warnings:"] + [f"  {w['host']}: {w['message']}" if w.get("host") else f"  {w['message']}"
                                   for w in warnings]
    if regressions:
        out += ["", "regressions and improvements:"] + [
            f"  {r['kind'].upper()} {r['host']}: {r['metric']} {fmt_value(r['value'])} vs "
            f"{fmt_value(r['reference'])} ({r['delta_pct']:+.1f}%): {r['reason']}" for r in regressions]
    if changes:
        out += ["", "file changes:"]
        for c in changes:
            out.append(f"  {c['host']}: {c['path']} (backup {c['backup_path'] or '-'})")
            if c.get("diff"):
                out += ["    " + line for line in c["diff"].rstrip("\n").splitlines()]
    if with_output:
        for s in steps:
            if s.get("output"):
                out += ["", f"--- output of step {s['idx'] + 1} ({s['host']}: {s['name']}) ---",
                        s["output"].rstrip("\n")]
    return "\n".join(out)


def since(iso: str | None, now: datetime | None = None) -> str:
    d = parse_iso(iso)
    if d is None:
        return "-"
    from datetime import timezone

    now = now or datetime.now(timezone.utc)
    return fmt_duration((now - d).total_seconds()) + " ago"
