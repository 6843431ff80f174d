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
DOCS = ROOT / "docs"
CLI_PAGE = (DOCS / "cli.md").read_text()
SKILLS_PAGE = (DOCS / "skills.md").read_text()
PLAYBOOKS_PAGE = (DOCS / "playbooks.md").read_text()
CONFIG_PAGE = (DOCS / "configuration.md").read_text()


def _subcommands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(sub.choices)


@pytest.mark.parametrize("cmd", _subcommands())
def test_every_cli_command_is_in_the_cli_page(cmd):
    assert re.search(rf"\beagle {re.escape(cmd)}\b", CLI_PAGE), f"`eagle {cmd}` is not documented in docs/cli.md"


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
def test_every_skill_is_listed_in_the_skills_page(name):
    assert f"`{name}`" in SKILLS_PAGE, f"skill {name} is not listed in docs/skills.md"


@pytest.mark.parametrize("name,path", sorted(playbook_files(None).items()))
def test_every_shipped_playbook_is_valid_and_described(name, path):
    pb = load_playbook(path)
    assert pb.name == name, f"{path}: name {pb.name!r} differs from its file name"
    assert pb.description
    assert pb.examples, f"{name} has no examples"
    assert name not in RESERVED
    for iname, spec in pb.inputs.items():
        assert spec.description, f"{name}: input {iname} has no description"


@pytest.mark.parametrize("name", sorted(playbook_files(None)))
def test_every_shipped_playbook_is_listed_in_the_playbooks_page(name):
    assert f"| `{name}` |" in PLAYBOOKS_PAGE, f"playbook {name} is not listed in docs/playbooks.md"


def _config_keys() -> list[str]:
    """Every key a user can write in eagle.yaml, from the pydantic models themselves."""
    from pydantic import BaseModel

    from eaglebot.config import Settings

    keys: set[str] = set()

    def walk(model: type[BaseModel]) -> None:
        for name, info in model.model_fields.items():
            if info.exclude:
                continue   # set by the loader (base_dir, source), not by the file
            keys.add(name)
            for arg in (info.annotation, *getattr(info.annotation, "__args__", ())):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    walk(arg)

    walk(Settings)
    return sorted(keys)


@pytest.mark.parametrize("key", _config_keys())
def test_every_config_key_is_in_the_configuration_page(key):
    assert f"| `{key}` |" in CONFIG_PAGE, f"config key {key} is not in docs/configuration.md's tables"


def test_the_readme_is_a_manual_not_a_reference():
    lines = README.splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; the reference belongs in docs/"
    first = re.search(r"^```bash\n(.*?)^```", README, re.S | re.M)
    assert first and first.group(1).split("\n")[:2] == ["scripts/demo.sh", "scripts/test.sh"]


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces
    as hyphens."""
    heads = re.findall(r"^#{1,6} (.+)$", re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_every_local_link_leads_somewhere(page):
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)]*))?\)", page.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        dest = page.parent / target if target else page
        assert dest.exists(), f"{page.name} links to {target}, which does not exist"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name} links to {target}#{anchor}: no such heading"
