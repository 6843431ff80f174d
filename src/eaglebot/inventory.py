"""The inventory at fleet size: host ranges, `host_defaults`, addresses, groups of groups, the
group `all`, and host patterns (`-H`), as pure functions over the config's mappings.

Ranges: `gpu-[001:128]` (numbers keep the width of the first bound), `h200-[a:d]-[1:8]`
(letters; several ranges multiply). A range in `hosts:` gives every name the same settings; in
a group it names those hosts. Patterns follow Ansible's limit grammar: `a:b` or `a,b` is a
union, `!x` takes x away, `&x` keeps only what is also in x; each part is a host, a group,
`all`, a range or a glob (`gpu-0*`).

An ssh host's `address` defaults to its name (Ansible's `inventory_hostname`); it may be a
template of the name and the range member: `"{{ name }}.cluster"`, `"10.0.1.{{ n }}"`.

Bounded: a range's size is counted before any list is built (`gpu-[1:99999999]` is one
sentence, at once), groups resolve without recursion to a fixed depth, and selection is linear
in the hosts named (a fleet of 100,000 hosts is the limit, not a hang).
"""
from __future__ import annotations

import fnmatch
import itertools
import re
import string
from typing import Any, Collection, Iterator, Mapping

from eaglebot.errors import UsageError
from eaglebot.suggest import did_you_mean

ALL = "all"
_RANGE = re.compile(r"\[([0-9]+|[a-z]+|[A-Z]+):([0-9]+|[a-z]+|[A-Z]+)\]")
MAX_EXPANSION = 100_000  # a typo such as gpu-[1:99999999] is an error, not a hang
MAX_BOUND_DIGITS = 12    # (counting is exact at any size; a longer bound is a typo, said so)
MAX_GROUP_DEPTH = 64     # groups of groups of ...: deeper is a mistake (a generated chain), said so
MAX_MEMBERSHIPS = 1_000_000  # hosts in all groups together, once flattened (each group a list)


class InventoryError(UsageError):
    """An inventory error at a place in eagle.yaml (`loc`, e.g. ('groups', 'h200'))."""

    def __init__(self, message: str, loc: tuple[str | int, ...] = ()):
        super().__init__(message)
        self.loc = loc


def shown(word: str, n: int = 64) -> str:
    """A name as an error quotes it: at most n characters (a pasted blob is not echoed whole)."""
    return word if len(word) <= n else word[:n] + "…"


# -- ranges ------------------------------------------------------------------------

def _span(a: str, b: str) -> tuple[int, int, int, str]:
    """(first, last, zero-padding width, letters or '') of `[a:b]`, without listing it."""
    if a.isdigit() and b.isdigit():
        if max(len(a), len(b)) > MAX_BOUND_DIGITS:
            raise ValueError(f"[{shown(a, 16)}:{shown(b, 16)}] has a bound of more than {MAX_BOUND_DIGITS} digits")
        lo, hi = int(a), int(b)
        if lo > hi:
            raise ValueError(f"[{a}:{b}] counts down")
        return lo, hi, len(a) if a.startswith("0") else 0, ""
    if len(a) == 1 and len(b) == 1 and a.isalpha() and b.isalpha() and a.islower() == b.islower():
        letters = string.ascii_lowercase if a.islower() else string.ascii_uppercase
        i, j = letters.index(a), letters.index(b)
        if i > j:
            raise ValueError(f"[{a}:{b}] counts down")
        return i, j, 0, letters
    raise ValueError(f"[{shown(a, 16)}:{shown(b, 16)}] is not a range (numbers [1:8], or single letters [a:d])")


def _parse(name: str) -> tuple[list[str], list[tuple[int, int, int, str]]]:
    """The literal pieces of a name (one more than its ranges) and each range's span."""
    pieces: list[str] = []
    spans: list[tuple[int, int, int, str]] = []
    at = 0
    for m in _RANGE.finditer(name):
        pieces.append(name[at:m.start()])
        try:
            spans.append(_span(m.group(1), m.group(2)))
        except ValueError as e:
            raise ValueError(f"{shown(name)}: {e}") from None
        at = m.end()
    pieces.append(name[at:])
    return pieces, spans


def is_range(name: str) -> bool:
    return bool(_RANGE.search(name))


def count(name: str) -> int:
    """How many hosts `name` names (1 without a range), counted without listing them; a size
    over MAX_EXPANSION or a malformed range raises ValueError."""
    _, spans = _parse(name)
    total = 1
    for lo, hi, _, _ in spans:
        total *= hi - lo + 1
    if total > MAX_EXPANSION:
        raise ValueError(f"{shown(name)} names {total} hosts (at most {MAX_EXPANSION})")
    return total


