"""A playbook's inputs: their declaration (`inputs:` in the YAML) and how a value given on the
command line, in Slack or in a schedule becomes the declared type (`-e spec_steps=5`,
`aux_layers=2,30,58`), checked against its bounds and choices."""
from __future__ import annotations

import json
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from eaglebot.engine import limits
from eaglebot.errors import UsageError

InputType = Literal["int", "float", "bool", "str", "list[int]", "list[float]", "list[str]", "dict"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class InputSpec(_Model):
    type: InputType = "str"
    default: Any = None
    required: bool | None = None
    min: float | None = None
    max: float | None = None
    choices: list[Any] | None = None
    description: str = ""

    @property
    def is_required(self) -> bool:
        return self.required if self.required is not None else self.default is None



_TRUE = {"true", "yes", "on", "1", "y"}
_FALSE = {"false", "no", "off", "0", "n"}


def _scalar(kind: str, name: str, raw: Any) -> Any:
    try:
        if kind == "int":
            if isinstance(raw, bool):
                raise ValueError
            if isinstance(raw, float) and raw.is_integer():
                return int(raw)
            if isinstance(raw, int):
                return raw
            return int(str(raw).strip(), 10)
        if kind == "float":
            if isinstance(raw, bool):
                raise ValueError
            return float(raw) if isinstance(raw, (int, float)) else float(str(raw).strip())
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            s = str(raw).strip().lower()
            if s in _TRUE:
                return True
            if s in _FALSE:
                return False
            raise ValueError
        return raw if isinstance(raw, str) else str(raw)
    except (ValueError, TypeError):
        article = "an" if kind == "int" else "a"
        raise UsageError(f"input {name}: {raw!r} is not {article} {kind}") from None


def coerce_input(name: str, spec: InputSpec, raw: Any) -> Any:
    """Type a raw value (a CLI/Slack string or a YAML value) by the input's spec."""
    kind = spec.type
    try:
        limits.check_text(raw)
        if isinstance(raw, str):
            limits.check_size(raw)
        else:
            limits.check_depth(raw)
    except limits.LimitError as e:
        raise UsageError(f"input {name}: {e}") from None
    if kind == "dict":
        value = raw
        if isinstance(raw, str):
            try:
                try:
                    value = limits.load_user_json(raw)
                except json.JSONDecodeError:
                    try:
                        value = limits.load_user_yaml(raw)
                    except yaml.YAMLError:
                        value = None
            except limits.LimitError as e:
                raise UsageError(f"input {name}: {e}") from None
        if not isinstance(value, dict):
            raise UsageError(f"input {name}: expected a JSON object like '{{\"KEY\": \"value\"}}'")
    elif kind.startswith("list["):
        inner = kind[5:-1]
        items = raw
        if isinstance(raw, str):
            s = raw.strip()
            if s.startswith("["):
                try:
                    items = limits.load_user_yaml(s)
                except limits.LimitError as e:
                    raise UsageError(f"input {name}: {e}") from None
                except yaml.YAMLError:
                    raise UsageError(f"input {name}: {raw!r} is not a list") from None
            else:
                items = [x.strip() for x in s.split(",")] if s else []
        if not isinstance(items, list):
            items = [items]
        value = [_scalar(inner, name, x) for x in items]
    else:
        value = _scalar(kind, name, raw)
    try:
        # Again on the typed value: a JSON or YAML escape ("\u0000", "\0") makes a NUL only now.
        limits.check_text(value)
    except limits.LimitError as e:
        raise UsageError(f"input {name}: {e}") from None
    _check_bounds(name, spec, value)
    return value


def _check_bounds(name: str, spec: InputSpec, value: Any) -> None:
    values = value if isinstance(value, list) else [value]
    for v in values:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if spec.min is not None and v < spec.min:
                raise UsageError(f"input {name}: {v} is below the minimum {spec.min:g}")
            if spec.max is not None and v > spec.max:
                raise UsageError(f"input {name}: {v} is above the maximum {spec.max:g}")
        if spec.choices is not None and v not in spec.choices:
            raise UsageError(f"input {name}: {v!r} is not one of {', '.join(map(str, spec.choices))}")
