"""Plain text for every front end (terminal, `eagle chat`, the code blocks Slack shows).

Pure functions over `eaglebot.history.view` (runs) and playbooks. Block Kit lives in
`slack/blocks.py`; the CLI's own terminal output in `cli/terminal.py`.
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Mapping, Sequence, TypeVar

if TYPE_CHECKING:
    from eaglebot.engine.playbook import Playbook
from eaglebot.history.view import HistoryRow, RunView
from eaglebot.store import parse_iso

STATUS_ICON = {"ok": "ok", "changed": "changed", "skipped": "skipped", "failed": "FAILED", "running": "running"}


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


def a_or_an(n: int) -> str:
    """The article before a number as it is read: `an 83-cell grid`, `an 11-cell`, `a 9-cell`."""
    s = str(abs(n))
    eleven = s.startswith(("11", "18")) and len(s) % 3 == 2   # eleven, eighteen (thousand, million)
    return "an" if s.startswith("8") or eleven else "a"


def sig3(v: float) -> str:
    """Three significant digits everywhere, never an exponent, no trailing zeros:
    1234.5 -> 1230, 7.7 -> 7.7, 0.012345 -> 0.0123."""
    if v == 0 or v != v or v in (float("inf"), float("-inf")):
        return f"{v:g}"
    digits = 2 - int(math.floor(math.log10(abs(v))))
    r = round(v, digits)
    s = f"{r:.{max(digits, 0)}f}"
    return s.rstrip("0").rstrip(".") if "." in s else s


def fmt_value(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    return f"{sig3(v)} {unit}".strip()


def metric_text(name: str, value: float | None, unit: str = "") -> str:
    """`name = value unit`, the unit once: `median_itl_ms = 7.7`, not `7.7 ms` after `_ms`."""
    shown = "" if unit and (name.endswith(f"_{unit}") or name.endswith(unit.replace("/", "_per_"))) else unit
    return f"{name} = {fmt_value(value, shown)}"


# A metric some tools report under two names (bench_serving's table and /server_info):
# the first name wins when a run has both on the same host.
METRIC_ALIASES = {"avg_spec_accept_length": "accept_length"}


M = TypeVar("M", bound=Mapping[str, Any])


def display_metrics(metrics: Sequence[M]) -> list[M]:
    """Each metric once per host (aliases and repeats dropped), in the order recorded."""
    have = {(m["host"], m["name"]) for m in metrics}
    seen: set[tuple[str, str]] = set()
    out = []
    for m in metrics:
        key = (m["host"], m["name"])
        alias = METRIC_ALIASES.get(m["name"])
        if key in seen or (alias and (m["host"], alias) in have):
            continue
        seen.add(key)
        out.append(m)
    return out


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def key_metric_text(metric: Mapping[str, Any] | None) -> str:
    """`name=value unit` of a run's key metric (`eaglebot.history.view.key_metric`), or ''."""
    if metric is None:
        return ""
    return f"{metric['name']}={fmt_value(metric['value'], metric.get('unit') or '')}"


_STORED_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|\+00:00)")


def local_times(text: str) -> str:
    """The stored (UTC, ISO) times in a sentence in the reader's local time, to the second."""
    def one(m: re.Match[str]) -> str:
        d = parse_iso(m.group(0))
        return d.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z") if d else m.group(0)
    return _STORED_TIME.sub(one, text)


def slack_times(mrkdwn: str) -> str:
    """The stored (UTC, ISO) times in Slack mrkdwn as Slack's date formatting: each reader sees
    their own time zone; the fallback (old clients) is UTC."""
    def one(m: re.Match[str]) -> str:
        d = parse_iso(m.group(0))
        if d is None:
            return m.group(0)
        return f"<!date^{int(d.timestamp())}^{{date_short_pretty}} {{time}}|{d.strftime('%Y-%m-%d %H:%M UTC')}>"
    return _STORED_TIME.sub(one, mrkdwn)


def fmt_local(iso: str | None) -> str:
    """A stored (UTC) time in the reader's local time zone (`TZ` honoured)."""
    d = parse_iso(iso)
    return d.astimezone().strftime("%Y-%m-%d %H:%M") if d else "-"


def history_text(rows: list[HistoryRow], *, local: bool = False) -> str:
    """The history table of `eagle history` (local time), `eagle chat history` and
    `/eagle history` (UTC: a channel's readers live in many time zones)."""
    if not rows:
        return "no runs yet"
    when = fmt_local if local else fmt_time
    zone = (datetime.now().astimezone().tzname() or "local") if local else "UTC"
    cells = [[f"#{r['id']}", r["playbook"], ",".join(r.get("hosts") or []) or "-", r.get("actor") or "-",
              r.get("origin") or "-", when(r.get("started_at")), h.status_label,
              fmt_duration(h.duration_s), key_metric_text(h.key_metric)] for h in rows for r in (h.run,)]
    return table(["id", "playbook", "hosts", "who", "via", f"started ({zone})", "status", "took", "key metric"],
                 cells)


