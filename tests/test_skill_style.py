"""The shipped skills fail one way: `raise StepFailed(...)` (eaglebot.sdk says why)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from eaglebot.engine.attempts import failed_result
from eaglebot.errors import StepFailed
from eaglebot.sdk import Metric

SKILLS = Path(__file__).resolve().parents[1] / "skills"
FILES = sorted([*SKILLS.glob("*.py"), *(SKILLS / "lib").glob("*.py")])


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(SKILLS)) for p in FILES])
def test_no_skill_returns_a_failed_result(path):
    calls = [n.lineno for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, ast.Attribute) and n.attr == "failed"
             and isinstance(n.value, ast.Name) and n.value.id == "StepResult"]
    assert calls == [], f"{path.name}:{calls}: raise StepFailed(...) instead"


def test_a_raised_failure_keeps_what_a_returned_one_would():
    e = StepFailed("GPU 0 uses 900 MiB", data={"memory": {"0": 900}}, output="evidence\n", warnings=["w"],
                   metrics=[Metric("gpu_free_s", 1.5, "s", "lower")])
    res = failed_result(e)
    assert (res.status, res.summary, res.data, res.output, res.warnings) == (
        "failed", "GPU 0 uses 900 MiB", {"memory": {"0": 900}}, "evidence\n", ["w"])
    assert [m.name for m in res.metrics] == ["gpu_free_s"]
