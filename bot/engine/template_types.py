"""What the engine's two templating modules share (templating.py renders plain substitutions,
templating_jinja.py everything else): the names callers catch and compare."""
from __future__ import annotations

from typing import Any

MAX_RENDER_CHARS = 1024 * 1024


class Raw(str):
    """A string the shell quoting leaves alone (`{{ x | raw }}`)."""


class TemplateFailure(ValueError):
    pass


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)
