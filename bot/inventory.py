"""The inventory at fleet size: host ranges, `host_defaults`, groups of groups, the group `all`,
and host patterns (`-H`), as pure functions over the config's mappings.

Ranges: `gpu-[001:128]` (numbers keep the width of the first bound), `h200-[a:d]-[1:8]`
(letters; several ranges multiply). A range in `hosts:` gives every name the same settings; in
a group it names those hosts. Patterns follow Ansible's limit grammar: `a:b` or `a,b` is a
union, `!x` takes x away, `&x` keeps only what is also in x; each part is a host, a group,
`all`, a range or a glob (`gpu-0*`).
"""
from __future__ import annotations

import fnmatch
import re
import string
from typing import Any

from eaglebot.errors import UsageError

ALL = "all"
_RANGE = re.compile(r"\[([0-9]+|[a-z]+|[A-Z]+):([0-9]+|[a-z]+|[A-Z]+)\]")
MAX_EXPANSION = 100_000  # a typo such as gpu-[1:99999999] is an error, not a hang


class InventoryError(UsageError):
    """An inventory error at a place in eagle.yaml (`loc`, e.g. ('groups', 'h200'))."""

    def __init__(self, message: str, loc: tuple[str | int, ...] = ()):
        super().__init__(message)
        self.loc = loc


def _span(a: str, b: str) -> list[str]:
    if a.isdigit() and b.isdigit():
        lo, hi = int(a), int(b)
        if lo > hi:
            raise ValueError(f"[{a}:{b}] counts down")
        width = len(a) if a.startswith("0") else 0
        return [str(i).zfill(width) for i in range(lo, hi + 1)]
    if len(a) == 1 and len(b) == 1 and a.isalpha() and b.isalpha() and a.islower() == b.islower():
        letters = string.ascii_lowercase if a.islower() else string.ascii_uppercase
        i, j = letters.index(a), letters.index(b)
        if i > j:
            raise ValueError(f"[{a}:{b}] counts down")
        return list(letters[i:j + 1])
    raise ValueError(f"[{a}:{b}] is not a range (numbers [1:8], or single letters [a:d])")


def is_range(name: str) -> bool:
    return bool(_RANGE.search(name))


def expand(name: str) -> list[str]:
    """`gpu-[01:03]` -> gpu-01, gpu-02, gpu-03; a name without a range is itself. Raises ValueError."""
    m = _RANGE.search(name)
    if m is None:
        return [name]
    head, tail = name[:m.start()], name[m.end():]
    tails = expand(tail)
    out = [f"{head}{x}{t}" for x in _span(m.group(1), m.group(2)) for t in tails]
    if len(out) > MAX_EXPANSION:
        raise ValueError(f"{name} names {len(out)} hosts (at most {MAX_EXPANSION})")
    return out


