"""Where a host was in the bot's own workload lifecycle at a moment, from the audit trail: the
window each Xid is tagged with (pure; the watch reads the steps, `windows` decides).

- `teardown`: from the start of a step that killed something on the host (`gpu.cleanup`, or
  `server.stop` of a server the bot launched; `changed`, `failed` or still running) until a
  later `gpu.verify` of the same run read the GPUs free, plus `grace_s`. Without such a verify:
  until its run ended (open while it runs), plus the grace.
- `launch`: a `server.launch` step, from its start until it ended, plus the grace.
- `steady`: after a launch that succeeded, until the next teardown.
- `idle`: otherwise (after a teardown, or nothing known).

A window ends at the verify, not at the kill: a real driver logs its Xid 45 lines as it tears
down the killed process's channels, which is over by the time the memory reads free.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from eaglebot.store import parse_iso
from eaglebot.store.rows import LifecycleStepRow

KILLERS = ("gpu.cleanup", "server.stop")
VERIFY = "gpu.verify"
LAUNCH = "server.launch"
_KILLED = ("changed", "failed", "running")       # ok / skipped: nothing was killed


@dataclass(frozen=True)
class Window:
    kind: str                   # teardown, launch, steady, idle
    start: float                # epoch seconds
    end: float | None           # None: still open
    run_id: int | None = None

    def holds(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t <= self.end)


def _t(iso: str | None) -> float | None:
    d = parse_iso(iso) if iso else None
    return d.timestamp() if d is not None else None


def windows(steps: Sequence[LifecycleStepRow], grace_s: float) -> list[Window]:
    """The teardown and launch windows of a host's lifecycle steps (oldest first), and the
    moments steady or idle began (as windows with no end)."""
    out: list[Window] = []
    for i, s in enumerate(steps):
        start = _t(s["started_at"])
        if start is None:
            continue
        ended = _t(s["finished_at"]) or (_t(s["run_finished_at"]) if s["run_status"] != "running" else None)
        if s["skill"] == LAUNCH:
            out.append(Window("launch", start, None if ended is None else ended + grace_s, s["run_id"]))
            if s["status"] in ("ok", "changed") and ended is not None:
                out.append(Window("steady", ended, None, s["run_id"]))
        elif s["skill"] in KILLERS and s["status"] in _KILLED:
            verify = next((v for v in steps[i + 1:] if v["run_id"] == s["run_id"] and v["skill"] == VERIFY
                           and v["status"] in ("ok", "changed", "running")), None)
            if verify is not None:
                end = _t(verify["finished_at"]) if verify["status"] != "running" else None
            else:
                end = None if s["run_status"] == "running" else (_t(s["run_finished_at"]) or ended)
            out.append(Window("teardown", start, None if end is None else end + grace_s, s["run_id"]))
            out.append(Window("idle", start, None, s["run_id"]))
    return out


def window_at(ws: Sequence[Window], t: float) -> Window:
    """The window `t` falls in: a teardown first, then a launch, else steady or idle by the
    newest start before `t`."""
    for kind in ("teardown", "launch"):
        hit = [w for w in ws if w.kind == kind and w.holds(t)]
        if hit:
            return hit[-1]
    since = [w for w in ws if w.kind in ("steady", "idle") and w.start <= t]
    return max(since, key=lambda w: w.start) if since else Window("idle", 0.0, None)
