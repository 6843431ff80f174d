"""Entry points, read without importlib.metadata when no installed distribution declares the group.

`eagle run` looks for skill plugins (group `eaglebot.skills`) through importlib.metadata, whose
import (email, zipfile, csv...) and scan of every distribution's metadata cost a fresh `eagle
run` tens of millions of instructions to find, almost always, nothing. Here the folders on
sys.path are listed once and each distribution's `entry_points.txt` is searched for the group's `[section]` header; only where one declares it
does importlib.metadata load, and then it answers exactly as before.

Anything this cannot read as plain folders (a zip or egg on sys.path, a folder it may not
list) counts as "may declare it": then importlib.metadata answers, as without this module.
"""
from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

_META_SUFFIXES = (".dist-info", ".egg-info")


@functools.lru_cache(maxsize=1)
def _declared() -> frozenset[str] | None:
    """Every `[group]` some distribution on sys.path declares; None when one could not be read."""
    groups: set[str] = set()
    for entry in sys.path:
        folder = entry or "."
        if not os.path.isdir(folder):
            if os.path.exists(folder):   # a zip or an egg: importlib.metadata reads those
                return None
            continue
        try:
            names = os.listdir(folder)
        except OSError:
            return None
        for name in names:
            if not name.endswith(_META_SUFFIXES):
                continue
            path = os.path.join(folder, name, "entry_points.txt")
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except FileNotFoundError:
                continue
            except (OSError, UnicodeDecodeError):
                return None
            groups.update(ln.strip()[1:-1].strip() for ln in text.splitlines()
                          if ln.strip().startswith("[") and ln.strip().endswith("]"))
    return frozenset(groups)


def may_declare(group: str) -> bool:
    """False only when it is certain that no installed distribution declares `group`."""
    declared = _declared()
    return declared is None or group in declared


def entry_points(group: str) -> list[EntryPoint]:
    """importlib.metadata's entry points of `group`, without importing it when there are none."""
    if not may_declare(group):
        return []
    from importlib.metadata import entry_points as found

    return list(found(group=group))
