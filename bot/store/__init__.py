"""The audit store: the only code in eaglebot that speaks SQL or imports sqlite."""
from eaglebot.store.db import AsyncStore, Store, now_iso, parse_iso

__all__ = ["AsyncStore", "Store", "now_iso", "parse_iso"]
