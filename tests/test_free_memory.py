"""gpu.verify's decision on JSON cases built from the real nvidia-smi memory captures, without a host.

Each case names a capture of the exact query gpu.verify runs (`nvsmi.GPU_MEMORY`), the
selected GPUs (default: all listed) and the limit, and what `check_memory` must find. The
polling, watching and the failure naming the holders are tested in test_gpu_skills.py and
test_verify_polling.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eaglebot.facts.gpu import nvsmi
from eaglebot.skills.lib.free_memory import check_memory

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted((FIXTURES / "verify_cases").glob("*.json"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_free_memory(path):
    case = json.loads(path.read_text())
    used_all = nvsmi.GPU_MEMORY.parse((FIXTURES / case["memory"]).read_text())
    check = check_memory(used_all, case.get("gpus", sorted(used_all)), case["max_used_mib"])
    want = case["expect"]
    assert {str(g): m for g, m in check.used.items()} == want["used"]
    assert {str(g): m for g, m in check.over.items()} == want["over"]
    assert check.gone == want["gone"]


def test_the_cases_use_captures_of_the_query_verify_runs():
    index = json.loads((FIXTURES / "captures.json").read_text())["captures"]
    captured = set(index[nvsmi.GPU_MEMORY.command({})])
    assert len(CASES) >= 6
    for path in CASES:
        assert json.loads(path.read_text())["memory"] in captured, path.name
