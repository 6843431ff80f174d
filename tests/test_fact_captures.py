"""Every fact a shipped skill gathers has a real capture of its exact command, and its own
parser reads that capture: the parser tested is the one the product runs on that output.

Facts are found in the skills' code (`nvsmi.GPU_TABLE`, `hf.HEALTH`, ... as written in
src/eaglebot/skills/*.py and src/eaglebot/skills/lib/*.py), so a new fact without a capture fails here. A fact whose
exact command has no capture fails: capture it on a real host (tests/gpu/capture_facts.sh).
"""
from __future__ import annotations

import ast
import importlib
import types
import json
from pathlib import Path

import pytest

from eaglebot.facts.fact import Fact
from eaglebot.facts.gpu import health as hf
from eaglebot.facts.gpu import nvsmi

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
INDEX = json.loads((FIXTURES / "captures.json").read_text())["captures"]

def facts_used_by_skills() -> dict[str, Fact[object]]:
    """`module.NAME` references that are Facts, by command, in the shipped skills, their lib
    and `eagle doctor` (which runs the GPU query on each host)."""
    found: dict[str, Fact[object]] = {}
    for path in [*sorted((ROOT / "src" / "eaglebot" / "skills").glob("*.py")), *sorted((ROOT / "src" / "eaglebot" / "skills" / "lib").glob("*.py")),
                 ROOT / "src" / "eaglebot" / "frontends" / "cli" / "doctor.py"]:
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
            # a fact, not the protocol, nor a module that happens to define command() and parse()
            if isinstance(target, Fact) and not isinstance(target, (type, types.ModuleType)):
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
    assert INDEX.get(command), f"no capture of `{command}` in tests/fixtures/captures.json"


@pytest.mark.parametrize("command,rel", [(c, rel) for c in sorted(USED) for rel in INDEX.get(c, [])])
def test_each_capture_parses_with_the_facts_own_parser(command, rel):
    USED[command].parse(read_capture(rel, command))


def test_every_capture_indexed_exists():
    for rels in INDEX.values():
        for rel in rels:
            assert (FIXTURES / rel).is_file(), rel


def test_the_health_watch_query_has_a_real_capture_its_parser_reads():
    """The watch asks gpu.health's query plus `gpu_recovery_action` (engine/health_watch.py)."""
    fact = hf.health_fact(list(hf.WATCH_FIELDS))
    command = fact.command({})
    assert INDEX.get(command), f"no capture of `{command}` in tests/fixtures/captures.json"
    for rel in INDEX[command]:
        readings = fact.parse(read_capture(rel, command))
        assert readings, rel
