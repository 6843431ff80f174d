"""The post-run hook: fingerprint every real run, judge the metrics of runs that did not fail.

History sits beside the engine in the layers and may not import it, so the hook declares
what it reads from the engine and from a finished run as Protocols; the engine's `Engine`,
`RunOutcome` and `StepRecord` satisfy them structurally, and `frontends.services` installs
the hook in `Engine.post_run_hooks`.
"""
from __future__ import annotations

from typing import Protocol, Sequence, TYPE_CHECKING

from eaglebot.config import Settings
from eaglebot.history.host_state import record_fingerprint
from eaglebot.sdk import Metric, Regression

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import HistoryStore


class FinishedStep(Protocol):
    @property
    def status(self) -> str: ...

    @property
    def tolerated(self) -> bool: ...      # failed under continue_on_error: not a failed run


class FinishedRun(Protocol):
    """What the hook reads of a run the engine finished (`RunOutcome`)."""

    @property
    def run_id(self) -> int: ...

    @property
    def playbook(self) -> str: ...

    @property
    def hosts(self) -> Sequence[str]: ...

    @property
    def dry_run(self) -> bool: ...

    @property
    def steps(self) -> Sequence[FinishedStep]: ...

    @property
    def metrics(self) -> Sequence[tuple[str, Metric]]: ...

    @property
    def regressions(self) -> Sequence[Regression]: ...   # fixed-baseline findings (bench.compare)


class HookHost(Protocol):
    """What the hook reads of the engine that calls it."""

    @property
    def store(self) -> Door[HistoryStore]: ...

    @property
    def settings(self) -> Settings: ...


async def history_hook(engine: HookHost, outcome: FinishedRun, playbook: object) -> list[Regression]:
    """Post-run hook: fingerprint every real run; judge the metrics of runs that did not fail.
    `playbook` is part of the engine's hook signature; history does not need it."""
    if outcome.dry_run:
        return []
    store = engine.store
    run_id, hosts = outcome.run_id, list(outcome.hosts)
    failed = any(s.status == "failed" and not s.tolerated for s in outcome.steps)
    if failed or await store.call(lambda s: s.cancel_requested(run_id)):
        await store.call(lambda s: record_fingerprint(s, run_id, hosts))
        return []
    playbook_name, metrics, cfg = outcome.playbook, list(outcome.metrics), engine.settings.regression
    fixed = list(outcome.regressions)
    if not metrics and not fixed:   # nothing to judge: the judges are not even imported
        await store.call(lambda s: record_fingerprint(s, run_id, hosts))
        return []
    from eaglebot.history.recorder import attribute_fixed, check_run
    found, notes = await store.call(lambda s: check_run(s, run_id, playbook_name, hosts, metrics, cfg))
    await store.call(lambda s: attribute_fixed(s, run_id, playbook_name, fixed))
    for n in notes:
        await store.call(lambda s: s.add_event(run_id, "regression-check", n))
    return found