def _merge(defaults: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """A host's settings over `host_defaults`: its own keys win; `vars` merge key by key."""
    out = {**defaults, **own}
    if isinstance(defaults.get("vars"), dict) and isinstance(own.get("vars"), dict):
        out["vars"] = {**defaults["vars"], **own["vars"]}
    return out


def expand_hosts(hosts: Any, defaults: Any) -> Any:
    """The `hosts:` mapping with ranges expanded and `host_defaults` applied to every host
    (a `local`-transport host takes only `vars` and `shell` from them)."""
    if hosts is None:
        hosts = {}
    if not isinstance(hosts, dict):
        return hosts  # pydantic says what is wrong with it
    if defaults is not None and not isinstance(defaults, dict):
        raise InventoryError("host_defaults must be a mapping of host settings", ("host_defaults",))
    defaults = defaults or {}
    expanded: dict[str, list[str]] = {}
    for key in hosts:
        try:
            expanded[str(key)] = expand(str(key))
        except ValueError as e:
            raise InventoryError(f"hosts: {key}: {e}", ("hosts", str(key))) from None
    ranged = {n for key, names in expanded.items() if is_range(key) for n in names}
    out: dict[str, Any] = {}
    for key, own in hosts.items():
        key = str(key)
        if not is_range(key) and key in ranged:
            continue  # refined below, over what its range gives it
        own = {} if own is None else own
        if not isinstance(own, dict):
            out.update({n: own for n in expanded[key]})
            continue
        base = ({k: v for k, v in defaults.items() if k in ("vars", "shell")}
                if own.get("transport") == "local" else defaults)
        for n in expanded[key]:
            if n in out:
                raise InventoryError(f"hosts: {n} is named twice (by {key})", ("hosts", key))
            out[n] = _merge(base, dict(own))
    for key, own in hosts.items():  # a host named on its own refines what a range gave it
        if str(key) in ranged and not is_range(str(key)):
            out[str(key)] = _merge(out[str(key)], own if isinstance(own, dict) else {})
    return out


def expand_groups(groups: Any, hosts: set[str]) -> dict[str, list[str]]:
    """Each group as a list of host names: ranges expanded, groups of groups flattened, in
    order; an unknown name or a loop is an InventoryError at the group."""
    if groups is None:
        return {}
    if not isinstance(groups, dict):
        raise InventoryError("groups must be a mapping of group name to a list of hosts", ("groups",))
    raw: dict[str, list[str]] = {}
    for g, members in groups.items():
        g = str(g)
        if g in hosts:
            raise InventoryError(f"group {g!r} has the name of a host", ("groups", g))
        if isinstance(members, str):
            members = [m.strip() for m in members.split(",") if m.strip()]
        if not isinstance(members, list):
            raise InventoryError(f"group {g!r}: a list of hosts and groups", ("groups", g))
        raw[g] = [str(m) for m in members]
    done: dict[str, list[str]] = {}

    def flat(g: str, path: list[str]) -> list[str]:
        if g in done:
            return done[g]
        if g in path:
            raise InventoryError(f"groups form a loop ({' -> '.join([*path, g])})", ("groups", path[0]))
        out: list[str] = []
        for m in raw[g]:
            try:
                names = expand(m)
            except ValueError as e:
                raise InventoryError(f"group {g!r}: {m}: {e}", ("groups", g)) from None
            for n in names:
                if n in raw:
                    members = flat(n, [*path, g])
                elif n in hosts:
                    members = [n]
                else:
                    raise InventoryError(f"group {g!r}: unknown host {n!r}", ("groups", g))
                out.extend(x for x in members if x not in out)
        done[g] = out
        return out

    return {g: flat(g, []) for g in raw}


def _one(word: str, hosts: list[str], groups: dict[str, list[str]], everyone: list[str]) -> list[str]:
    if word in groups:  # a group `all` of the config's own wins over the built-in one
        return list(groups[word])
    if word == ALL:
        return list(everyone)
    if word in hosts:
        return [word]
    if is_range(word):
        try:
            names = expand(word)
        except ValueError as e:
            raise UsageError(f"{word}: {e}") from None
        unknown = [n for n in names if n not in hosts]
        if unknown:
            raise UsageError(f"unknown host {unknown[0]!r} in {word} ({len(unknown)} of {len(names)} not configured)")
        return names
    if any(c in word for c in "*?["):
        found = [h for h in hosts if fnmatch.fnmatchcase(h, word)]
        found += [m for g in groups if fnmatch.fnmatchcase(g, word) for m in groups[g]]
        if not found:
            raise UsageError(f"no host or group matches {word!r}")
        return found
    known = sorted(set(hosts) | set(groups))
    shown = ", ".join(known[:20]) + (f", … ({len(known)} in all; see `eagle hosts`)" if len(known) > 20 else "")
    raise UsageError(f"unknown host {word!r} (known: {shown})")


def select(patterns: list[str], hosts: list[str], groups: dict[str, list[str]], everyone: list[str]) -> list[str]:
    """The hosts a list of `-H` values names, in order, each once (Ansible's limit grammar)."""
    chosen: list[str] = []
    drop: set[str] = set()
    keep: list[set[str]] = []
    for raw in patterns:
        # ':' separates patterns as in Ansible, except inside a range's brackets
        parts = re.split(r"[,:](?![^\[]*\])", str(raw))
        for part in (p.strip() for p in parts):
            if not part:
                continue
            if part.startswith("!"):
                drop.update(_one(part[1:], hosts, groups, everyone))
            elif part.startswith("&"):
                keep.append(set(_one(part[1:], hosts, groups, everyone)))
            else:
                chosen.extend(h for h in _one(part, hosts, groups, everyone) if h not in chosen)
    return [h for h in chosen if h not in drop and all(h in k for k in keep)]
