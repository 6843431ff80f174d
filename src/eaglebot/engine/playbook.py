"""Playbook schema and YAML loading with `file:line: field: message` errors.

Unknown skills and invalid literal skill parameters are caught here, at load time,
not halfway through a run on a GPU node.
"""
from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails

from eaglebot.engine import limits, rolling, templating, words
from eaglebot.engine.inputs import InputSpec as InputSpec
from eaglebot.engine.inputs import coerce_input as coerce_input
from eaglebot.engine.output import printable
from eaglebot.errors import EagleError, UsageError
from eaglebot.suggest import did_you_mean, keys_at, unknown_key_hint
from eaglebot.engine.registry import SkillNotFound, SkillRegistry, shipped

RESERVED = frozenset(words.NAMES)   # a playbook named like a slash word could never be run from Slack
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Step(_Model):
    name: str | None = None
    skill: str
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    when: str | None = None
    register_: str | None = Field(None, alias="register")
    timeout_s: float | None = Field(None, gt=0)
    retries: int = Field(0, ge=0, le=100)
    retry_delay_s: float = Field(0.0, ge=0)
    continue_on_error: bool = False
    confirm: bool = False

    @field_validator("register_")
    @classmethod
    def _register_ident(cls, v: str | None) -> str | None:
        if v is not None and not _IDENT.match(v):
            raise ValueError("must be a plain identifier (letters, digits, _)")
        return v

    @property
    def label(self) -> str:
        return self.name or self.skill


class Playbook(_Model):
    name: str
    description: str = ""
    examples: list[str] = Field(default_factory=list)
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    vars: dict[str, Any] = Field(default_factory=dict)
    steps: list[Step] = Field(min_length=1)
    always: list[Step] = Field(default_factory=list)
    batch: str | int | None = Field(None, description="default --batch: hosts per batch, N or P%")
    batch_above: int = Field(0, ge=0, description="`batch` applies only to runs of more hosts than this")
    max_fail: str | int | None = Field(None, description="default --max-fail: hosts that may fail, N or P%")
    source: str | None = Field(None, exclude=True)

    @field_validator("batch", "max_fail")
    @classmethod
    def _amount(cls, v: str | int | None, info: ValidationInfo) -> str | None:
        if v is None:
            return None
        try:
            return rolling.check_amount(v, str(info.field_name), zero_ok=info.field_name == "max_fail")
        except UsageError as e:
            raise ValueError(str(e)) from None

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if v in RESERVED:
            raise ValueError(f"{v!r} is a reserved command word ({', '.join(sorted(RESERVED))})")
        if not _NAME.match(v):
            raise ValueError("must be lower-case letters, digits, '.', '_' or '-'")
        return v

    @field_validator("inputs")
    @classmethod
    def _input_names(cls, v: dict[str, InputSpec]) -> dict[str, InputSpec]:
        for k in v:
            if not _IDENT.match(k):
                raise ValueError(f"input name {k!r} must be a plain identifier")
        return v

    def all_steps(self) -> list[tuple[str, int, Step]]:
        return [("steps", i, s) for i, s in enumerate(self.steps)] + [
            ("always", i, s) for i, s in enumerate(self.always)
        ]


# -- YAML with line numbers ------------------------------------------------------

Loc = tuple[str | int, ...]  # a path in the document: ('steps', 3, 'with', 'timeout_s')


def _line_map(text: str) -> dict[Loc, int]:
    """Map each path in the document (('steps', 3, 'with', 'timeout_s')) to its 1-based line."""
    lines: dict[Loc, int] = {}
    try:
        root = yaml.compose(text, Loader=limits.BoundedLoader)
    except (yaml.YAMLError, limits.LimitError):
        return lines

    def walk(node: yaml.Node, path: Loc) -> None:
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = k.value
                lines[path + (key,)] = k.start_mark.line + 1
                if not isinstance(v, yaml.ScalarNode):
                    walk(v, path + (key,))
                    lines[path + (key,)] = k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, path + (i,))

    if root is not None:
        walk(root, ())
    return lines


class _LazyLines(dict[Loc, int]):
    """The line map, built (a second, slower parse) only when an error needs a line number."""

    def __init__(self, text: str):
        super().__init__()
        self._text: str | None = text

    def _fill(self) -> None:
        if self._text is not None:
            text, self._text = self._text, None
            self.update(_line_map(text))

    def __contains__(self, key: object) -> bool:
        self._fill()
        return super().__contains__(key)

    def __getitem__(self, key: Loc) -> int:
        self._fill()
        return super().__getitem__(key)

    def get(self, key: Loc, default: Any = None) -> Any:
        self._fill()
        return super().get(key, default)


# libyaml's loader when PyYAML was built with it (20x faster than the pure-Python one).
SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _line_for(lines: dict[Loc, int], loc: Loc) -> int:
    loc = tuple(loc)
    while loc and loc not in lines:
        loc = loc[:-1]
    return lines.get(loc, 1)


