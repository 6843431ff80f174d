"""A regression's reason shortened for a narrow view (a terminal line, a Slack section)
without cutting inside a value: whole items, then `and N more` (pure, no imports: the
front ends' light commands load it)."""
from __future__ import annotations


def reason_items(text: str) -> list[str]:
    """A reason's items: split at "; " outside brackets and quotes (a value such as
    `[-1, 2, 30]` or a parenthesised aside stays whole)."""
    items, depth, start, quote = [], 0, 0, False
    for i, ch in enumerate(text):
        if ch == '"':
            quote = not quote
        elif not quote and ch in "([{":
            depth += 1
        elif not quote and ch in ")]}":
            depth = max(0, depth - 1)
        elif not quote and depth == 0 and text.startswith("; ", i):
            items.append(text[start:i])
            start = i + 2
    items.append(text[start:])
    return [it for it in items if it]


def clip_items(text: str, limit: int) -> str:
    """`text` in about `limit` characters without cutting inside a value: whole items, then
    `; and N more` (the first item is kept whole even when it alone is longer)."""
    if len(text) <= limit:
        return text
    items = reason_items(text)
    out = items[0]
    for k, it in enumerate(items[1:], start=1):
        more = f"; and {len(items) - k - 1} more" if k < len(items) - 1 else ""
        if len(out) + 2 + len(it) + len(more) > limit:
            return f"{out}; and {len(items) - k} more"
        out += "; " + it
    return out
