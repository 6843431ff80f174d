"""The skill registry: shipped skills, entry-point plugins and `skill_paths`, by YAML name.

A `SkillRegistry` is built once from the settings (`SkillRegistry.from_settings`) by the
composition root and passed down; nothing here holds mutable module state. Only the
shipped skills, which cannot change while the process runs, are cached (`shipped()`); each
shipped module is imported the first time its skill is asked for (a listing, a lint or a
run of the playbooks that use it), not when the registry is built.
Every entry is an `eaglebot.sdk.Skill`: mypy checks the shipped ones (`engine.shipped`),
`_checked` checks a plugin's NAME, Params, run and READ_ONLY when it is loaded.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

from eaglebot.config import Settings
from eaglebot.entry_points import entry_points
from eaglebot.errors import UsageError
from eaglebot.sdk import AnySkill, Skill, SkillParams

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

ENTRY_POINT_GROUP = "eaglebot.skills"


class SkillNotFound(KeyError):
    pass


class _Entry:
    """A skill and where it came from (`source`: for error messages and `eagle skills`). A
    shipped one is named by its module and imported on first use (`skill`, `read_only`)."""

    def __init__(self, source: str, skill: AnySkill | None = None, read_only: bool = False,
                 module: str | None = None):
        self.source = source
        self.module = module
        self._skill = skill
        self._read_only = read_only

    @property
    def skill(self) -> AnySkill:
        return self._skill if self._skill is not None else self._load()

    @property
    def read_only(self) -> bool:
        """READ_ONLY = True: changes nothing on the host, takes no host lock."""
        if self._skill is None:
            self._load()   # a shipped skill's flag is read when its module loads
        return self._read_only

    def _load(self) -> AnySkill:
        assert self.module is not None
        mod = importlib.import_module(self.module)
        if not isinstance(mod, Skill):  # (a shipped module always is: mypy checks engine.shipped)
            raise TypeError(f"{self.module} is not a skill")
        self._read_only = _read_only(mod, str(getattr(mod, "NAME", self.module)))
        self._skill = mod
        return mod

    def source_file(self) -> str | None:
        """The skill's source file, without importing a shipped module that is not loaded yet."""
        if self._skill is None and self.module is not None:
            spec = importlib.util.find_spec(self.module)
            return spec.origin if spec is not None else None
        try:
            return inspect.getsourcefile(self.skill)  # type: ignore[arg-type]
        except TypeError:
            return None


