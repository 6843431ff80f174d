"""Everything a user can call is documented and valid (as sqlite-utils' test_docs does)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from eaglebot.frontends.cli.main import build_parser
from eaglebot.engine.playbook import RESERVED, load_playbook, playbook_files
from eaglebot.engine.registry import shipped as skills
from eaglebot.sdk import SkillParams

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _subcommands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(sub.choices)


@pytest.mark.parametrize("cmd", _subcommands())
def test_every_cli_command_is_in_the_readme(cmd):
    assert re.search(rf"\beagle {re.escape(cmd)}\b", README), f"`eagle {cmd}` is not documented in README.md"


@pytest.mark.parametrize("name", sorted(skills()))
def test_every_skill_is_described_once_in_its_params(name):
    mod = skills()[name]
    assert issubclass(mod.Params, SkillParams)
    assert mod.Params.model_config.get("extra") == "forbid"
    doc = mod.__doc__ or ""
    assert doc.strip(), f"{name} has no docstring"
    assert "```yaml" in doc and f"skill: {name}" in doc, f"{name}'s docstring has no YAML example using it"
    for field, info in mod.Params.model_fields.items():
        assert info.description, f"{name}: parameter {field} has no description"


@pytest.mark.parametrize("name", sorted(skills()))
def test_every_skill_is_listed_in_the_readme(name):
    assert f"`{name}`" in README, f"skill {name} is not listed in README.md"


@pytest.mark.parametrize("name,path", sorted(playbook_files(None).items()))
def test_every_shipped_playbook_is_valid_and_described(name, path):
    pb = load_playbook(path)
    assert pb.name == name, f"{path}: name {pb.name!r} differs from its file name"
    assert pb.description
    assert pb.examples, f"{name} has no examples"
    assert name not in RESERVED
    for iname, spec in pb.inputs.items():
        assert spec.description, f"{name}: input {iname} has no description"
