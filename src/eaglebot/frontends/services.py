"""Built once in `main` and passed down: the store, and the current configuration.

The configuration (settings, skills, redactor, transports, engine) is one immutable
`Snapshot`. `eagle serve` replaces it whole on a reload (`swap`): a command or a run reads
the snapshot current when it starts, and a run keeps its engine (and so its settings and
transports) to its end; the old transports are closed by the next reload that finds the old
engine's runs over (`close_idle`), or at exit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable, TYPE_CHECKING

from eaglebot.config import Settings
from eaglebot.engine.redact import Redactor
from eaglebot.engine.registry import SkillRegistry
from eaglebot.engine.runner import Engine
from eaglebot.engine.records import Observer
from eaglebot.store import AsyncStore
from eaglebot.transport import TransportPool

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import EngineStore

# `/eagle reload` in a running `eagle serve`: (who) -> (done, the sentence that answers them)
Reloader = Callable[[str], Awaitable[tuple[bool, str]]]


@dataclass(frozen=True)
class Snapshot:
    """One configuration, consistent: what a command or a run reads together."""
    settings: Settings
    registry: SkillRegistry
    redactor: Redactor
    pool: TransportPool
    engine: Engine

    @classmethod
    def build(cls, settings: Settings, store: Door[EngineStore], watchers: list[Observer] | None = None,
              registry: SkillRegistry | None = None) -> "Snapshot":
        registry = registry or SkillRegistry.from_settings(settings)
        pool = TransportPool(settings)
        redactor = Redactor(settings.redact)
        engine = Engine(settings, store, pool, redactor=redactor, registry=registry)
        _install_hooks(engine)
        engine.watchers.extend(watchers or [])
        return cls(settings, registry, redactor, pool, engine)


class Services:
    def __init__(self, store: AsyncStore, current: Snapshot):
        # The whole store: `Services` opens it (`open`) and closes it (`close`); each part that
        # uses it is typed with its slice of it (store/protocol.py).
        self.store = store
        self.current = current
        self.reloader: Reloader | None = None   # set by `eagle serve`
        self._retired: list[Snapshot] = []

    @classmethod
    async def open(cls, settings: Settings) -> "Services":
        # Skills first: a plugin that clashes or fails to import stops start-up before the
        # store is opened, with one sentence (exit 2 from the CLI).
        registry = SkillRegistry.from_settings(settings)
        store = await AsyncStore.open(settings.audit_store, settings.audit_key_path)
        return cls(store, Snapshot.build(settings, store, registry=registry))

    @property
    def settings(self) -> Settings:
        return self.current.settings

    @property
    def engine(self) -> Engine:
        return self.current.engine

    @property
    def registry(self) -> SkillRegistry:
        return self.current.registry

    @property
    def redactor(self) -> Redactor:
        return self.current.redactor

    @property
    def pool(self) -> TransportPool:
        return self.current.pool

    def swap(self, new: Snapshot) -> Snapshot:
        """Make `new` current (one assignment: nothing reads half of each); returns the old one,
        kept until its runs are over."""
        old, self.current = self.current, new
        self._retired.append(old)
        return old

    def cancel(self, run_id: int) -> bool:
        """Cancel a run of this process, whichever configuration it started under."""
        return any([s.engine.cancel(run_id) for s in (self.current, *self._retired)])

    async def close_idle(self) -> int:
        """Close the transports of retired configurations whose runs are over; how many remain."""
        for snap in [s for s in self._retired if not s.engine.busy]:
            self._retired.remove(snap)
            await snap.pool.close()
        return len(self._retired)

    async def close(self) -> None:
        for snap in (*self._retired, self.current):
            await snap.pool.close()
        self._retired.clear()
        await self.store.aclose()


def _install_hooks(engine: Engine) -> None:
    """Post-run checks every front end gets (history-based regression detection; the drain
    skills' effect on the health watch's state), and the pre-run one: an interrupted tuning's
    host is restored before the next run changes it."""
    from eaglebot.engine.fleet_hook import fleet_hook
    from eaglebot.history.hook import history_hook
    from eaglebot.tuning.interrupted import finish_interrupted

    engine.post_run_hooks.append(history_hook)
    engine.post_run_hooks.append(fleet_hook)
    engine.pre_run_hooks.append(finish_interrupted)
