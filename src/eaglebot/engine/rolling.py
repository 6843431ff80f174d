"""Rolling runs: hosts in batches (`--batch N|P%`, Ansible's `serial`) and a failure budget
(`--max-fail N|P%`, Ansible's `max_fail_percentage`): once more hosts failed than the
budget allows, no new batch starts and the hosts left are `untouched`. Pure functions.
"""
from __future__ import annotations

import math
import re

from eaglebot.errors import UsageError

_AMOUNT = re.compile(r"^\s*(\d{1,7})\s*(%?)\s*$")


def check_amount(value: object, what: str, *, zero_ok: bool) -> str:
    """`2` or `25%` as a canonical string; anything else is a UsageError."""
    m = _AMOUNT.match(str(value))
    if m is None or isinstance(value, bool):
        raise UsageError(f"{what} is a number of hosts or a percentage (2, 25%), got {str(value)[:40]!r}")
    n, pct = int(m.group(1)), m.group(2)
    if pct and n > 100:
        raise UsageError(f"{what} {n}% is over 100%")
    if n == 0 and not zero_ok:
        raise UsageError(f"{what} must be at least 1")
    return f"{n}{pct}"


def count(amount: str, total: int) -> int:
    """`amount` (2 or 25%) of `total` hosts: a percentage rounds down (Ansible's rule)."""
    if amount.endswith("%"):
        return (total * int(amount[:-1])) // 100
    return int(amount)


def batches(hosts: list[str], batch: str | None) -> list[list[str]]:
    """The hosts in the order given, cut into batches of `batch` (at least one host each)."""
    if not batch or not hosts:
        return [list(hosts)] if hosts else []
    size = max(1, count(batch, len(hosts)))
    return [hosts[i:i + size] for i in range(0, len(hosts), size)]


def budget(max_fail: str | None, total: int) -> int | float:
    """How many hosts may fail before no new batch starts (no `max_fail`: no limit)."""
    if max_fail is None:
        return math.inf
    return count(max_fail, total)
