"""Built once in `main` and passed down: settings, skills, store, transports, engine."""
from __future__ import annotations

from dataclasses import dataclass

from eaglebot.config import Settings
from eaglebot.engine.redact import Redactor
from eaglebot.engine.registry import SkillRegistry
from eaglebot.engine.runner import Engine
from eaglebot.store import AsyncStore
from eaglebot.store.protocol_async import AsyncStoreProtocol
from eaglebot.transport import TransportPool


@dataclass
class Services:
    settings: Settings
    store: AsyncStoreProtocol
    pool: TransportPool
    engine: Engine
    redactor: Redactor
    registry: SkillRegistry

    @classmethod
    async def open(cls, settings: Settings) -> "Services":
        # Skills first: a plugin that clashes or fails to import stops start-up before the
        # store is opened, with one sentence (exit 2 from the CLI).
        registry = SkillRegistry.from_settings(settings)
        store = await AsyncStore.open(settings.audit_store, settings.audit_key_path)
        pool = TransportPool(settings)
        redactor = Redactor(settings.redact)
        engine = Engine(settings, store, pool, redactor=redactor, registry=registry)
        _install_hooks(engine)
        return cls(settings, store, pool, engine, redactor, registry)

    async def close(self) -> None:
        await self.pool.close()
        await self.store.aclose()


def _install_hooks(engine: Engine) -> None:
    """Post-run checks every front end gets (history-based regression detection; the drain
    skills' effect on the health watch's state)."""
    from eaglebot.engine.fleet_hook import fleet_hook
    from eaglebot.history.hook import history_hook

    engine.post_run_hooks.append(history_hook)
    engine.post_run_hooks.append(fleet_hook)
