"""A skill's parameters as people read them: name, type, default, allowed values.

The pydantic `Params` model is the one description of a skill (STYLE.md); this renders its
fields for `eagle skills`, `/eagle help SKILL` and `eagle chat 'help SKILL'`. A default made
by a factory is shown as its value, a required field as "required" (never PydanticUndefined).
"""
from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "min length"),
           ("max_length", "max length"))


@dataclass(frozen=True)
class ParamDoc:
    name: str
    type: str
    default: str          # "required" when there is none
    allowed: str          # "" when anything of the type goes
    description: str

    def line(self) -> str:
        allowed = f"; allowed: {self.allowed}" if self.allowed else ""
        return f"{self.name} ({self.type}, {self.default}{allowed}): {self.description}"


def type_name(ann: Any) -> str:
    origin = typing.get_origin(ann)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(ann))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        return " | ".join(type_name(a) for a in args)
    if origin is typing.Annotated:
        return type_name(typing.get_args(ann)[0])
    if origin is not None:
        params = typing.get_args(ann)
        inner = ", ".join(type_name(a) for a in params)
        base = getattr(origin, "__name__", str(origin))
        return f"{base}[{inner}]" if params else base
    if ann is Any:
        return "any"
    return getattr(ann, "__name__", str(ann))


def _default(f: FieldInfo) -> str:
    if f.is_required():
        return "required"
    if f.default_factory is not None:
        value = f.default_factory()  # type: ignore[call-arg]  # pydantic's factories take no argument here
    elif f.default is PydanticUndefined:
        return "required"
    else:
        value = f.default
    return "default: none" if value is None else f"default: {value!r}"


def _allowed(f: FieldInfo) -> str:
    parts: list[str] = []
    if typing.get_origin(f.annotation) is Literal:
        parts.append(", ".join(repr(a) for a in typing.get_args(f.annotation)))
    for meta in f.metadata:
        for attr, word in _BOUNDS:
            v = getattr(meta, attr, None)
            if v is not None:
                parts.append(f"{word} {v}")
    return ", ".join(parts)


def params_doc(model: type[BaseModel]) -> list[ParamDoc]:
    """The fields of a skill's `Params` (or of any settings model: docs/reference.md renders
    eagle.yaml's keys with it), in declaration order."""
    out = []
    for name, f in model.model_fields.items():
        kind = "choice" if typing.get_origin(f.annotation) is Literal else type_name(f.annotation)
        out.append(ParamDoc(name, kind, _default(f), _allowed(f), f.description or ""))
    return out
