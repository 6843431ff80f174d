"""The audit store: the only code in eaglebot that speaks SQL or imports sqlite or psycopg."""
from typing import TYPE_CHECKING, Any

from eaglebot.store.base import now_iso, parse_iso, redact_url
from eaglebot.store.db import Store
from eaglebot.store.factory import is_db_url, open_store

if TYPE_CHECKING:
    from eaglebot.store.aio import AsyncStore

__all__ = ["AsyncStore", "Store", "is_db_url", "now_iso", "open_store", "parse_iso", "redact_url"]


def __getattr__(name: str) -> Any:
    # AsyncStore (asyncio, threads) loads when first asked for: `eagle history` never needs it.
    if name == "AsyncStore":
        from eaglebot.store.aio import AsyncStore

        return AsyncStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