class SkillRegistry(Mapping[str, AnySkill]):
    """Skills by YAML name (a read-only mapping), each remembering where it came from."""

    def __init__(self, entries: Mapping[str, _Entry]):
        self._entries = dict(sorted(entries.items()))

    # -- building ------------------------------------------------------------------------
    @classmethod
    def from_settings(cls, settings: Settings) -> "SkillRegistry":
        """Shipped skills, then entry-point plugins, then `skill_paths`; a clash is a UsageError."""
        entries = dict(shipped()._entries)
        for ep in sorted(entry_points(ENTRY_POINT_GROUP), key=lambda e: e.name):
            _add(entries, _load_entry_point(ep))
        for folder in settings.skill_paths:
            d = settings.path(folder)
            if not d.is_dir():
                raise UsageError(f"skill_paths: folder {d} does not exist")
            for f in sorted(d.glob("*.py")):
                if f.name.startswith("_"):
                    continue
                found = _load_file(f)
                if found is not None:
                    _add(entries, found)
        return cls(entries)

    # -- lookup --------------------------------------------------------------------------
    # A registry is built once and never changes: it hashes and compares by identity, so a
    # cache of playbooks validated against it can key on it (Mapping's item-wise __eq__ would
    # make it unhashable).
    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __getitem__(self, name: str) -> AnySkill:
        return self._entries[name].skill

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def get_skill(self, name: str) -> AnySkill:
        if name not in self._entries:
            raise SkillNotFound(name)
        return self._entries[name].skill

    def source(self, name: str) -> str:
        return self._entries[name].source

    def source_file(self, name: str) -> str | None:
        """The file the skill's module was (or will be) loaded from; None where it has none."""
        return self._entries[name].source_file()

    def read_only(self, name: str) -> bool:
        """Does the skill say `READ_ONLY = True` (it changes nothing on the host)?"""
        if name not in self._entries:
            raise SkillNotFound(name)
        return self._entries[name].read_only

    def summary(self, name: str) -> str:
        """The first line of a skill's docstring."""
        doc = (self.get_skill(name).__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def describe(self, name: str) -> str:
        """Help text of a skill: first docstring line and each parameter."""
        mod = self.get_skill(name)
        from eaglebot.engine.params_doc import params_doc

        lines = [f"{name}: {self.summary(name)}"]
        lines += [f"  {p.line()}" for p in params_doc(mod.Params)]
        return "\n".join(lines)


@functools.cache
def shipped() -> SkillRegistry:
    """The skills shipped in `eaglebot.skills` (no plugins), loaded once per process."""
    from eaglebot.engine.shipped import PACKAGE, SHIPPED

    return SkillRegistry({name: _Entry(f"{PACKAGE}.{mod}", module=f"{PACKAGE}.{mod}")
                          for name, mod in SHIPPED.items()})


# -- loading plugins ------------------------------------------------------------------------

def _add(entries: dict[str, _Entry], found: tuple[str, _Entry]) -> None:
    name, entry = found
    if name in entries:
        raise UsageError(f"skill {name!r} is defined twice, by {entries[name].source} and by {entry.source}: "
                         f"rename one of them")
    entries[name] = entry


def _load_entry_point(ep: EntryPoint) -> tuple[str, _Entry]:
    dist = f" of {ep.dist.name}" if ep.dist is not None else ""
    source = f"entry point {ep.name} = {ep.value}{dist}"
    try:
        mod = ep.load()
    except Exception as e:  # any import-time failure of someone else's code: one sentence
        raise UsageError(f"skill plugin {source} failed to import: {type(e).__name__}: {e}") from None
    if not isinstance(mod, ModuleType):
        raise UsageError(f"skill plugin {source} must name a module, not {type(mod).__name__}")
    return _checked(mod, source, require_name=True)


def _load_file(path: Path) -> tuple[str, _Entry] | None:
    """A skill from a file in skill_paths; None for a file that defines no NAME (a helper)."""
    source = str(path)
    # A private, path-derived name: two folders may hold files with the same stem.
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    mod_name = f"_eaglebot_skill_{digest}_{path.stem}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"skill plugin {source} cannot be loaded as a Python module")
    mod = importlib.util.module_from_spec(spec)
    # Registered before running it, as import does: pydantic resolves the Params
    # annotations through sys.modules[Params.__module__].
    sys.modules[mod_name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # any import-time failure of someone else's code: one sentence
        sys.modules.pop(mod_name, None)
        line = _line_in(e, path)
        raise UsageError(f"skill plugin {source}{line} failed to import: {type(e).__name__}: {e}") from None
    if getattr(mod, "NAME", None) is None:
        return None
    return _checked(mod, source, require_name=False)


def _line_in(err: BaseException, path: Path) -> str:
    if isinstance(err, SyntaxError) and err.lineno:
        return f":{err.lineno}"
    tb = err.__traceback__
    line = None
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename) == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f":{line}" if line else ""


def _checked(mod: ModuleType, source: str, *, require_name: bool) -> tuple[str, _Entry]:
    """A plugin module held to the `Skill` protocol at load: one sentence for what is wrong."""
    name = getattr(mod, "NAME", None)
    if require_name and name is None:
        raise UsageError(f"skill plugin {source} defines no NAME (the skill's name in playbooks)")
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"skill plugin {source}: NAME must be a non-empty string, not {name!r}")
    params = getattr(mod, "Params", None)
    if not (inspect.isclass(params) and issubclass(params, SkillParams)):
        raise UsageError(f"skill plugin {source} ({name}) needs a class Params that subclasses "
                         f"eaglebot.sdk.SkillParams")
    run = getattr(mod, "run", None)
    if not inspect.iscoroutinefunction(run) or not _takes_two(run):
        raise UsageError(f"skill plugin {source} ({name}) needs `async def run(ctx, params) -> StepResult`")
    if not isinstance(mod, Skill):  # (true after the checks above: it tells mypy so)
        raise UsageError(f"skill plugin {source} ({name}) is not a skill")
    return name, _Entry(source, mod, _read_only(mod, f"skill plugin {source} ({name})"))


def _takes_two(fn: Callable[..., object]) -> bool:
    """Can `fn` be called as `fn(ctx, params)`?"""
    try:
        inspect.signature(fn).bind(None, None)
    except (TypeError, ValueError):
        return False
    return True


def _read_only(skill: object, what: str) -> bool:
    flag = getattr(skill, "READ_ONLY", False)
    if not isinstance(flag, bool):
        raise UsageError(f"{what}: READ_ONLY must be True or False, not {flag!r}")
    return flag
