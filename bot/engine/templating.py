"""Sandboxed Jinja2 templating for step parameters.

- StrictUndefined: a misspelt variable fails the step, never renders as "".
- A value that is exactly one `{{ expr }}` keeps its native type (a list stays a list).
- Shell strings (fields marked `shell=True`) quote every `{{ }}` as one shell word
  unless the template says `| raw`.

Most templates only substitute variables (`echo {{ greeting }} from $(hostname)`). Those are
rendered here, as Jinja would render them, without importing Jinja (~180 M instructions, a
sixth of a fresh `eagle run`; tests/bench/bench_startup.py); anything more (a filter, an
expression, a tag, a name the context lacks, a value that is not a plain str/int/float/bool)
goes to the sandbox in eaglebot.engine.templating_jinja, loaded on first use.
tests/test_templating_fast.py holds the two to the same output on a corpus.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from types import ModuleType
from typing import Any

MAX_RENDER_CHARS = 1024 * 1024


class Raw(str):
    """A string the shell quoting leaves alone (`{{ x | raw }}`)."""


class TemplateFailure(ValueError):
    pass


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def contains_template(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(contains_template(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(contains_template(v) for v in value)
    return is_template(value)


_jinja: ModuleType | None = None


def _sandbox() -> ModuleType:
    global _jinja
    if _jinja is None:
        from eaglebot.engine import templating_jinja
        _jinja = templating_jinja
    return _jinja


# -- templates that only substitute variables ---------------------------------------------
_OPEN = re.compile(r"\{[{%#]")    # where Jinja's lexer leaves plain text
_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}(?!\})")   # Jinja's lexer skips \s+ inside
_ONLY_VAR = re.compile(r"\s*\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}(?!\})\s*")
# Names Jinja's parser reads as constants or operators, and the sandbox's globals (a test
# checks them against the environment's): left to Jinja.
_NOT_NAMES = frozenset({"true", "false", "none", "True", "False", "None", "and", "or", "not", "in", "is",
                        "if", "else", "range", "dict", "lipsum", "cycler", "joiner", "namespace"})
_PLAIN = (str, int, float, bool)


def _pieces(source: str) -> list[str] | None:
    """A template that is plain text and `{{ name }}`s as [text, name, text, name, ..., text];
    None when Jinja has more to do (a tag, a comment, an expression, a filter, a `\\r` it would
    normalise)."""
    if "\r" in source:
        return None
    out: list[str] = []
    pos = 0
    while (m := _OPEN.search(source, pos)) is not None:
        var = _VAR.match(source, m.start())
        if var is None or var.group(1) in _NOT_NAMES:
            return None
        out += [source[pos:m.start()], var.group(1)]
        pos = var.end()
    out.append(source[pos:])
    return out


_SLOW = object()


def _undefined(v: Any) -> bool:
    return _jinja is not None and _jinja.is_undefined(v)


def _fast(value: Any, ctx: Mapping[str, Any], shell: bool) -> Any:
    """`value` rendered without Jinja, or _SLOW where Jinja is needed."""
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if (r := _fast(v, ctx, shell)) is _SLOW:
                return _SLOW
            out[k] = r
        return out
    if isinstance(value, list):
        items = []
        for v in value:
            if (r := _fast(v, ctx, shell)) is _SLOW:
                return _SLOW
            items.append(r)
        return items
    if not is_template(value):
        return value
    if not shell and (m := _ONLY_VAR.fullmatch(value)) is not None:
        name = m.group(1)
        if name in _NOT_NAMES or name not in ctx or _undefined(ctx[name]):
            return _SLOW
        return ctx[name]   # a native value, as Jinja's single-expression path returns it
    pieces = _pieces(value)
    if pieces is None:
        return _SLOW
    parts = []
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            parts.append(piece)
            continue
        v = ctx.get(piece, _SLOW)
        if type(v) not in _PLAIN:   # exact types: a Raw, an Undefined or a list is Jinja's to render
            return _SLOW
        parts.append(shlex.quote(str(v)) if shell else str(v))
    return "".join(parts)


# -- the API ------------------------------------------------------------------------------
def render_value(value: Any, ctx: Mapping[str, Any], *, shell: bool = False) -> Any:
    """Render strings inside `value` (recursively), keeping native types."""
    out = _fast(value, ctx, shell)
    if out is _SLOW:
        return _sandbox().render_value(value, ctx, shell=shell)
    if isinstance(out, str) and len(out) > MAX_RENDER_CHARS:
        raise TemplateFailure(f"template {str(value)[:60]!r} renders to more than {MAX_RENDER_CHARS:,} characters")
    return out


def names_used(value: Any) -> set[str]:
    """Variable names a template (or a structure of templates) reads."""
    out: set[str] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Mapping):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif is_template(v):
            pieces = _pieces(v)
            out |= set(pieces[1::2]) if pieces is not None else _sandbox().names_used(v)
    return out


def check_syntax(value: Any) -> str | None:
    """Return an error message if any template in `value` does not parse."""
    if isinstance(value, Mapping):
        return next((err for v in value.values() if (err := check_syntax(v))), None)
    if isinstance(value, list):
        return next((err for v in value if (err := check_syntax(v))), None)
    if is_template(value) and _pieces(value) is None:
        return _sandbox().check_syntax(value)
    return None


def evaluate(expr: str, ctx: Mapping[str, Any]) -> Any:
    """A bare expression as in Ansible's `when:`."""
    return _sandbox().evaluate(expr, ctx)


def check_expression(expr: str) -> str | None:
    return _sandbox().check_expression(expr)


def unresolved(name: str, reason: str, missing: tuple[str, str | None] | None = None) -> Any:
    """A var whose template could not be rendered: using it fails with the reason. `missing`:
    (the variable nobody set that it needs, the input that would give it)."""
    return _sandbox().unresolved(name, reason, missing)


def is_unresolved(v: Any) -> bool:
    return _jinja is not None and _jinja.is_unresolved(v)   # (none exists before the sandbox loads)


def unresolved_reason(v: Any) -> tuple[str, tuple[str, str | None] | None]:
    """An unresolved var's reason, and what is missing for it (see `unresolved`)."""
    return _sandbox().unresolved_reason(v)
