"""The nearest known name to one that is not known (`did you mean 'relaunch'?`), as git, gh and
kubectl suggest it.

One home for the wording, so a playbook, an input, a host, a group, a skill and a config key are
suggested alike in the CLI and in Slack. Pure and cheap (difflib, the standard library's); below
every layer (it imports nothing of eaglebot, nor pydantic: a model is walked by its annotations).
"""
from __future__ import annotations

import difflib
import types
import typing
from typing import Any, Iterable

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


def keys_at(model: Any, loc: tuple[str | int, ...]) -> list[str]:
    """The keys a pydantic model allows in the mapping at `loc` below it (('hosts', 'gpu-01') of
    Settings -> HostConfig's fields, ('steps', 0) of a Playbook -> a Step's), found by walking
    the annotations (dict and list values, `X | None`); aliases as the file spells them. What an
    unknown key is compared with. [] when `loc` is not a model's mapping."""
    tp: Any = model
    for part in loc:
        tp = _unwrap(tp)
        fields = getattr(tp, "model_fields", None)
        if isinstance(fields, dict):
            field = fields.get(str(part)) or next((f for f in fields.values() if f.alias == part), None)
            if field is None:
                return []
            tp = field.annotation
        elif typing.get_origin(tp) in (dict, list):
            tp = typing.get_args(tp)[-1]
        else:
            return []
    fields = getattr(_unwrap(tp), "model_fields", None)
    if not isinstance(fields, dict):
        return []
    return [f.alias or k for k, f in fields.items() if not f.exclude]


def _unwrap(tp: Any) -> Any:
    """`X | None` -> X."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1 else tp