def members(name: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Each host `name` names, with its range members as written (`gpu-07` -> ('07',)), in
    order; the size is checked first (`count`). Raises ValueError."""
    count(name)
    pieces, spans = _parse(name)
    columns = [[letters[i] if letters else str(i).zfill(width) for i in range(lo, hi + 1)]
               for lo, hi, width, letters in spans]
    for values in itertools.product(*columns):
        yield "".join(p + v for p, v in zip(pieces, values)) + pieces[-1], values


def expand(name: str) -> list[str]:
    """`gpu-[01:03]` -> gpu-01, gpu-02, gpu-03; a name without a range is itself. Raises ValueError."""
    return [n for n, _ in members(name)]


# -- hosts -------------------------------------------------------------------------

_ADDRESS_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_ADDRESS = re.compile(r"[A-Za-z0-9_.:%-]{1,253}")   # a DNS name, an IPv4 or an IPv6 address
ADDRESS_VARS = ("name", "n", "n_text", "index")
_ONLY = "an address may use {{ name }}, and in a range {{ n }}, {{ n_text }} and {{ index }}"


def render_address(template: str, name: str, member: tuple[tuple[str, ...], int] | None) -> str:
    """The address `template` gives host `name`: `{{ name }}`, and in a range `{{ n }}` (the
    last range's member as a number: 7 for gpu-07; a letter range's letter), `{{ n_text }}` (as
    written: "07") and `{{ index }}` (0-based position in the range). A tiny substitution, not
    Jinja2: 100,000 members render in 0.1 s instead of 2.4 s, and an operator's template
    cannot compute anything. Raises ValueError."""
    values: dict[str, object] = {"name": name}
    if member is not None:
        written, index = member
        last = written[-1]
        values.update(n=int(last) if last.isdigit() else last, n_text=last, index=index)

    def sub(m: re.Match[str]) -> str:
        var = m.group(1)
        if var not in values:
            hint = did_you_mean(var, ADDRESS_VARS)
            why = f" ({name} is not in a range)" if var in ADDRESS_VARS else f" ({hint})" if hint else ""
            raise ValueError(f"address {shown(template)!r}: `{var}` is not defined{why}; {_ONLY}")
        return str(values[var])

    out = _ADDRESS_VAR.sub(sub, template)
    if "{" in out or "}" in out:
        raise ValueError(f"address {shown(template)!r}: {_ONLY}, each alone in its {{{{ }}}}")
    if not _ADDRESS.fullmatch(out):
        raise ValueError(f"address {shown(template)!r} gives {shown(out)!r} for {name}: not a host name or IP address")
    return out


def _merge(defaults: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """A host's settings over `host_defaults`: its own keys win; `vars` merge key by key."""
    out = {**defaults, **own}
    if isinstance(defaults.get("vars"), dict) and isinstance(own.get("vars"), dict):
        out["vars"] = {**defaults["vars"], **own["vars"]}
    return out


def _is_template(v: Any) -> bool:
    return isinstance(v, str) and ("{" in v or "}" in v)


def expand_hosts(hosts: Any, defaults: Any) -> Any:
    """The `hosts:` mapping with ranges expanded, `host_defaults` applied to every host (a
    `local`-transport host takes only `vars` and `shell` from them) and each ssh host's
    address resolved (its name by default, or its template rendered)."""
    if hosts is None:
        hosts = {}
    if not isinstance(hosts, dict):
        return hosts  # pydantic says what is wrong with it
    if defaults is not None and not isinstance(defaults, dict):
        raise InventoryError("host_defaults must be a mapping of host settings", ("host_defaults",))
    defaults = defaults or {}
    keys = [str(k) for k in hosts]
    total = 0
    for key in keys:
        if not is_range(key):
            continue
        try:
            total += count(key)
        except ValueError as e:
            raise InventoryError(f"hosts: {e}", ("hosts", key)) from None
        if total > MAX_EXPANSION:
            raise InventoryError(f"hosts: the ranges up to {shown(key)} name {total} hosts in all "
                                 f"(at most {MAX_EXPANSION})", ("hosts", key))
    # each ranged host: its range members as written and its place in the range
    member: dict[str, tuple[tuple[str, ...], int]] = {}
    origin: dict[str, str] = {}   # host -> the key that gave it its address (for error lines)
    for key in keys:
        if is_range(key):
            for i, (n, written) in enumerate(members(key)):
                member[n] = (written, i)
    out: dict[str, Any] = {}
    for raw_key, own in hosts.items():
        key = str(raw_key)
        if not is_range(key) and key in member:
            continue  # refined below, over what its range gives it
        own = {} if own is None else own
        names = [n for n, _ in members(key)] if is_range(key) else [key]
        if not isinstance(own, dict):
            out.update({n: own for n in names})
            continue
        base = ({k: v for k, v in defaults.items() if k in ("vars", "shell")}
                if own.get("transport") == "local" else defaults)
        for n in names:
            if n in out:
                raise InventoryError(f"hosts: {n} is named twice (by {shown(key)})", ("hosts", key))
            out[n] = _merge(base, dict(own))
            origin[n] = key
    for raw_key, own in hosts.items():  # a host named on its own refines what a range gave it
        key = str(raw_key)
        if key in member and not is_range(key):
            out[key] = _merge(out[key], own if isinstance(own, dict) else {})
            if isinstance(own, dict) and "address" in own:
                origin[key] = key
    for n, cfg in out.items():
        if not isinstance(cfg, dict) or cfg.get("transport") == "local":
            continue
        address = cfg.get("address")
        if address is None:
            cfg["address"] = n
        elif _is_template(address):
            try:
                cfg["address"] = render_address(address, n, member.get(n))
            except ValueError as e:
                key = origin.get(n, n)
                raise InventoryError(f"hosts: {shown(key)}: {e}", ("hosts", key, "address")) from None
    return out


def key_for(hosts: Mapping[Any, Any], name: str) -> str | None:
    """The key of the `hosts:` mapping as written that names host `name` (itself, or the range
    it is in): where an error about the expanded host points in the file."""
    if name in hosts:
        return name
    for key in hosts:
        k = str(key)
        try:
            if is_range(k) and name in expand(k):
                return k
        except ValueError:
            continue
    return None


# -- groups ------------------------------------------------------------------------

def _chain(path: list[str], last: str) -> str:
    shown_path = path if len(path) <= 6 else [*path[:3], "…", *path[-2:]]
    return " -> ".join([*shown_path, last])


def expand_groups(groups: Any, hosts: Collection[str]) -> dict[str, list[str]]:
    """Each group as a list of host names: ranges expanded, groups of groups flattened, in
    order; an unknown name, a loop or nesting deeper than MAX_GROUP_DEPTH is an
    InventoryError at the group. Iterative (a chain of any length is a sentence, not a
    RecursionError) and linear in the memberships."""
    if groups is None:
        return {}
    if not isinstance(groups, dict):
        raise InventoryError("groups must be a mapping of group name to a list of hosts", ("groups",))
    known = hosts if isinstance(hosts, (set, frozenset, dict)) else set(hosts)
    raw: dict[str, list[str]] = {}
    for g, listed in groups.items():
        g = str(g)
        if g in known:
            raise InventoryError(f"group {shown(g)!r} has the name of a host", ("groups", g))
        if isinstance(listed, str):
            listed = [m.strip() for m in listed.split(",") if m.strip()]
        if not isinstance(listed, list):
            raise InventoryError(f"group {shown(g)!r}: a list of hosts and groups", ("groups", g))
        raw[g] = [str(m) for m in listed]
        for m in raw[g]:
            try:
                count(m)
            except ValueError as e:
                raise InventoryError(f"group {shown(g)!r}: {e}", ("groups", g)) from None

    def names_of(g: str) -> Iterator[str]:
        for m in raw[g]:
            yield from (expand(m) if is_range(m) else (m,))

    done: dict[str, dict[str, None]] = {}   # group -> its hosts, in order (a dict: an ordered set)
    depth: dict[str, int] = {}              # group -> how deep its groups of groups nest (1: none)
    total = 0
    for root in raw:
        if root in done:
            continue
        # frames: (group, its names still to read, its hosts so far, the depth below it)
        stack: list[tuple[str, Iterator[str], dict[str, None], list[int]]] = [(root, names_of(root), {}, [1])]
        on_path = {root}
        while stack:
            g, names, out, below = stack[-1]
            pushed = False
            for n in names:
                if n in raw:
                    if n in done:
                        out.update(done[n])
                        below[0] = max(below[0], depth[n] + 1)
                    elif n in on_path:
                        path = [f[0] for f in stack]
                        raise InventoryError(f"groups form a loop ({_chain(path[path.index(n):], n)})",
                                             ("groups", root))
                    elif len(stack) >= MAX_GROUP_DEPTH:
                        raise InventoryError(f"groups nest more than {MAX_GROUP_DEPTH} deep "
                                             f"({_chain([f[0] for f in stack], n)})", ("groups", root))
                    else:
                        stack.append((n, names_of(n), {}, [1]))
                        on_path.add(n)
                        pushed = True
                        break
                elif n in known:
                    out[n] = None
                else:
                    hint = did_you_mean(n, itertools.chain(raw, known))
                    raise InventoryError(f"group {shown(g)!r}: unknown host {shown(n)!r}"
                                         f"{'; ' + hint if hint else ''}", ("groups", g))
            if pushed:
                continue
            stack.pop()
            on_path.discard(g)
            if below[0] > MAX_GROUP_DEPTH:   # (through a group resolved before, deep already)
                raise InventoryError(f"group {shown(g)!r} nests groups {below[0]} deep (at most "
                                     f"{MAX_GROUP_DEPTH})", ("groups", g))
            done[g], depth[g] = out, below[0]
            total += len(out)
            if total > MAX_MEMBERSHIPS:
                raise InventoryError(f"groups: {total} memberships in all once groups of groups are "
                                     f"flattened (at most {MAX_MEMBERSHIPS})", ("groups", g))
            if stack:   # the group that named it goes on after it, with its hosts in place
                parent = stack[-1]
                parent[2].update(out)
                parent[3][0] = max(parent[3][0], below[0] + 1)
    return {g: list(done[g]) for g in raw}


# -- selection (-H) ----------------------------------------------------------------

def split_patterns(raw: str) -> list[str]:
    """`a:b,c` -> a, b, c: ':' and ',' separate patterns as in Ansible, except inside a range's
    brackets (`gpu-[01:08]`). One pass over the text (a regex look-ahead here was quadratic)."""
    parts: list[str] = []
    start, inside = 0, False
    for i, c in enumerate(raw):
        if c == "[":
            inside = True
        elif c == "]":
            inside = False
        elif c in ",:" and not inside:
            parts.append(raw[start:i])
            start = i + 1
    parts.append(raw[start:])
    return parts


def _one(word: str, hosts: list[str], hostset: Collection[str], groups: Mapping[str, list[str]],
         everyone: list[str]) -> list[str]:
    if word in groups:  # a group `all` of the config's own wins over the built-in one
        return list(groups[word])
    if word == ALL:
        return list(everyone)
    if word in hostset:
        return [word]
    if is_range(word):
        try:
            names = expand(word)
        except ValueError as e:
            raise UsageError(str(e)) from None
        unknown = [n for n in names if n not in hostset]
        if unknown:
            raise UsageError(f"unknown host {unknown[0]!r} in {shown(word)} ({len(unknown)} of {len(names)} "
                             f"not configured)")
        return names
    if any(c in word for c in "*?["):
        found = [h for h in hosts if fnmatch.fnmatchcase(h, word)]
        found += [m for g in groups if fnmatch.fnmatchcase(g, word) for m in groups[g]]
        if not found:
            raise UsageError(f"no host or group matches {shown(word)!r}")
        return found
    hint = did_you_mean(word, itertools.chain(hosts, groups))
    if hint:
        raise UsageError(f"unknown host {shown(word)!r}; {hint}")
    known = sorted(set(hosts) | set(groups))
    listed = ", ".join(known[:20]) + (f", … ({len(known)} in all; see `eagle hosts`)" if len(known) > 20 else "")
    raise UsageError(f"unknown host {shown(word)!r} (known: {listed})")


def select(patterns: list[str], hosts: Collection[str], groups: Mapping[str, list[str]],
           everyone: list[str]) -> list[str]:
    """The hosts a list of `-H` values names, in order, each once (Ansible's limit grammar).
    Linear in the hosts the patterns name."""
    ordered = list(hosts)
    hostset = hosts if isinstance(hosts, (set, frozenset, dict)) else set(ordered)
    chosen: dict[str, None] = {}
    drop: set[str] = set()
    keep: list[set[str]] = []
    for raw in patterns:
        for part in (p.strip() for p in split_patterns(str(raw))):
            if not part:
                continue
            if part.startswith("!"):
                drop.update(_one(part[1:], ordered, hostset, groups, everyone))
            elif part.startswith("&"):
                keep.append(set(_one(part[1:], ordered, hostset, groups, everyone)))
            else:
                chosen.update(dict.fromkeys(_one(part, ordered, hostset, groups, everyone)))
    return [h for h in chosen if h not in drop and all(h in k for k in keep)]
