"""SQLite's failures as one sentence a person can act on (StoreError), never a traceback."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from eaglebot.errors import StoreError

_REASONS = [
    ("disk is full", "the disk is full; free space and run `eagle doctor`"),
    ("disk i/o error", "a disk I/O error (full disk, file size limit or failing disk)"),
    ("readonly database", "it is read-only (check the permissions of the file and its folder)"),
    ("not a database", "it is not an SQLite database (corrupt?); move it aside and run again"),
    ("malformed", "the database file is corrupt; move it aside (keep it for forensics) and run again"),
    ("unable to open", "cannot open it (is the path a folder, or its folder missing or read-only?)"),
    ("locked", "it stayed locked by another process past the busy timeout"),
]


def store_error(path: Path, e: BaseException) -> StoreError:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    low = msg.lower()
    if path.is_dir():
        reason = "the path is a folder, not a database file"
    else:
        reason = next((r for k, r in _REASONS if k in low), msg)
    return StoreError(f"audit store {path}: {reason}")


def is_store_failure(e: BaseException) -> bool:
    return isinstance(e, (sqlite3.Error, OSError))
