"""Sandboxed Jinja2 templating for step parameters.

- StrictUndefined: a misspelt variable fails the step, never renders as "".
- A value that is exactly one `{{ expr }}` keeps its native type (a list stays a list).
- Shell strings (fields marked `shell=True`) quote every `{{ }}` as one shell word
  unless the template says `| raw`.
- A rendering budget (the sandbox blocks escapes, not cost).

Every template goes through Jinja: an earlier fast path rendered plain `{{ name }}`
substitutions without it, a second renderer held to the first by a corpus; the headline
`relaunch` loads Jinja anyway (a third of its templates use a filter), so it bought a hello run
and cost a parallel implementation (issue 45).
"""
from __future__ import annotations

import contextvars
import functools
import json
import math
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError, Undefined, UndefinedError, meta
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["MAX_RENDER_CHARS", "Raw", "TemplateFailure", "check_expression", "check_syntax", "contains_template",
           "evaluate", "is_template", "is_unresolved", "names_used", "render_value", "unresolved",
           "unresolved_reason"]

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

_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>.*?)\}\}\s*$", re.S)


def _to_json(v: Any) -> str:
    return json.dumps(v)


def _shell_finalize(v: Any) -> str:
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, (list, tuple)):
        return shlex.join(str(x) for x in v)
    return shlex.quote(str(v))


# Rendering budget (the sandbox blocks escapes, not cost): a string or list a template builds
# stays under MAX_RENDER_CHARS, `**` under MAX_POW_BITS bits, and all `range()`s of one
# render together yield at most MAX_RANGE_ITEMS items (nested ranges multiply).
MAX_POW_BITS = 4096
MAX_RANGE_ITEMS = 100_000
_range_left: contextvars.ContextVar[int] = contextvars.ContextVar("range_left", default=MAX_RANGE_ITEMS)


def _size(v: Any) -> int | None:
    return len(v) if isinstance(v, (str, list, tuple)) else None


