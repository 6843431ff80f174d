"""Key-level changes of a JSON config file from what `changes.diff` recorded (pure): a
before/after document, or a unified diff of pretty-printed JSON (whole documents when the
diff carries them, else `"key": value` fragments). Attribution names keys, not files.
"""
from __future__ import annotations

import json
import re
from typing import Any

from eaglebot.history.fingerprint import json_value


def flatten(obj: object, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1} (the dotted keys config.patch uses)."""
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj} if prefix else {}


def _brackets(text: str) -> int:
    """Open minus closed brackets outside JSON strings."""
    depth, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
    return depth


_KEY_LINE = re.compile(r'^"((?:[^"\\]|\\.)*)"\s*:\s*(.*)$')


def fragment_values(lines: list[str]) -> dict[str, Any]:
    """Values of `"key": value` lines in a fragment of pretty-printed JSON, by dotted path
    (relative to the outermost object opened inside the fragment)."""
    out: dict[str, Any] = {}
    stack: list[str] = []
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        m = _KEY_LINE.match(s)
        if m:
            key, rest = m.group(1), m.group(2).strip()
            if rest.startswith("{") and _brackets(rest) > 0:
                stack.append(key)
                i += 1
                continue
            text = rest
            depth = _brackets(rest)
            j = i
            while depth > 0 and j + 1 < len(lines):
                j += 1
                text += lines[j].strip()
                depth += _brackets(lines[j])
            if depth <= 0:
                try:
                    out[".".join(stack + [key])] = json.loads(text.rstrip(","))
                except json.JSONDecodeError:
                    pass
            i = j + 1
            continue
        if s.startswith("}") and stack:
            stack.pop()
        i += 1
    return out


def diff_sides(diff: str) -> list[tuple[list[str], list[str]]]:
    """Per hunk of a unified diff: (old lines, new lines)."""
    hunks: list[tuple[list[str], list[str]]] = []
    old: list[str] | None = None
    new: list[str] = []
    for line in diff.splitlines():
        if line.startswith("@@"):
            if old is not None:
                hunks.append((old, new))
            old, new = [], []
            continue
        if old is None or line.startswith("\\"):
            continue
        tag, body = line[:1], line[1:]
        if tag == "-":
            old.append(body)
        elif tag == "+":
            new.append(body)
        else:
            old.append(body)
            new.append(body)
    if old is not None:
        hunks.append((old, new))
    return hunks


def key_changes_from_diff(diff: str | None) -> dict[str, tuple[Any, Any]] | None:
    """Key-level changes {dotted key: (before, after)} from a changes.diff; None if unknown.

    Accepts a JSON object with before/after documents, or a unified diff of a JSON file
    (whole documents when the diff carries them, else `"key": value` fragments).
    """
    if not diff:
        return None
    doc = json_value(diff, None)
    if isinstance(doc, dict) and "before" in doc and "after" in doc:
        b, a = json_value(doc["before"], doc["before"]), json_value(doc["after"], doc["after"])
        return _dict_changes(flatten(b) if isinstance(b, dict) else {}, flatten(a) if isinstance(a, dict) else {})
    hunks = diff_sides(diff)
    if not hunks:
        return None
    if len(hunks) == 1:
        try:
            b, a = json.loads("\n".join(hunks[0][0])), json.loads("\n".join(hunks[0][1]))
            if isinstance(b, dict) and isinstance(a, dict):
                return _dict_changes(flatten(b), flatten(a))
        except json.JSONDecodeError:
            pass
    out: dict[str, tuple[Any, Any]] = {}
    for old, new in hunks:
        out.update(_dict_changes(fragment_values(old), fragment_values(new)))
    return out or None


def _dict_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    out = {}
    for k in list(before) + [k for k in after if k not in before]:
        b, a = before.get(k), after.get(k)
        if b != a:
            out[k] = (b, a)
    return out
