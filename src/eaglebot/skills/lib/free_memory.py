"""gpu.verify's decision, pure: is each selected GPU's memory back under the limit?

`check_memory` reads one `GPU_MEMORY` answer against the selection and the limit; the skill
polls and watches, and stops when nothing is over. tests/test_free_memory.py runs it on JSON
cases built from the real nvidia-smi memory captures (tests/fixtures/verify_cases/).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryCheck:
    used: dict[int, int]      # MiB per selected GPU that nvidia-smi lists
    over: dict[int, int]      # those above the limit
    gone: list[int]           # selected GPUs nvidia-smi no longer lists (fallen off the bus)


def over_limit(used: dict[int, int], max_used_mib: int) -> dict[int, int]:
    """A GPU can read a few MiB with no process on it: free means at most `max_used_mib`."""
    return {g: m for g, m in used.items() if m > max_used_mib}


def check_memory(used_all: dict[int, int], selected: list[int], max_used_mib: int) -> MemoryCheck:
    used = {g: used_all[g] for g in selected if g in used_all}
    return MemoryCheck(used, over_limit(used, max_used_mib), [g for g in selected if g not in used_all])
