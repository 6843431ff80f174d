"""The nearest known name to one that is not known (`did you mean 'relaunch'?`), as git, gh and
kubectl suggest it.

One home for the wording, so a playbook, an input, a host, a group, a skill and a config key are
suggested alike in the CLI and in Slack. Pure and cheap (difflib, the standard library's); below
every layer (it imports nothing of eaglebot).
"""
from __future__ import annotations

import difflib
from typing import Iterable

CUTOFF = 0.6          # difflib's own default: `relanch` -> `relaunch` (0.93), `bnech` -> `bench` (0.8)
MAX_CANDIDATES = 100_000   # (an inventory's hosts) past this, no suggestion rather than a slow error


def nearest(word: str, known: Iterable[str], cutoff: float = CUTOFF) -> str | None:
    """The known name closest to `word`, or None when none is close (or `word` itself is known)."""
    if len(word) > 200:
        return None   # a pasted blob is nobody's typo, and SequenceMatcher is quadratic in length
    names = []
    for i, k in enumerate(known):
        if i >= MAX_CANDIDATES:
            return None
        names.append(str(k))
    if word in names:
        return None
    found = difflib.get_close_matches(word, names, n=1, cutoff=cutoff)
    return found[0] if found else None


def did_you_mean(word: str, known: Iterable[str], cutoff: float = CUTOFF) -> str:
    """`did you mean 'relaunch'?` for the nearest known name, else ''."""
    near = nearest(word, known, cutoff)
    return f"did you mean {near!r}?" if near is not None else ""


def unknown_key_hint(word: str, known: Iterable[str]) -> str:
    """What follows "unknown key" in a file's error: ` (did you mean 'vars'?)`, else ''."""
    hint = did_you_mean(word, known)
    return f" ({hint})" if hint else ""
