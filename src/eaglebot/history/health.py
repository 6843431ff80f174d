"""Health changes between two fingerprints (pure): what a regression's attribution and `eagle diff` name.

A host's fingerprint keeps `health` as the last gpu.health step recorded it:
{"<gpu index>": {"verdict": "ok" | "warn" | "fail", "reasons": [...]}}.
"""
from __future__ import annotations

from typing import Any


def _gpu_key(k: str) -> tuple[int, str]:
    return (int(k), k) if k.isdigit() else (1 << 30, k)


def diff_health(before: dict[str, Any] | None, after: dict[str, Any] | None) -> list[str]:
    """["GPU 1: HW thermal slowdown (was ok)", "GPU 0: ok again (was fail: 3 uncorrected ECC errors)"]."""
    before, after = before or {}, after or {}
    if not after:
        return []
    lines: list[str] = []
    for k in sorted(set(before) | set(after), key=_gpu_key):
        b, a = before.get(k) or {}, after.get(k) or {}
        if not a:
            continue
        bv, av = str(b.get("verdict") or "unknown"), str(a.get("verdict") or "unknown")
        br, ar = list(b.get("reasons") or []), list(a.get("reasons") or [])
        if bv == av and br == ar:
            continue
        was = bv if not br else f"{bv}: {', '.join(br)}"
        new = [r for r in ar if r not in br]
        if av == "ok":
            lines.append(f"GPU {k}: ok again (was {was})")
        elif new:
            lines.append(f"GPU {k}: {', '.join(new)} (was {was})")
        else:
            lines.append(f"GPU {k}: {av}: {', '.join(ar)} (was {was})")
    return lines
