"""The per-host recap of a run (Ansible's PLAY RECAP), pure over the store's rows: each host's
status, its steps counted by status, its duration and its first failure's one line.

A host's status: `unreachable` (its connection could not be opened), `failed` (a step failed,
not under continue_on_error), `changed`, `ok`, `skipped` (every step skipped), or `untouched`
(no step row: a rolling run's failure budget was spent before its batch started).
"""
from __future__ import annotations

from typing import Iterable, TypedDict

from eaglebot.store import parse_iso
from eaglebot.store.rows import StepRow, WarningRow

COUNTED = ("ok", "changed", "failed", "unreachable", "skipped")
FAILURE_CHARS = 160


class HostRecap(TypedDict):
    name: str
    status: str
    ok: int
    changed: int
    failed: int
    unreachable: int
    skipped: int
    duration_s: float | None
    failure: str | None


def _tolerated(warnings: Iterable[WarningRow]) -> set[tuple[str, str]]:
    """(host, step name) of the failures continue_on_error turned into warnings."""
    out = set()
    for w in warnings:
        msg = w.get("message") or ""
        if " failed (continue_on_error): " in msg:
            out.add((w.get("host") or "", msg.split(" failed (continue_on_error): ", 1)[0]))
    return out


def host_recap(hosts: list[str], steps: list[StepRow], warnings: Iterable[WarningRow] = (),
               *, running: bool = False) -> list[HostRecap]:
    """One entry per host of the run, in the run's order."""
    tolerated = _tolerated(warnings)
    by_host: dict[str, list[StepRow]] = {h: [] for h in hosts}
    for s in steps:
        by_host.setdefault(s["host"], []).append(s)
    out: list[HostRecap] = []
    for host, rows in by_host.items():
        counts = {k: 0 for k in COUNTED}
        failure: str | None = None
        hard_fail = False
        for s in rows:
            st = s["status"]
            if st in counts:
                counts[st] += 1
            if st in ("failed", "unreachable") and failure is None:
                line = (s.get("summary") or "").splitlines()[0] if s.get("summary") else ""
                failure = f"{s['name']}: {line}"[:FAILURE_CHARS]
            if st == "failed" and (host, s["name"]) not in tolerated:
                hard_fail = True
        if not rows:
            status = "running" if running else "untouched"
        elif counts["unreachable"]:
            status = "unreachable"
        elif hard_fail:
            status = "failed"
        elif any(s["status"] == "running" for s in rows):
            status = "running"
        elif counts["changed"]:
            status = "changed"
        elif counts["ok"] or counts["failed"]:
            status = "ok"
        else:
            status = "skipped"
        out.append({"name": host, "status": status, "ok": counts["ok"], "changed": counts["changed"],
                    "failed": counts["failed"], "unreachable": counts["unreachable"],
                    "skipped": counts["skipped"], "duration_s": _span(rows), "failure": failure})
    return out


def _span(rows: list[StepRow]) -> float | None:
    """Seconds from the host's first step's start to its last step's end."""
    starts = [t for t in (parse_iso(s.get("started_at")) for s in rows) if t]
    ends = [t for t in (parse_iso(s.get("finished_at")) for s in rows) if t]
    if starts and ends:
        return max(0.0, (max(ends) - min(starts)).total_seconds())
    return None


def recap_counts(recap: list[HostRecap]) -> dict[str, int]:
    """Hosts per status, for a one-line total."""
    out: dict[str, int] = {}
    for r in recap:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out


def failed_hosts(recap: list[HostRecap]) -> list[str]:
    """The hosts `rerun --failed` runs again: those that failed or were unreachable."""
    return [r["name"] for r in recap if r["status"] in ("failed", "unreachable")]
