"""The Xids of one probe, judged: each tagged with the host's lifecycle window (engine/lifecycle.py)
and recorded once; an application's Xid inside the bot's own teardown is `expected`; the rest
become findings by the Xid policy (`health_watch.xid`), deduplicated by (host, GPU, Xid, boot).

- The Xid's time is the probe's wall clock less the kernel seconds since the line (`uptime -
  ts`, both read by the same command on the host): no clock of the host's is trusted, only its
  monotonic one. A line without a timestamp counts as read now.
- Fatal classes (facts/gpu/xid.py AT_ONCE_XIDS) act at once; a `fail` reached by `fail_after`
  occurrences acts at once too (the occurrences are the agreeing readings); any other `fail`
  Xid waits for a second probe.
- The same Xid on the same GPU in the same boot is one incident (each line still an event, and
  still counted towards `fail_after`); a recovery event (Xid 154: the driver's recovery action back
  to None) ends it, so a later one is a new finding. A repeat is still a finding `again`: it
  opens nothing on a healthy GPU, but the probe that reads it is not clean for that GPU (a GPU
  that keeps failing is never cleared), and a fatal one quarantines a GPU on probation again.
- Each Xid is recorded with its own time (the kernel's), not the probe's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Mapping, TYPE_CHECKING

from eaglebot.config import XidRule
from eaglebot.engine import fleet_health as fh
from eaglebot.engine.lifecycle import window_at, windows
from eaglebot.facts.gpu import xid as xf

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import ServiceState


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Judged:
    findings: list[fh.Finding] = field(default_factory=list)
    expected: dict[int, str] = field(default_factory=dict)      # gpu -> why its Xids were expected
    recovery: set[int] = field(default_factory=set)             # GPUs with a recovery event


@dataclass
class Seen:
    """The (GPU, Xid) findings already made on one host in its current boot."""
    boot_id: str | None = None
    keys: set[tuple[int, int]] = field(default_factory=set)

    def first(self, boot_id: str | None, gpu: int, code: int) -> bool:
        if boot_id and boot_id != self.boot_id:
            self.boot_id, self.keys = boot_id, set()
        if (gpu, code) in self.keys:
            return False
        self.keys.add((gpu, code))
        return True

    def recovered(self, gpu: int) -> None:
        self.keys = {k for k in self.keys if k[0] != gpu}


def xid_time(at: float, x: xf.Xid, uptime_s: float | None) -> float:
    """The wall-clock moment (epoch s, the bot's clock) of an Xid read by a probe made at `at`."""
    if x.ts is None or uptime_s is None or x.ts > uptime_s:
        return at
    return at - (uptime_s - x.ts)


async def judge_xids(store: Door[ServiceState], host: str, xids: list[tuple[int, xf.Xid]], *, at: float,
                     uptime_s: float | None, boot_id: str | None, policy: Mapping[int, XidRule],
                     expected_codes: frozenset[int], grace_s: float, seen: Seen) -> Judged:
    """Record each new Xid of a probe made at `at` (epoch s) and say what it means."""
    out = Judged()
    if not xids:
        return out
    ws = windows(await store.call(lambda s: s.health_lifecycle_steps(host)), grace_s)
    now = datetime.now(timezone.utc)
    counts: dict[tuple[int, int], int] = {}
    for gpu, x in xids:
        t = xid_time(at, x, uptime_s)
        when = _iso(datetime.fromtimestamp(t, timezone.utc))
        w = window_at(ws, t)
        if x.recovered:
            out.recovery.add(gpu)
            seen.recovered(gpu)
            await store.call(lambda s: s.health_record_xid(
                host, gpu, x.code, f"{x.line()}: recovery action back to None", window=w.kind, at=when))
            continue
        mine = x.code in expected_codes and w.kind == "teardown"
        await store.call(lambda s: s.health_record_xid(
            host, gpu, x.code, x.line() + (" (expected)" if mine else ""), window=w.kind, expected=mine, at=when))
        if mine:
            counts[(gpu, x.code)] = counts.get((gpu, x.code), 0) + 1
            codes = ", ".join(f"Xid {c}" + (f" x{n}" if n > 1 else "") for (g, c), n in sorted(counts.items())
                              if g == gpu)
            out.expected[gpu] = f"{codes} during the bot's own teardown (run #{w.run_id}): expected"
            continue
        out.findings.append(await _finding(store, host, gpu, x, policy.get(x.code), now,
                                           first=seen.first(boot_id, gpu, x.code)))
    return out


async def _finding(store: Door[ServiceState], host: str, gpu: int, x: xf.Xid, rule: XidRule | None, now: datetime,
                   *, first: bool) -> fh.Finding:
    level = rule.severity if rule else x.severity
    if rule is not None and level == "warn" and rule.fail_after:
        since = _iso(now - timedelta(seconds=rule.window_s))
        n = await store.call(lambda s: s.health_xid_count(host, gpu, x.code, since))
        if n >= rule.fail_after:
            return fh.Finding(gpu, "fail", f"{x.line()}: {n} times within {rule.window_s:g}s")
    at_once = x.code in xf.AT_ONCE_XIDS if rule is None or rule.at_once is None else rule.at_once
    # The same Xid on the same GPU this boot: the incident is open already; `again` keeps it open.
    return fh.Finding(gpu, level, x.line(), needs_second=level == "fail" and not at_once, again=not first)
