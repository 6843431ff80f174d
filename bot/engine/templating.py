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
import sys
from collections.abc import Mapping
from typing import Any

from eaglebot.engine.template_types import MAX_RENDER_CHARS, Raw, TemplateFailure, is_template

__all__ = ["MAX_RENDER_CHARS", "Raw", "TemplateFailure", "check_expression", "check_syntax", "contains_template",
           "evaluate", "is_template", "is_unresolved", "names_used", "render_value", "unresolved",
           "unresolved_reason"]



def contains_template(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(contains_template(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(contains_template(v) for v in value)
    return is_template(value)


_SANDBOX = "eaglebot.engine.templating_jinja"   # imported where needed, in the functions below


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
    if _SANDBOX not in sys.modules:   # no Undefined exists before the sandbox loads
        return False
    from eaglebot.engine import templating_jinja
    return templating_jinja.is_undefined(v)


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
        from eaglebot.engine import templating_jinja
        out = templating_jinja.render_value(value, ctx, shell=shell)
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
            if pieces is not None:
                out |= set(pieces[1::2])
            else:
                from eaglebot.engine import templating_jinja
                out |= templating_jinja.template_names(v)
    return out


def check_syntax(value: Any) -> str | None:
    """Return an error message if any template in `value` does not parse."""
    if isinstance(value, Mapping):
        return next((err for v in value.values() if (err := check_syntax(v))), None)
    if isinstance(value, list):
        return next((err for v in value if (err := check_syntax(v))), None)
    if is_template(value) and _pieces(value) is None:
        from eaglebot.engine import templating_jinja
        return templating_jinja.syntax_error(value)
    return None


def evaluate(expr: str, ctx: Mapping[str, Any]) -> Any:
    """A bare expression as in Ansible's `when:`."""
    from eaglebot.engine import templating_jinja
    return templating_jinja.evaluate(expr, ctx)


def check_expression(expr: str) -> str | None:
    from eaglebot.engine import templating_jinja
    return templating_jinja.check_expression(expr)


def unresolved(name: str, reason: str, missing: tuple[str, str | None] | None = None) -> Any:
    """A var whose template could not be rendered: using it fails with the reason. `missing`:
    (the variable nobody set that it needs, the input that would give it)."""
    from eaglebot.engine import templating_jinja
    return templating_jinja.unresolved(name, reason, missing)


def is_unresolved(v: Any) -> bool:
    if _SANDBOX not in sys.modules:   # (none exists before the sandbox loads)
        return False
    from eaglebot.engine import templating_jinja
    return templating_jinja.is_unresolved(v)


def unresolved_reason(v: Any) -> tuple[str, tuple[str, str | None] | None]:
    """An unresolved var's reason, and what is missing for it (see `unresolved`)."""
    from eaglebot.engine import templating_jinja
    return templating_jinja.unresolved_reason(v)
