"""YAML that refers to itself is refused while it is composed, at the alias, with its line.

`vars: &v {x: *v}` is legal YAML: PyYAML (and libyaml's composer) builds a node that contains
itself, and everything after — counting the expanded size, building the dict, validating it —
walks that cycle forever with memory growing without bound. No file the bot reads (playbook,
eagle.yaml, inputs) has a reason to be recursive, so an alias to an anchor whose value is
still open is an error, found in one pass over the events (bounded time and memory).
"""
from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError

# libyaml's loader when PyYAML was built with it (20x faster than the pure-Python one);
# its composer is C code we cannot hook, so it only reads text that has no alias at all.
_CSafeLoader: Any = getattr(yaml, "CSafeLoader", None)


class AcyclicSafeLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses an alias to a value that contains it."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._open_anchors: list[str] = []   # anchors whose value is being composed, innermost last

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self._open_anchors:
                mark: Any = event.start_mark   # (the stubs also allow libyaml's Mark, which this loader never makes)
                raise ComposerError(None, None, f"the alias *{event.anchor} refers to the value that contains it "
                                                f"(a recursive alias)", mark)
            return super().compose_node(parent, index)
        anchor = getattr(event, "anchor", None)
        if anchor is None:
            return super().compose_node(parent, index)
        self._open_anchors.append(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._open_anchors.pop()


def safe_load(text: str) -> Any:
    """yaml.safe_load without recursive aliases (a ComposerError with the alias's line)."""
    if _CSafeLoader is not None and "*" not in text:
        return yaml.load(text, Loader=_CSafeLoader)
    loader = AcyclicSafeLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def compose(text: str) -> yaml.Node | None:
    """yaml.compose without recursive aliases."""
    loader = AcyclicSafeLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()
