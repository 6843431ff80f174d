"""gpu.cleanup's decision, pure: which GPU holders to stop, which need approval, which to leave.

`plan_cleanup(snapshot, params, sessions)` takes what the probes found (a `gpu.Snapshot`),
the step's filters and the sessions the bot launched, and decides without a host; the skill
only carries it out. tests/test_cleanup_plan.py runs it on JSON cases built from real
nvidia-smi captures (tests/fixtures/cleanup_cases/).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from eaglebot.skills.lib import gpu, processes


class Filters(Protocol):
    """The filters of gpu.cleanup's Params the decision reads."""

    @property
    def match(self) -> str | None: ...

    @property
    def user(self) -> str | None: ...


@dataclass(frozen=True)
class CleanupPlan:
    targets: list[gpu.Holder]                 # to stop, in the snapshot's order
    ours: frozenset[int]                      # targets in a session the bot launched: stopped without asking
    protected: list[gpu.Holder]               # GPU daemons: never touched
    filtered_out: list[gpu.Holder] = field(default_factory=list)   # not matching `match` / `user`
    nothing_to_do: str = ""                   # the step's summary when there is no target

    @property
    def foreign(self) -> list[gpu.Holder]:
        """Targets the bot did not start: stopped only with approval when the step says confirm."""
        return [h for h in self.targets if h.pid not in self.ours]

    def why(self, h: gpu.Holder) -> str:
        """One reason per holder, for the plan lines and the cases."""
        if h in self.protected:
            return "protected"
        if h in self.filtered_out:
            return "filtered out"
        return "ours" if h.pid in self.ours else "FOREIGN"


def cleanup_targets(snap: gpu.Snapshot, params: Filters) -> list[gpu.Holder]:
    """The holders that may be stopped (not a GPU daemon) and pass the step's filters; the
    skill asks the host for the bot's sessions only when there are any."""
    targets = snap.killable()
    if params.match:
        rx = re.compile(params.match)
        targets = [h for h in targets if rx.search(h.cmdline) or rx.search(h.name)]
    if params.user:
        targets = [h for h in targets if h.user == params.user]
    return targets


def plan_cleanup(snap: gpu.Snapshot, params: Filters, sessions: set[int]) -> CleanupPlan:
    """Decide; `sessions` are the bot's launched sessions (processes.our_sessions)."""
    targets = cleanup_targets(snap, params)
    picked = {h.pid for h in targets}
    nothing = ""
    if not targets:
        nothing = "no GPU processes"
        if snap.holders:
            nothing += " matching the filters" if (params.match or params.user) else " that may be stopped"
        if snap.unexplained:
            nothing += f"; {gpu.memory_line(snap.unexplained)} used with no process to explain it"
    return CleanupPlan(
        targets=targets,
        ours=frozenset(h.pid for h in targets if processes.is_ours(h.proc, sessions)),
        protected=[h for h in snap.holders if h.protected],
        filtered_out=[h for h in snap.killable() if h.pid not in picked],
        nothing_to_do=nothing)
