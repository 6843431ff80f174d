"""The health watch's table (host, GPU, state, since, reason) as text and as JSON, for
`eagle fleet` and `/eagle fleet` alike; and the alert line of one incident."""
from __future__ import annotations

import json
import re
from typing import Any, Sequence

from eaglebot.frontends.format import fmt_time, table
from eaglebot.store.rows import HealthEventRow, HealthStateRow, StepRow

ORDER = {"quarantined": 0, "draining": 1, "drained": 2, "resuming": 3, "suspect": 4, "expected": 5, "healthy": 6}
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(s: str) -> str:
    """A reason as a terminal may print it: no control character a host wrote reaches it raw."""
    return _CONTROL.sub("?", s)


def gpu_label(gpu: int) -> str:
    return "host" if gpu < 0 else str(gpu)


def fleet_rows(rows: Sequence[HealthStateRow], watched: Sequence[str]) -> list[dict[str, Any]]:
    """Every watched host (healthy when it never had a finding) and every row, in trouble first."""
    out: list[dict[str, Any]] = [{"host": r["host"], "gpu": r["gpu"], "state": r["state"], "since": r["since"],
                                  "reason": r["reason"], "clean_probes": r["clean"], "actor": r["actor"]}
                                 for r in rows]
    seen = {r["host"] for r in rows}
    out += [{"host": h, "gpu": None, "state": "healthy", "since": None, "reason": None, "clean_probes": 0,
             "actor": None} for h in watched if h not in seen]
    return sorted(out, key=lambda r: (ORDER.get(r["state"], 9), r["host"], -2 if r["gpu"] is None else r["gpu"]))


HOW_TO_WATCH = ("to watch the fleet, add `health_watch:` to eagle.yaml and run `eagle serve` "
                "(docs/configuration.md#health_watch); to check a host once: `eagle run health -H HOST`")


def fleet_checks(steps: Sequence[StepRow]) -> list[dict[str, Any]]:
    """The verdicts of each host's newest recorded gpu.health step (a watch's probe is not a
    step: these are the runs of `health` or any playbook with that skill), one row a GPU."""
    out: list[dict[str, Any]] = []
    for s in steps:
        try:
            data = json.loads(s["data"] or "")
        except ValueError:
            continue
        verdicts = data.get("health") if isinstance(data, dict) else None
        if not isinstance(verdicts, dict):
            continue
        for gpu, v in sorted(verdicts.items(), key=lambda kv: (len(str(kv[0])), str(kv[0]))):
            v = v if isinstance(v, dict) else {}
            out.append({"host": s["host"], "gpu": int(gpu) if str(gpu).isdigit() else gpu,
                        "verdict": v.get("verdict"), "reasons": [str(x) for x in v.get("reasons") or []],
                        "run_id": s["run_id"], "at": s["finished_at"]})
    return sorted(out, key=lambda c: (c["host"], str(c["gpu"])))


def fleet_text(rows: list[dict[str, Any]], checks: Sequence[dict[str, Any]] = (), *, watching: bool = True) -> str:
    """The watch's table (a line of counts above it), then each host's last recorded check;
    how to watch when no watch is configured."""
    out: list[str] = []
    if rows:
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["state"]] = counts.get(r["state"], 0) + 1
        out.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: ORDER.get(kv[0], 9))))
        out.append(table(["host", "gpu", "state", "since (UTC)", "reason"],
                         [[r["host"], "-" if r["gpu"] is None else gpu_label(r["gpu"]), r["state"],
                           fmt_time(r["since"]) if r["since"] else "-", shown(r["reason"] or "-")[:120]]
                          for r in rows]))
    elif not checks:
        out.append("no host is watched (health_watch is not configured) and none has a recorded state or check")
    if checks:
        out.append(f"last recorded checks (gpu.health), {len({c['host'] for c in checks})} host(s):")
        out.append(table(["host", "gpu", "verdict", "run", "at (UTC)", "reasons"],
                         [[c["host"], gpu_label(c["gpu"]) if isinstance(c["gpu"], int) else shown(str(c["gpu"])),
                           str(c["verdict"] or "-"), f"#{c['run_id']}", fmt_time(c["at"]) if c["at"] else "-",
                           shown("; ".join(c["reasons"]) or "-")[:120]] for c in checks]))
    if not watching:
        out.append(f"no health watch: {HOW_TO_WATCH}")
    return "\n".join(out)


def fleet_xids(events: Sequence[HealthEventRow]) -> list[dict[str, Any]]:
    """The Xids the watch read, newest first: each with the lifecycle window it fell in and the
    verdict (`expected`: an application's Xid in the bot's own teardown; `judged`: by the policy)."""
    return [{"host": e["host"], "gpu": e["gpu"], "code": e["code"], "window": e["from_state"],
             "verdict": "expected" if e["kind"] == "xid_expected" else "judged", "reason": e["reason"],
             "at": e["at"]} for e in events if e["kind"] in ("xid", "xid_expected")]


def alert_text(host: str, gpu: int, state: str, reason: str) -> str:
    """The Slack message of one incident, as it stands now (updated in place)."""
    what = f"{host} (the host)" if gpu < 0 else f"{host} GPU {gpu}"
    if state == "healthy":
        return f":white_check_mark: resolved: {what} is healthy again ({reason}) · `eagle fleet`"
    icon = ":rotating_light:" if state == "quarantined" else ":warning:"
    return f"{icon} {what} is {state}: {reason} · `eagle fleet`"


SUMMARY_LINES = 40


def summary_text(items: list[tuple[str, int, str, str]]) -> str:
    """Many incidents that opened at once, as one message: (host, gpu, state, reason) each."""
    lines = [f":rotating_light: {len(items)} more incident{'s' if len(items) != 1 else ''} opened at once "
             f"(one message for all, within Slack's rate limits) · `eagle fleet`"]
    for host, gpu, state, reason in items[:SUMMARY_LINES]:
        what = f"{host} (the host)" if gpu < 0 else f"{host} GPU {gpu}"
        lines.append(f"• {what} is {state}: {reason[:160]}")
    if len(items) > SUMMARY_LINES:
        lines.append(f"… and {len(items) - SUMMARY_LINES} more")
    return "\n".join(lines)
