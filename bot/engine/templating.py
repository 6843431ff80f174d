"""Sandboxed Jinja2 templating for step parameters.

- StrictUndefined: a misspelt variable fails the step, never renders as "".
- A value that is exactly one `{{ expr }}` keeps its native type (a list stays a list).
- Shell strings (fields marked `shell=True`) quote every `{{ }}` as one shell word
  unless the template says `| raw`.
"""
from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

from jinja2 import StrictUndefined, TemplateError, Undefined, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment

_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>.*?)\}\}\s*$", re.S)


class Raw(str):
    """A string the shell quoting leaves alone (`{{ x | raw }}`)."""


def _to_json(v: Any) -> str:
    return json.dumps(v)


def _shell_finalize(v: Any) -> str:
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, (list, tuple)):
        return shlex.join(str(x) for x in v)
    return shlex.quote(str(v))


def _make_env(shell: bool = False) -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        finalize=_shell_finalize if shell else None,
    )
    env.filters["raw"] = lambda v: Raw(v)
    env.filters["to_json"] = _to_json
    env.filters["shell_quote"] = lambda v: shlex.quote(str(v))
    return env


_ENV = _make_env()
_SHELL_ENV = _make_env(shell=True)


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


def render_value(value: Any, ctx: Mapping[str, Any], *, shell: bool = False) -> Any:
    """Render strings inside `value` (recursively), keeping native types."""
    try:
        if isinstance(value, Mapping):
            return {k: render_value(v, ctx, shell=shell) for k, v in value.items()}
        if isinstance(value, list):
            return [render_value(v, ctx, shell=shell) for v in value]
        if not is_template(value):
            return value
        if not shell:
            m = _SINGLE_EXPR.match(value)
            if m and "{{" not in m.group("expr") and "}}" not in m.group("expr"):
                out = _ENV.compile_expression(m.group("expr"), undefined_to_none=False)(**ctx)
                if isinstance(out, Undefined):
                    out._fail_with_undefined_error()
                return out
        env = _SHELL_ENV if shell else _ENV
        return env.from_string(value).render(**ctx)
    except UndefinedError as e:
        raise TemplateFailure(f"undefined variable in {value!r}: {e.message}") from None
    except TemplateError as e:
        raise TemplateFailure(f"template error in {value!r}: {e}") from None


def evaluate(expr: str, ctx: Mapping[str, Any]) -> Any:
    """A bare expression as in Ansible's `when:`."""
    try:
        return _ENV.compile_expression(expr, undefined_to_none=False)(**ctx)
    except UndefinedError as e:
        raise TemplateFailure(f"undefined variable in when {expr!r}: {e.message}") from None
    except TemplateError as e:
        raise TemplateFailure(f"invalid when expression {expr!r}: {e}") from None


def check_syntax(value: Any) -> str | None:
    """Return an error message if any template in `value` does not parse."""
    if isinstance(value, Mapping):
        for v in value.values():
            if err := check_syntax(v):
                return err
        return None
    if isinstance(value, list):
        for v in value:
            if err := check_syntax(v):
                return err
        return None
    if is_template(value):
        try:
            _ENV.parse(value)
        except TemplateError as e:
            return f"template syntax error: {e}"
    return None


def check_expression(expr: str) -> str | None:
    try:
        _ENV.compile_expression(expr)
    except TemplateError as e:
        return f"invalid expression: {e}"
    return None
