"""The generated sections of docs/reference.md and docs/configuration.md (cog:
`cog -r -I scripts docs/reference.md docs/configuration.md`; `cog --check` in scripts/check-arch.sh
fails when a page and the code disagree).

Each table is read from the one place the product declares it: the CLI from the argparse
parser, eagle.yaml's keys from the pydantic settings models, each skill's parameters from its
`Params`, each shipped playbook's inputs from its YAML. Nothing here is written by hand.
"""
from __future__ import annotations

import argparse
import typing
from collections.abc import Iterator

from pydantic import BaseModel

from eaglebot.config import Settings
from eaglebot.engine.params_doc import params_doc
from eaglebot.engine.playbook import load_playbook, playbook_files
from eaglebot.engine.registry import shipped
from eaglebot.frontends.cli.main import build_parser


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _subparsers(p: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """A parser's sub-commands, each with the one-line help its parent lists it with."""
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {c.dest: c.help or "" for c in a._choices_actions}
            return {name: (sp, helps.get(name, "")) for name, sp in a.choices.items()}
    return {}


def _commands(p: argparse.ArgumentParser, prefix: str) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    for name, (sp, line) in sorted(_subparsers(p).items()):
        yield f"{prefix} {name}", sp, line
        yield from _commands(sp, f"{prefix} {name}")


def _option_rows(p: argparse.ArgumentParser) -> list[str]:
    rows = []
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) or a.help == argparse.SUPPRESS:
            continue
        if "--config" in a.option_strings:     # every command's: stated once, above the list
            continue
        if a.option_strings:
            flag = ", ".join(f"`{o}`" for o in a.option_strings)
            if a.nargs != 0:
                flag += f" `{a.metavar or a.dest.upper()}`"
        else:
            flag = f"`{a.metavar or a.dest}`"
        choices = f" (one of {', '.join(map(str, a.choices))})" if a.choices else ""
        rows.append(f"| {_cell(flag)} | {_cell((a.help or '') + choices)} |")
    return rows


def cli() -> str:
    """Every `eagle` command (and sub-command) with its options, as `--help` shows them."""
    parser = build_parser()
    config = next(a for a in parser._actions if "--config" in a.option_strings)
    out = [f"Every command takes `--config FILE`: {_cell(config.help or '')}.\n"]
    for name, sp, line in _commands(parser, "eagle"):
        out.append(f"### `{name}`\n")
        desc = sp.description or line
        if desc:
            out.append(_cell(desc) + "\n")
        rows = _option_rows(sp)
        if rows:
            out += ["| argument | meaning |", "|---|---|", *rows]
        out.append("")
    return "\n".join(out)


def _models(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, type[BaseModel]]]:
    yield prefix, model
    for name, f in model.model_fields.items():
        if f.exclude:
            continue
        found = [(arg, inner) for arg in (f.annotation, *typing.get_args(f.annotation))
                 for inner in (arg, *typing.get_args(arg))
                 if isinstance(inner, type) and issubclass(inner, BaseModel)]
        if found:       # the outermost shape names the key: a dict of them, a list of them, or one
            arg, inner = found[0]
            key = f"{prefix}.{name}" if prefix else name
            shape = typing.get_origin(arg)
            key += ".NAME" if shape is dict else "[]" if shape is list else ""
            yield from _models(inner, key)


def _section(ann: object) -> bool:
    """Whether a field's value is a settings model of its own (a section of the page)."""
    return any(isinstance(t, type) and issubclass(t, BaseModel)
               for arg in (ann, *typing.get_args(ann)) for t in (arg, *typing.get_args(arg)))


def _fields_table(what: str, model: type[BaseModel]) -> list[str]:
    """A model's fields as a table: name, type, default, allowed values, meaning (a field that is a
    settings section of its own says so for its default)."""
    rows = [f"| {what} | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for d in params_doc(model):
        if model.model_fields[d.name].exclude:
            continue
        default = d.default.removeprefix("default: ")
        if _section(model.model_fields[d.name].annotation):
            default = "its section below" if default != "none" else "none (its section below)"
        rows.append(f"| `{d.name}` | {_cell(d.type)} | {_cell(default)} | {_cell(d.allowed)} | {_cell(d.description)} |")
    return rows


def config() -> str:
    """eagle.yaml's keys, section by section, from the settings models."""
    out: list[str] = []
    seen: set[str] = set()
    for key, model in _models(Settings, ""):
        if key in seen:
            continue
        seen.add(key)
        out.append(f"### `{key}`\n" if key else "### Top level\n")
        doc = model.__dict__.get("__doc__")
        if doc:
            out.append(_cell(doc) + "\n")
        out += [*_fields_table("key", model), ""]
    return "\n".join(out)


def skills() -> str:
    """Every shipped skill's parameters, from its `Params`."""
    out: list[str] = []
    reg = shipped()
    for name in sorted(reg):
        mod = reg[name]
        out.append(f"### `{name}`\n")
        first = (mod.__doc__ or "").strip().split("\n\n")[0]
        out.append(_cell(first) + "\n")
        out += [*_fields_table("parameter", mod.Params), ""]
    return "\n".join(out)


def playbooks() -> str:
    """Every shipped playbook's inputs, from its YAML."""
    out: list[str] = []
    for name, path in sorted(playbook_files(None).items()):
        pb = load_playbook(path)
        out.append(f"### `{name}`\n")
        out.append(_cell(pb.description or "") + "\n")
        if pb.inputs:
            out += ["| input | type | default | meaning |", "|---|---|---|---|"]
            for k, spec in pb.inputs.items():
                default = "required" if spec.is_required else repr(spec.default)
                bounds = [f"{w} {v:g}" for w, v in ((">=", spec.min), ("<=", spec.max)) if v is not None]
                if spec.choices:
                    bounds.append("one of " + ", ".join(map(str, spec.choices)))
                extra = f" ({'; '.join(bounds)})" if bounds else ""
                out.append(f"| `{k}` | {_cell(spec.type)} | {_cell(default)} | {_cell(spec.description + extra)} |")
        out.append("")
    return "\n".join(out)
