"""Limits on what a user (or a playbook file) can make the bot parse.

A 430-character YAML alias bomb once froze the bot: user text is parsed here, without
aliases, with a size and a nesting cap, so parsing it is bounded work; a playbook file may
use anchors, but its expanded size is counted (without expanding it) before it is built.

Chosen limits (README "Reliability"): 8 KiB per input value, 64 KiB for all inputs of one
request, 32 levels of nesting, 100,000 nodes in an expanded playbook.
"""
from __future__ import annotations

import json
from typing import Any

import yaml

from eaglebot.engine.output import printable
from eaglebot.yamlsafe import AcyclicSafeLoader

MAX_VALUE_BYTES = 8 * 1024
MAX_REQUEST_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_PLAYBOOK_NODES = 100_000
MAX_PLAYBOOK_DEPTH = 64


class LimitError(ValueError):
    """One sentence saying which limit was hit."""


class BoundedLoader(AcyclicSafeLoader):
    """SafeLoader with a nesting cap (the composer recurses: 3,000 levels would hit Python's
    recursion limit) that refuses recursive aliases; the user-text variant also refuses
    anchors and aliases."""

    max_depth = MAX_PLAYBOOK_DEPTH
    allow_aliases = True
    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if not self.allow_aliases:
            if self.check_event(yaml.AliasEvent):
                raise LimitError("YAML aliases (*name) are not allowed in inputs")
            if getattr(self.peek_event(), "anchor", None):  # type: ignore[no-untyped-call]
                raise LimitError("YAML anchors (&name) are not allowed in inputs")
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise LimitError(f"the value is nested more than {self.max_depth} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _NoAliasLoader(BoundedLoader):
    max_depth = MAX_DEPTH
    allow_aliases = False


_CLoader: Any = getattr(yaml, "CSafeLoader", None)


def _shape(data: Any) -> tuple[int, int]:
    """(values, depth) of loaded YAML data, walked without recursion."""
    nodes, deepest, stack = 0, 0, [(data, 1)]
    while stack:
        obj, depth = stack.pop()
        nodes += 1
        deepest = max(deepest, depth)
        if isinstance(obj, dict):
            stack.extend((v, depth + 1) for v in obj.values())
        elif isinstance(obj, list):
            stack.extend((v, depth + 1) for v in obj)
    return nodes, deepest


def load_playbook_yaml(text: str) -> Any:
    """A playbook file: anchors allowed, but its expanded size and depth are bounded.

    Text that cannot hold an anchor or alias (no `&`, no `*`) is parsed by libyaml's C loader
    (20x faster) and its shape checked after; anything else goes through the bounded
    pure-Python composer, which counts aliases without expanding them."""
    if _CLoader is not None and "&" not in text and "*" not in text:
        try:
            data = yaml.load(text, Loader=_CLoader)
        except (yaml.YAMLError, RecursionError):
            data = _BROKEN  # rare: the bounded loader below says exactly what is wrong, and where
        if data is _BROKEN:
            return _load_bounded(text)
        nodes, depth = _shape(data)
        if depth > MAX_PLAYBOOK_DEPTH:
            raise LimitError(f"the value is nested more than {MAX_PLAYBOOK_DEPTH} levels deep")
        if nodes > MAX_PLAYBOOK_NODES:
            raise LimitError(f"the document expands to more than {MAX_PLAYBOOK_NODES:,} values")
        return data
    return _load_bounded(text)


_BROKEN = object()


def _load_bounded(text: str) -> Any:
    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        n = expanded_nodes(node)
        if n > MAX_PLAYBOOK_NODES:
            raise LimitError(f"the document expands to more than {MAX_PLAYBOOK_NODES:,} values "
                             f"(YAML aliases nested too deep?)")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_user_yaml(text: str) -> Any:
    """A user's YAML/JSON flow text as data: no aliases, bounded size and depth.

    Raises LimitError for a limit, yaml.YAMLError for text that does not parse.
    """
    check_size(text)
    loader = _NoAliasLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_user_json(text: str) -> Any:
    check_size(text)
    try:
        value = json.loads(text)
    except RecursionError:
        raise LimitError(f"the value is nested more than {MAX_DEPTH} levels deep") from None
    check_depth(value)
    return value


def check_size(text: str, limit: int = MAX_VALUE_BYTES) -> None:
    n = len(text.encode("utf-8", "surrogatepass"))
    if n > limit:
        raise LimitError(f"the value is {n:,} bytes; the limit is {limit // 1024} KiB")


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """Iteratively: a 3,000-deep list must not hit Python's recursion limit here."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, (list, tuple)):
            children = v
        else:
            continue
        if d > limit:
            raise LimitError(f"the value is nested more than {limit} levels deep")
        stack.extend((c, d + 1) for c in children)


def check_text(value: Any) -> None:
    """No NUL byte and no undecodable byte (a lone surrogate) anywhere in a user's value:
    a NUL cannot travel in a command line, and such bytes are not text."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if "\x00" in v:
                raise LimitError("the value contains a NUL byte")
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                raise LimitError(f"the value is not valid UTF-8 text ({printable(v[e.start])} "
                                 f"at character {e.start + 1})") from None
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


def expanded_nodes(root: yaml.Node) -> int:
    """How many nodes the document has with every alias expanded, counted without expanding
    it (aliases share node objects: memoized per node), iteratively (no recursion limit)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        kids: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                kids += [k, v]
        elif isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        if done or not kids:
            sizes[id(node)] = min(1 + sum(sizes.get(id(k), 0) for k in kids), 10 * MAX_PLAYBOOK_NODES)
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in sizes)
    return sizes[id(root)]

