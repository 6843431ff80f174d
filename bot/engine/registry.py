"""The skill registry: shipped skills, entry-point plugins and `skill_paths`, by YAML name."""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


class SkillNotFound(KeyError):
    pass


_REGISTRY: dict[str, ModuleType] | None = None


def skills() -> dict[str, ModuleType]:
    """All skill modules by their YAML name, loaded once."""
    global _REGISTRY
    if _REGISTRY is None:
        from eaglebot import skills as pkg

        found: dict[str, ModuleType] = {}
        for info in pkgutil.iter_modules(pkg.__path__):
            if info.name.startswith("_"):
                continue
            mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
            name = getattr(mod, "NAME", None)
            if name and hasattr(mod, "Params") and hasattr(mod, "run"):
                found[name] = mod
        _REGISTRY = dict(sorted(found.items()))
    return _REGISTRY


def get_skill(name: str) -> ModuleType:
    reg = skills()
    if name not in reg:
        raise SkillNotFound(name)
    return reg[name]


def describe(name: str) -> str:
    """Help text of a skill: first docstring line and each parameter."""
    mod = get_skill(name)
    doc = (mod.__doc__ or "").strip()
    lines = [f"{name}: {doc.splitlines()[0] if doc else ''}"]
    for fname, f in mod.Params.model_fields.items():
        req = "required" if f.is_required() else f"default {f.default!r}"
        lines.append(f"  {fname} ({req}): {f.description or ''}")
    return "\n".join(lines)
