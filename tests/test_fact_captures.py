"""Every fact a shipped skill gathers has a real capture of its exact command, and its own
parser reads that capture: the parser tested is the one the product runs on that output.

Facts are found in the skills' code (`nvsmi.GPU_TABLE`, `hf.HEALTH`, ... as written in
skills/*.py and skills/lib/*.py), so a new fact without a capture fails here. A fact whose
exact command has no capture yet is listed in OWED with what exists and what is missing.
"""
from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

from eaglebot.facts import health as hf
from eaglebot.facts import nvsmi
from eaglebot.facts.fact import Fact

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
INDEX = json.loads((FIXTURES / "captures.json").read_text())["captures"]

OWED: dict[str, str] = {
    nvsmi.FUSER.command({}): "captured only as `fuser -v /dev/nvidia*` (its stderr, nvidia-smi/h200-fuser-busy.txt); "
                             "the product adds LC_ALL=C and 2>&1, the same lines in one stream",
    hf.HEALTH.command({}): "captured without power.limit (nvidia-smi/health/2xh200-busy-query-health-nounits.csv.txt) "
                           "and without power.limit and utilization.gpu (2xh200-query-health-nounits.csv.txt)",
}


def facts_used_by_skills() -> dict[str, Fact[object]]:
    """`module.NAME` references in the shipped skills and their lib that are Facts, by command."""
    found: dict[str, Fact[object]] = {}
    for path in [*sorted((ROOT / "skills").glob("*.py")), *sorted((ROOT / "skills" / "lib").glob("*.py"))]:
        tree = ast.parse(path.read_text())
        aliases: dict[str, object] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("eaglebot.facts"):
                for a in node.names:
                    try:
                        aliases[a.asname or a.name] = importlib.import_module(f"{node.module}.{a.name}")
                    except ModuleNotFoundError:
                        aliases[a.asname or a.name] = getattr(importlib.import_module(node.module), a.name)
        for node in ast.walk(tree):
            target = None
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                target = getattr(aliases[node.value.id], node.attr, None)
            elif isinstance(node, ast.Name) and node.id in aliases:
                target = aliases[node.id]
            if isinstance(target, Fact) and not isinstance(target, type):  # a fact, not the protocol
                found[target.command({})] = target
    return found


USED = facts_used_by_skills()


def read_capture(rel: str, command: str) -> str:
    text = (FIXTURES / rel).read_text()
    if not text.startswith("$ "):
        return text
    first, _, rest = text.partition("\n")
    assert first == f"$ {command}", f"{rel} was captured with another command: {first}"
    body, _, last = rest.rstrip("\n").rpartition("\n")
    assert last == "# exit 0", f"{rel}: the command did not succeed ({last})"
    return body + "\n"


def test_the_skills_gather_facts():
    assert {nvsmi.GPU_TABLE.command({}), nvsmi.GPU_MEMORY.command({}), nvsmi.COMPUTE_APPS.command({}),
            hf.NVLINK_STATUS.command({})} <= set(USED)


@pytest.mark.parametrize("command", sorted(USED))
def test_every_fact_a_skill_gathers_has_a_capture_of_its_exact_command(command):
    if command in OWED:
        assert command not in INDEX, "captured now: take it off OWED"
        pytest.skip(f"no capture of `{command}` yet: {OWED[command]}")
    assert INDEX.get(command), f"no capture of `{command}` in tests/fixtures/captures.json"


@pytest.mark.parametrize("command,rel", [(c, rel) for c in sorted(USED) for rel in INDEX.get(c, [])])
def test_each_capture_parses_with_the_facts_own_parser(command, rel):
    USED[command].parse(read_capture(rel, command))


def test_every_capture_indexed_exists_and_owed_facts_are_still_used():
    for rels in INDEX.values():
        for rel in rels:
            assert (FIXTURES / rel).is_file(), rel
    assert set(OWED) <= set(USED)
