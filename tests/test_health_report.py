"""gpu.health's step decision on JSON cases built from the real 2x H200 captures, without a host.

A case names the health-query capture (its `$ command` line gives the fields), faults
written into it in the real format (one GPU's column replaced), optional NVLink captures,
kernel-log lines, a DCGM result, the step's params and what `health_report` must decide.
The per-GPU rules (`facts.gpu.health.evaluate`) are tested field by field in test_gpu_health.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eaglebot.facts.gpu import health as hf
from eaglebot.skills import gpu_health
from eaglebot.skills.lib.health_report import Readings, health_report

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted((FIXTURES / "health_cases").glob("*.json"))


def capture(rel: str) -> tuple[str, str]:
    """(command, output) of a framed capture (`$ command` first, `# exit N` last)."""
    lines = (FIXTURES / rel).read_text().split("\n")
    assert lines[0].startswith("$ ") and lines[-2] == "# exit 0", rel
    return lines[0][2:], "\n".join(lines[1:-2]) + "\n"


def with_faults(out: str, fields: list[str], faults: list[dict]) -> str:
    rows = out.strip().split("\n")
    for f in faults:
        cells = rows[f["gpu"]].split(", ")
        assert len(cells) == len(fields)
        cells[fields.index(f["field"])] = f["value"]
        rows[f["gpu"]] = ", ".join(cells)
    return "\n".join(rows) + "\n"


def readings(case: dict, params: gpu_health.Params) -> Readings:
    cmd, out = capture(case["health"])
    fields = cmd.split("--query-gpu=")[1].split()[0].split(",")
    rows = hf.parse_health(with_faults(out, fields, case.get("faults", [])), fields)
    links = hf.parse_nvlink_status(capture(case["nvlink_status"])[1]) if "nvlink_status" in case else {}
    errors = hf.parse_nvlink_errors(capture(case["nvlink_errors"])[1]) if "nvlink_errors" in case else {}
    log = capture(case["kernel_log"])[1] + "".join(line + "\n" for line in case.get("kernel_log_lines", []))
    sel = params.gpus if params.gpus is not None else sorted(rows)
    dcgm = case.get("dcgm", {"status": "skipped", "why": "dcgmi is not installed on gpu"})
    return Readings(rows, sel, links, errors, hf.parse_xids(log), dcgm, [], [])


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_health_report(path):
    case = json.loads(path.read_text())
    params = gpu_health.Params(**case.get("params", {}))
    res = health_report("gpu", readings(case, params), gpu_health.thresholds(params), fail_on_warn=params.fail_on_warn)
    want = case["expect"]
    assert ("failed" if res.failed else "ok", res.summary) == (want["status"], want["summary"])
    assert res.data["health"] == want["health"]
    assert res.warnings == want["warnings"]


def test_there_are_cases():
    assert len(CASES) >= 6
