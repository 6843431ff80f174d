"""One hash of the bot's sources (what eaglebot's wheel packages), so a device call refuses a stale .whl/.

scripts/gpu/wheels.sh writes it beside the wheel it builds; scripts/gpu/real-sglang.sh recomputes it over the
carried tree and stops when they differ (a call once ran a wheel two hours older than its tests). Stdlib only:
it runs on the GPU machine too, where the tree arrives without .git.
    python3 scripts/gpu/source_hash.py          # prints the hash
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

ROOTS = ("src", "pyproject.toml")


def source_hash(repo: Path) -> str:
    h = hashlib.sha256()
    for root in ROOTS:
        base = repo / root
        files = [base] if base.is_file() else sorted(
            p for p in base.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            and not any(part.endswith(".egg-info") for part in p.parts))
        for p in files:
            h.update(p.relative_to(repo).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


if __name__ == "__main__":
    print(source_hash(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]))