def _fmt_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _pydantic_msg(err: ErrorDetails) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "missing":
        return "field required"
    return err["msg"][0].lower() + err["msg"][1:]


def _clean_loc(loc: Loc) -> Loc:
    # pydantic reports the alias for `with`; union members add noise we drop.
    return tuple(p for p in loc if p not in ("function-after[_name_ok(), str]",))


def read_playbook_text(path: str | Path) -> str:
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read playbook {p}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{p}: the file is not UTF-8 text (byte {e.start})") from None


def load_playbook(path: str | Path, registry: SkillRegistry | None = None) -> Playbook:
    """Read and validate a playbook; `registry` (default: the shipped skills) knows its skills."""
    return parse_playbook(read_playbook_text(path), str(Path(path)), registry)


class _Problems(list[str]):
    """A playbook file's errors: the first raised at once (a run), or every one collected (lint)."""

    def __init__(self, every: bool):
        super().__init__()
        self.every = every

    def add(self, msg: str) -> None:
        if not self.every:
            raise UsageError(msg)
        self.append(msg)


def parse_playbook(text: str, source: str, registry: SkillRegistry | None = None) -> Playbook:
    pb = _parse(text, source, registry, _Problems(every=False))
    assert pb is not None   # with every=False, a problem has raised
    return pb


def lint_playbook(text: str, source: str, registry: SkillRegistry | None = None) -> tuple[Playbook | None, list[str]]:
    """Every error of a playbook file (`eagle lint`), each `FILE:LINE: where: what` with its
    suggestion; the playbook when there is none."""
    problems = _Problems(every=True)
    try:
        pb = _parse(text, source, registry, problems)
    except UsageError as e:   # the file cannot be read as a playbook at all (YAML, limits)
        return None, [str(e)]
    return (pb if not problems else None), list(problems)


