"""The health watch's decisions, pure: one host's probe findings and its state rows -> the
transitions to make (healthy -> suspect -> quarantined -> healthy), with the circuit breaker.
Draining, drained and resuming come from the drain skills (fleet_hook.py); a resuming GPU is
cleared by clean probes like a quarantined one, and quarantined again by a `fail`.

The watch (health_watch.py) probes and writes; this module only decides, so every rule
is tested without a host: a `fail` finding quarantines unless the breaker is open (then the GPU
is `suspect` and the reason says why), a `warn` makes it suspect, a probe without findings
counts towards `clear_after`, and a probe that could not tell (hung) counts for nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from eaglebot.facts.health import RECOVERY_PREFIX
from eaglebot.store.health import HELD_STATES

HOST = -1                       # the row of the host itself (its probe, nvidia-smi as a whole)
ACTOR = "health-watch"
HELD = HELD_STATES             # states that keep a host out of relaunch, bench and schedules
# States clean probes clear (draining and drained wait for node.resume: their scheduler holds them).
CLEARABLE = ("suspect", "quarantined", "resuming")


@dataclass(frozen=True)
class Finding:
    gpu: int                    # HOST for the host as a whole
    level: str                  # warn or fail
    reason: str


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


@dataclass(frozen=True)
class Row:
    """What the decision needs of a `health_state` row."""
    gpu: int
    state: str
    clean: int
    reason: str = ""


def breaker_limit(watched: int, max_pct: float) -> int:
    """Hosts that may be quarantined at once: 25% of 16 is 4 (rounded down), but at least one
    unless the share is 0 (a fleet of 3 could otherwise never quarantine a host)."""
    n = int(watched * max_pct / 100.0 + 1e-9)
    return n if n or max_pct <= 0 else 1


def decide(rows: list[Row], findings: list[Finding], *, told: bool, clear_after: int,
           may_quarantine: bool, recovered: frozenset[int] = frozenset()) -> Decision:
    """The transitions of one host after one probe. `told`: the probe read the host (a hung or
    failed probe tells nothing about the GPUs it could not read, so nothing clears);
    `may_quarantine`: the breaker lets this host be quarantined (or it already is);
    `recovered`: GPUs whose driver recovery action reads None now (a GPU held for the action
    the driver asked for is cleared at once when it reads None)."""
    d = Decision()
    now = {r.gpu: r for r in rows}
    worst: dict[int, Finding] = {}
    for f in findings:
        if f.gpu not in worst or (f.level == "fail" and worst[f.gpu].level != "fail"):
            worst[f.gpu] = f
    for gpu, f in sorted(worst.items()):
        reasons = "; ".join(x.reason for x in findings if x.gpu == gpu)
        state = now[gpu].state if gpu in now else "healthy"
        if state in HELD:
            if now[gpu].clean:
                d.clean[gpu] = 0
            continue
        if f.level == "fail" and (may_quarantine or state == "resuming"):
            d.transitions.append(Transition(gpu, "quarantined", reasons))
        elif f.level == "fail":
            d.breaker = True
            d.transitions.append(Transition(gpu, "suspect", f"{reasons} (circuit breaker: not quarantined, "
                                                            f"too many hosts already are)"))
        elif state == "healthy":
            d.transitions.append(Transition(gpu, "suspect", reasons))
        elif gpu in now and now[gpu].clean:
            d.clean[gpu] = 0
    if not told:
        return d
    for gpu, r in sorted(now.items()):
        if gpu in worst or r.state not in CLEARABLE:
            continue
        n = r.clean + 1
        if r.reason.startswith(RECOVERY_PREFIX) and gpu in recovered:
            d.transitions.append(Transition(gpu, "healthy", "the driver's recovery action reads None"))
        elif n >= clear_after:
            d.transitions.append(Transition(gpu, "healthy", f"{n} clean probe{'s' if n != 1 else ''}"))
        else:
            d.clean[gpu] = n
    return d
