"""The health watch's decisions, pure: one host's probe findings and its state rows -> the
transitions to make (healthy -> suspect -> quarantined -> healthy), with the circuit breaker.
Draining, drained and resuming come from the drain skills (fleet_hook.py); a resuming GPU is
cleared by clean probes like a quarantined one, and quarantined again by a confirmed `fail`.

The watch (health_watch.py) probes and writes; this module only decides, so every rule
is tested without a host:
- a `fail` quarantines unless the breaker is open (then the GPU is `suspect` and the reason says
  why); a `fail` marked `needs_second` (every class but the fatal ones) only makes the GPU
  `suspect` and `pending`: the next probe quarantines it if it finds a `fail` on that GPU too,
  and drops it if it does not;
- a `warn` makes a GPU suspect; a probe without findings counts towards `clear_after`, and a
  probe that could not tell (hung) counts for nothing;
- a finding `again` (an Xid this boot already opened an incident for) opens nothing on a
  healthy GPU unless it is fatal, but it is a finding everywhere else: the probe that reads it
  is never clean for that GPU, a fatal one quarantines a resuming GPU again;
- `expected` (application Xids in the bot's own teardown) marks a GPU that had no finding and
  holds nothing; a recovery event (the driver's recovery action back to None) clears at once;
- a drained host is never cleared by probes: once its GPUs read clean for `clear_after`
  probes the watch resumes a drain it made itself (`resume`) and leaves anyone else's (`left`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from eaglebot.facts.gpu.health import RECOVERY_PREFIX
from eaglebot.store.health import HELD_STATES

HOST = -1                       # the row of the host itself (its probe, nvidia-smi as a whole)
ACTOR = "health-watch"
HELD = HELD_STATES             # states that keep a host out of relaunch, bench and schedules
# States clean probes clear (draining and drained wait for node.resume: their scheduler holds them).
CLEARABLE = ("suspect", "quarantined", "resuming")
DRAINED = ("draining", "drained")
# States from which a finding opens an incident (an `expected` GPU had no finding).
OPEN_FROM = ("healthy", "expected")
UNCONFIRMED = "not yet confirmed: a second probe decides"


@dataclass(frozen=True)
class Finding:
    gpu: int                    # HOST for the host as a whole
    level: str                  # warn or fail
    reason: str
    needs_second: bool = False  # a `fail` that quarantines only once a second probe agrees
    again: bool = False         # a repeat of an open incident's finding (the same Xid, GPU and boot)


@dataclass(frozen=True)
class Transition:
    gpu: int
    state: str
    reason: str


@dataclass
class Decision:
    transitions: list[Transition] = field(default_factory=list)
    clean: dict[int, int] = field(default_factory=dict)      # gpu -> clean probes in a row now
    breaker: bool = False                                    # a quarantine the breaker held back
    pending: frozenset[int] = frozenset()                    # GPUs whose `fail` the next probe must confirm
    resume: bool = False                                     # the watch's own drain may be resumed now
    left: list[tuple[int, str]] = field(default_factory=list)   # drains not the watch's, left: (gpu, by whom)


@dataclass(frozen=True)
class Row:
    """What the decision needs of a `health_state` row."""
    gpu: int
    state: str
    clean: int
    reason: str = ""
    actor: str = ""


def breaker_limit(watched: int, max_pct: float) -> int:
    """Hosts that may be quarantined at once: 25% of 16 is 4 (rounded down), but at least one
    unless the share is 0 (a fleet of 3 could otherwise never quarantine a host)."""
    n = int(watched * max_pct / 100.0 + 1e-9)
    return n if n or max_pct <= 0 else 1


def _judge(d: Decision, gpu: int, state: str, clean: int, mine: list[Finding], *, may: bool, pending: frozenset[int],
           pend: set[int]) -> None:
    reasons = "; ".join(x.reason for x in mine)
    fails = [f for f in mine if f.level == "fail"]
    if state in HELD:
        if clean:
            d.clean[gpu] = 0
        return
    confirmed = bool(fails) and (any(not f.needs_second for f in fails) or gpu in pending)
    second = confirmed and all(f.needs_second for f in fails)
    if confirmed and (may or state == "resuming"):
        d.transitions.append(Transition(gpu, "quarantined", reasons + (" (a second probe agreed)" if second else "")))
    elif confirmed:
        d.breaker = True
        d.transitions.append(Transition(gpu, "suspect", f"{reasons} (circuit breaker: not quarantined, "
                                                        f"too many hosts already are)"))
    elif state in OPEN_FROM:
        d.transitions.append(Transition(gpu, "suspect", f"{reasons} ({UNCONFIRMED})" if fails else reasons))
    elif clean:
        d.clean[gpu] = 0
    if fails and not confirmed:
        pend.add(gpu)


def decide(rows: list[Row], findings: list[Finding], *, told: bool, clear_after: int, may_quarantine: bool,
           recovered: frozenset[int] = frozenset(), pending: frozenset[int] = frozenset(),
           expected: Mapping[int, str] | None = None, recovery: frozenset[int] = frozenset()) -> Decision:
    """The transitions of one host after one probe. `told`: the probe read the host (a hung or
    failed probe tells nothing about the GPUs it could not read, so nothing clears);
    `may_quarantine`: the breaker lets this host be quarantined (or it already is);
    `recovered`: GPUs whose driver recovery action reads None now (a GPU held for the action
    the driver asked for is cleared at once when it reads None); `pending`: GPUs whose `fail`
    an earlier probe found and this one may confirm; `expected`: GPUs with only expected Xids
    (the reason); `recovery`: GPUs with a recovery event in the kernel log (their finding is over)."""
    d = Decision()
    now = {r.gpu: r for r in rows}
    pend: set[int] = set()
    by_gpu: dict[int, list[Finding]] = {}
    for f in findings:
        state = now[f.gpu].state if f.gpu in now else "healthy"
        if f.again and state in OPEN_FROM and (f.level != "fail" or f.needs_second):
            continue                    # no incident open: a repeat opens none (one incident per boot)
        by_gpu.setdefault(f.gpu, []).append(f)
    for gpu, mine in sorted(by_gpu.items()):
        r = now.get(gpu)
        _judge(d, gpu, r.state if r else "healthy", r.clean if r else 0, mine, may=may_quarantine,
               pending=pending, pend=pend)
    if not told:
        pend |= {g for g in pending if g not in by_gpu}      # a probe that could not tell confirms nothing, drops nothing
    d.pending = frozenset(pend)
    for gpu, why in sorted((expected or {}).items()):
        state = now[gpu].state if gpu in now else "healthy"
        if gpu not in by_gpu and state in OPEN_FROM:
            d.transitions.append(Transition(gpu, "expected", why))
    if not told:
        return d
    for gpu, r in sorted(now.items()):
        if gpu in by_gpu:
            continue
        n = r.clean + 1
        if r.state in DRAINED:
            d.clean[gpu] = n
            if n == clear_after:                       # once per clean streak
                if r.actor == ACTOR:
                    d.resume = True
                else:
                    d.left.append((gpu, r.actor or "someone else"))
            continue
        if r.state not in CLEARABLE:
            continue
        if gpu in recovery:
            d.transitions.append(Transition(gpu, "healthy", "recovery event: the driver's recovery action reads None"))
        elif r.reason.startswith(RECOVERY_PREFIX) and gpu in recovered:
            d.transitions.append(Transition(gpu, "healthy", "the driver's recovery action reads None"))
        elif n >= clear_after:
            d.transitions.append(Transition(gpu, "healthy", f"{n} clean probe{'s' if n != 1 else ''}"))
        else:
            d.clean[gpu] = n
    return d