class _BudgetEnv(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(left, (int, float)) and isinstance(right, (int, float)):
            if abs(left) > 1 and right > 0 and right * math.log2(abs(left)) > MAX_POW_BITS:
                raise SecurityError(f"{left!r} ** {right!r} is too large to compute")
        elif operator == "*":
            for seq, n in ((left, right), (right, left)):
                size = _size(seq)
                if size is not None and isinstance(n, int) and size * n > MAX_RENDER_CHARS:
                    raise SecurityError(f"the result would exceed {MAX_RENDER_CHARS:,} characters")
        elif operator == "+":
            a, b = _size(left), _size(right)
            if a is not None and b is not None and a + b > MAX_RENDER_CHARS:
                raise SecurityError(f"the result would exceed {MAX_RENDER_CHARS:,} characters")
        return super().call_binop(context, operator, left, right)


def _budget_range(*args: int) -> range:
    r = range(*args)
    left = _range_left.get() - len(r)
    if left < 0:
        raise SecurityError(f"range() would yield more than {MAX_RANGE_ITEMS:,} items in one template")
    _range_left.set(left)
    return r


def _make_env(shell: bool = False) -> ImmutableSandboxedEnvironment:
    env = _BudgetEnv(
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        finalize=_shell_finalize if shell else None,
    )
    env.globals["range"] = _budget_range
    env.filters["raw"] = lambda v: Raw(v)
    env.filters["to_json"] = _to_json
    env.filters["shell_quote"] = lambda v: shlex.quote(str(v))
    return env


_ENV = _make_env()
_SHELL_ENV = _make_env(shell=True)


# Compiled once per source: a run over a thousand hosts renders the same few templates for
# each (compiling is ~0.2 ms a template; a compiled one is reused, as Environment.get_template does).
@functools.lru_cache(maxsize=2048)
def _template(source: str, shell: bool) -> Template:
    return (_SHELL_ENV if shell else _ENV).from_string(source)


@functools.lru_cache(maxsize=2048)
def _expression(expr: str) -> Callable[..., Any]:
    return _ENV.compile_expression(expr, undefined_to_none=False)


def template_names(source: str) -> set[str]:
    """The variables one template reads (none when it does not parse: syntax_error says why)."""
    try:
        return set(meta.find_undeclared_variables(_ENV.parse(source)))
    except TemplateError:
        return set()


class _Unresolved(StrictUndefined):
    """A var whose template could not be rendered: using it fails with the reason."""

    __slots__ = ("missing",)
    missing: tuple[str, str | None] | None


def unresolved(name: str, reason: str, missing: tuple[str, str | None] | None = None) -> Any:
    """`missing`: (the variable nobody set that it needs, the input that would give it)."""
    u = _Unresolved(hint=reason, name=name)
    u.missing = missing
    return u


def is_unresolved(v: Any) -> bool:
    return isinstance(v, _Unresolved)


def unresolved_reason(v: Any) -> tuple[str, tuple[str, str | None] | None]:
    """An unresolved var's reason, and what is missing for it (see `unresolved`)."""
    return str(v._undefined_hint), v.missing


def render_value(value: Any, ctx: Mapping[str, Any], *, shell: bool = False) -> Any:
    """Render strings inside `value` (recursively), keeping native types; one rendering budget
    for all of it, and a result of at most MAX_RENDER_CHARS."""
    token = _range_left.set(MAX_RANGE_ITEMS)
    try:
        out = _render(value, ctx, shell)
    finally:
        _range_left.reset(token)
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
            out |= template_names(v)
    return out


def check_syntax(value: Any) -> str | None:
    """Return an error message if any template in `value` does not parse."""
    if isinstance(value, Mapping):
        return next((err for v in value.values() if (err := check_syntax(v))), None)
    if isinstance(value, list):
        return next((err for v in value if (err := check_syntax(v))), None)
    return syntax_error(value) if is_template(value) else None


def _render(value: Any, ctx: Mapping[str, Any], shell: bool) -> Any:
    try:
        if isinstance(value, Mapping):
            return {k: _render(v, ctx, shell) for k, v in value.items()}
        if isinstance(value, list):
            return [_render(v, ctx, shell) for v in value]
        if not is_template(value):
            return value
        if not shell:
            m = _SINGLE_EXPR.match(value)
            if m and "{{" not in m.group("expr") and "}}" not in m.group("expr"):
                out = _expression(m.group("expr"))(**ctx)
                if isinstance(out, Undefined):
                    out._fail_with_undefined_error()
                return out
        return _template(value, shell).render(**ctx)
    except UndefinedError as e:
        if e.message and e.message.startswith("host var `"):
            raise TemplateFailure(e.message) from None
        raise TemplateFailure(f"undefined variable in {value!r}: {e.message}") from None
    except TemplateError as e:
        raise TemplateFailure(f"template error in {value!r}: {e}") from None
    except (MemoryError, OverflowError, RecursionError) as e:
        raise TemplateFailure(f"template {value!r} is too expensive to render ({type(e).__name__})") from None


def evaluate(expr: str, ctx: Mapping[str, Any]) -> Any:
    """A bare expression as in Ansible's `when:`."""
    try:
        return _expression(expr)(**ctx)
    except UndefinedError as e:
        raise TemplateFailure(f"undefined variable in when {expr!r}: {e.message}") from None
    except TemplateError as e:
        raise TemplateFailure(f"invalid when expression {expr!r}: {e}") from None


def syntax_error(source: str) -> str | None:
    """Why one template does not parse, or None."""
    try:
        _ENV.parse(source)
    except TemplateError as e:
        return f"template syntax error: {e}"
    return None


def check_expression(expr: str) -> str | None:
    try:
        _ENV.compile_expression(expr)
    except TemplateError as e:
        return f"invalid expression: {e}"
    return None