def _parse(text: str, source: str, registry: SkillRegistry | None, problems: _Problems) -> Playbook | None:
    try:
        data = limits.load_playbook_yaml(text)
    except limits.LimitError as e:
        raise UsageError(f"{source}:1: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise UsageError(f"{source}:{line}: invalid YAML: {getattr(e, 'problem', None) or e}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{source}:1: a playbook must be a mapping with name and steps")
    lines = _LazyLines(text)
    registry = shipped() if registry is None else registry
    try:
        pb = Playbook.model_validate(data)
    except ValidationError as e:
        # an unknown key is usually a typo of a missing one (`skil:`): reported first, with its suggestion
        for err in sorted(e.errors(), key=lambda er: er["type"] != "extra_forbidden"):
            loc = _clean_loc(err["loc"])
            msg = _pydantic_msg(err)
            if err["type"] == "extra_forbidden" and loc:
                msg += unknown_key_hint(str(loc[-1]), keys_at(Playbook, loc[:-1]))
            problems.add(f"{source}:{_line_for(lines, loc)}: {_fmt_loc(loc)}: {msg}")
        # the steps that are steps still get their skill's checks (lint reports those too)
        for section in ("steps", "always"):
            raw = data.get(section)
            for i, one in enumerate(raw if isinstance(raw, list) else []):
                try:
                    step = Step.model_validate(one)
                except ValidationError:
                    continue
                _check_step(section, i, step, lines, source, registry, problems)
        return None
    pb.source = source
    _check_inputs(pb, lines, source, problems)
    for section, i, step in pb.all_steps():
        _check_step(section, i, step, lines, source, registry, problems)
    return pb


def _check_inputs(pb: Playbook, lines: dict[Loc, int], source: str, problems: _Problems) -> None:
    for name, spec in pb.inputs.items():
        if spec.default is not None and not templating.is_template(spec.default):
            try:
                coerce_input(name, spec, spec.default)
            except UsageError as e:
                loc = ("inputs", name, "default")
                problems.add(f"{source}:{_line_for(lines, loc)}: {_fmt_loc(loc)}: {e}")


_STEP_KEYS = frozenset(f.alias or k for k, f in Step.model_fields.items())


def _check_step(section: str, i: int, step: Step, lines: dict[Loc, int], source: str, registry: SkillRegistry,
                problems: _Problems) -> None:
    def fail(loc: Loc, msg: str) -> None:
        full = (section, i) + loc
        problems.add(f"{source}:{_line_for(lines, full)}: {_fmt_loc(full)}: {msg}")

    try:
        mod = registry.get_skill(step.skill)
    except SkillNotFound:
        hint = did_you_mean(step.skill, registry)
        fail(("skill",), f"unknown skill {step.skill!r}; {hint}" if hint else
             f"unknown skill {step.skill!r} (known: {', '.join(registry)})")
        return
    if step.when is not None and (err := templating.check_expression(step.when)):
        fail(("when",), err)
    if err := templating.check_syntax(step.with_):
        fail(("with",), err)
        return
    # Validate what is literal now; templated values are validated after rendering.
    literal = {k: v for k, v in step.with_.items() if not templating.contains_template(v)}
    templated = set(step.with_) - set(literal)
    try:
        mod.Params.model_validate(literal)
    except ValidationError as e:
        # An unknown key is usually a typo of a missing one: report it first.
        errors = sorted(e.errors(), key=lambda er: er["type"] != "extra_forbidden")
        for detail in errors:
            if detail["type"] == "missing" and detail["loc"] and detail["loc"][0] in templated:
                continue
            if not detail["loc"] and templated:
                continue  # a whole-model rule: the templated fields are checked after rendering
            msg = _pydantic_msg(detail)
            if detail["type"] == "extra_forbidden" and len(detail["loc"]) == 1:
                key = str(detail["loc"][0])
                if key in _STEP_KEYS and key not in mod.Params.model_fields:
                    msg += f" ({key} is a step keyword: put it beside `skill:`, not under `with:`)"
                else:
                    msg += unknown_key_hint(key, mod.Params.model_fields)
            fail(("with",) + tuple(detail["loc"]), msg)


# -- inputs ------------------------------------------------------------------------

def resolve_inputs(pb: Playbook, given: dict[str, Any]) -> dict[str, Any]:
    """Typed user inputs; unknown names and missing required inputs are usage errors."""
    out: dict[str, Any] = {}
    total = sum(len(str(k)) + len(json.dumps(v, default=str)) for k, v in given.items())
    if total > limits.MAX_REQUEST_BYTES:
        raise UsageError(f"the inputs are {total:,} bytes together; the limit is "
                         f"{limits.MAX_REQUEST_BYTES // 1024} KiB")
    for k, raw in given.items():
        if not isinstance(k, str) or not _IDENT.match(k) or len(k) > 64:
            shown = printable(str(k))[:64]
            raise UsageError(f"input '{shown}': input names of playbook {pb.name!r} are plain identifiers "
                             f"(letters, digits, _)")
        if k not in pb.inputs:
            hint = did_you_mean(k, pb.inputs)
            known = ", ".join(pb.inputs) or "none"
            raise UsageError(f"playbook {pb.name!r} has no input {k!r}; {hint}" if hint else
                             f"playbook {pb.name!r} has no input {k!r} (inputs: {known})")
        out[k] = coerce_input(k, pb.inputs[k], raw)
    for k, spec in pb.inputs.items():
        if k not in out and spec.is_required and spec.default is None:
            raise UsageError(f"playbook {pb.name!r} needs input {k!r} ({spec.type}): pass -e {k}=...")
    return out


# -- lookup ------------------------------------------------------------------------

def shipped_dir() -> Path:
    return Path(str(resources.files("eaglebot.playbooks")))


def playbook_files(user_dir: Path | None) -> dict[str, Path]:
    """Name -> file; the user's playbooks_dir shadows the shipped ones."""
    found: dict[str, Path] = {}
    for d in (shipped_dir(), user_dir):
        if d and d.is_dir():
            for f in sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")):
                found[f.stem] = f
    return dict(sorted(found.items()))


def playbook_errors(user_dir: Path | None, registry: SkillRegistry | None = None
                    ) -> tuple[int, list[tuple[Path, EagleError]]]:
    """Every playbook runnable by name, loaded: how many there are, and each invalid one with
    why (its file:line). What a reload and `eagle doctor` check before they trust a config."""
    files = playbook_files(user_dir)
    bad: list[tuple[Path, EagleError]] = []
    for path in files.values():
        try:
            load_playbook(path, registry)
        except EagleError as e:
            bad.append((path, e))
    return len(files), bad


def find_playbook(ref: str, user_dir: Path | None, registry: SkillRegistry | None = None) -> Playbook:
    p = Path(ref)
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        if not p.exists():
            raise UsageError(f"playbook file {ref} does not exist")
        return load_playbook(p, registry)
    files = playbook_files(user_dir)
    if ref not in files:
        raise UsageError(unknown_playbook(ref, files, user_dir))
    return load_playbook(files[ref], registry)


def unknown_playbook(ref: str, files: Mapping[str, Path], user_dir: Path | None, *, by_path: bool = True) -> str:
    """The one sentence for a playbook name nobody has (the CLI's and Slack's alike); `by_path`:
    the front end also runs a playbook file by its path (the CLI)."""
    hint = did_you_mean(ref, files)
    shown = printable(ref)[:64]
    if hint:
        return f"unknown playbook {shown!r}; {hint}"
    where = f"playbooks_dir ({user_dir}) and the shipped ones" if user_dir else \
        "the shipped ones (no playbooks_dir in eagle.yaml)"
    return (f"unknown playbook {shown!r} (known: {', '.join(files) or 'none'}; names come from "
            f"{where}{'; a file runs by its path' if by_path else ''})")
