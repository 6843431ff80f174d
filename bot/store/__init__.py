"""The audit store: the only code in eaglebot that speaks SQL or imports sqlite."""
from eaglebot.store.aio import AsyncStore
from eaglebot.store.db import Store, now_iso, parse_iso

__all__ = ["AsyncStore", "Store", "now_iso", "parse_iso"]