def show_text(view: RunView) -> str:
    """`eagle show ID` and `/eagle show ID` as text."""
    run, steps = view.run, view.steps
    hosts = ",".join(view.hosts) or "-"
    head = (f"run #{view.run_id} {view.playbook} on {hosts}: {view.status}"
            f" (by {run.get('actor') or '-'} via {run.get('origin') or '-'},"
            f" {fmt_time(run.get('started_at'))} UTC, took {fmt_duration(view.duration_s)})")
    out = [head]
    if view.dry_run:
        out.append("dry-run: nothing was changed")
    if run.get("inputs"):
        out.append("inputs: " + " ".join(f"{k}={v}" for k, v in run["inputs"].items()))
    if view.error:
        out.append(f"error: {view.error}")
    if run.get("parent_run_id"):
        out.append(f"started by run #{run['parent_run_id']} (eagle show {run['parent_run_id']})")
    if steps:
        rows = [[s["idx"] + 1, s["host"], s["name"], s["skill"], STATUS_ICON.get(s["status"], s["status"]),
                 f"{(s['duration_ms'] or 0) / 1000:.2f}s", (s["summary"] or "")[:120]] for s in steps]
        out += ["", table(["#", "host", "step", "skill", "status", "took", "summary"], rows)]
    if (health := view.gpu_health):
        out += ["", "GPU health:", table(
            ["host", "GPU", "verdict", "temp C", "power W", "util %", "reasons"],
            [[h["host"], str(h["gpu"]), h["verdict"] or "?", _reading(h, "temperature.gpu"),
              _reading(h, "power.draw", "{:.0f}"), _reading(h, "utilization.gpu"), "; ".join(h["reasons"]) or "-"]
             for h in health])]
    if view.children:
        out += ["", f"runs it started ({len(view.children)}):", table(
            ["id", "playbook", "status", "took", "key metric"],
            [[f"#{c.run_id}", c.run["playbook"], c.status_label, fmt_duration(c.duration_s),
              key_metric_text(c.key_metric)] for c in view.children])]
    if view.metrics:
        out += ["", "metrics:"] + [f"  {m['host']}: {m['name']} = {fmt_value(m['value'], m['unit'] or '')}"
                                  f" ({m['better']} is better)" for m in view.metrics]
    if view.warnings:
        out += ["", "warnings:"] + [f"  {w}" for w in view.warning_lines]
    if view.incidents:
        from eaglebot.history.incidents import by_cause, describe_cause   # (a run's own summary never needs it)
        out += ["", "open regression incidents:"] + [f"  {describe_cause(g)}" for g in by_cause(view.incidents)]
    if view.regressions:
        out += ["", "regressions and improvements:"] + [
            f"  {(r['kind'] or 'regression').upper()} {r['host']}: {r['metric']} {fmt_value(r['value'])} vs "
            f"{fmt_value(r['reference'])} ({r['delta_pct']:+.1f}%): {r['reason']}" for r in view.regressions]
    if view.changes:
        out += ["", "file changes:"]
        for c in view.changes:
            out.append(f"  {c['host']}: {c['path']} (backup {c['backup_path'] or '-'})")
            if c["diff"]:
                out += ["    " + line for line in c["diff"].rstrip("\n").splitlines()]
    return "\n".join(out)


def _reading(h: dict[str, Any], key: str, fmt: str = "{}") -> str:
    v = h["readings"].get(key)
    return "-" if v is None else fmt.format(v)


def describe_inputs(pb: Playbook) -> list[str]:
    """One line per playbook input: type, default or required, range, choices, description."""
    out = []
    for name, spec in pb.inputs.items():
        bits: list[str] = [spec.type]
        if spec.default is not None:
            bits.append(f"default {spec.default}")
        elif not spec.is_required:
            bits.append("optional")
        else:
            bits.append("required")
        if spec.min is not None or spec.max is not None:
            lo = "" if spec.min is None else f"{spec.min:g}"
            hi = "" if spec.max is None else f"{spec.max:g}"
            bits.append(f"range {lo}..{hi}")
        if spec.choices:
            bits.append("one of " + "|".join(map(str, spec.choices)))
        desc = f": {spec.description}" if spec.description else ""
        out.append(f"{name} ({', '.join(bits)}){desc}")
    return out


def since(iso: str | None, now: datetime | None = None) -> str:
    d = parse_iso(iso)
    if d is None:
        return "-"
    now = now or datetime.now(timezone.utc)
    return fmt_duration((now - d).total_seconds()) + " ago"
