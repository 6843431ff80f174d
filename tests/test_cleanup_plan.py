"""gpu.cleanup's decision on JSON cases built from real nvidia-smi captures, without a host.

Each case in tests/fixtures/cleanup_cases/ names the captures (the GPU table or, for two
GPUs, the index/uuid and memory captures, and the compute-apps capture), the /proc facts of
the PIDs listed there, the bot's launched sessions and the step's params, and what
`plan_cleanup` must decide. The skill carrying the plan out is tested in test_gpu_skills.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eaglebot.facts.gpu import nvsmi
from eaglebot.facts.host.procs import ProcInfo, Stat
from eaglebot.skills import gpu_cleanup
from eaglebot.skills.lib import cleanup, gpu

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted((FIXTURES / "cleanup_cases").glob("*.json"))


def fx(rel: str) -> str:
    return (FIXTURES / rel).read_text()


def gpu_rows(spec: dict) -> list[nvsmi.GpuRow]:
    if "table" in spec:
        return nvsmi.parse_gpus(fx(spec["table"]))
    used = nvsmi.parse_memory_used(fx(spec["memory"]))
    return [nvsmi.GpuRow(int(r["index"]), r["uuid"], "NVIDIA H200", used[int(r["index"])], 143771, "[N/A]")
            for r in nvsmi.parse_query(fx(spec["uuids"]), ["index", "uuid"])]


def proc(pid: str, p: dict) -> ProcInfo:
    return ProcInfo(Stat(int(pid), p["comm"], p["state"], 1, p["session"], p["session"], "1000"), p["user"], p["cmdline"])


def snapshot(case: dict, params: gpu_cleanup.Params) -> gpu.Snapshot:
    rows = gpu_rows(case["gpus"])
    apps = nvsmi.parse_compute_apps(fx(case["apps"]))
    infos = {int(pid): proc(pid, p) for pid, p in case["procs"].items()}
    sel = params.gpus if params.gpus is not None else [r.index for r in rows]
    return gpu.assemble("gpu", sel, rows, apps, infos)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_cleanup_plan(path):
    case = json.loads(path.read_text())
    params = gpu_cleanup.Params(**case["params"])
    snap = snapshot(case, params)
    plan = cleanup.plan_cleanup(snap, params, set(case["sessions"]))
    want = case["expect"]
    pids = lambda hs: [h.pid for h in hs]  # noqa: E731
    assert pids(plan.targets) == want["targets"]
    assert sorted(plan.ours) == sorted(want["ours"])
    assert pids(plan.foreign) == want["foreign"]
    assert pids(plan.protected) == want["protected"]
    assert pids(plan.filtered_out) == want["filtered_out"]
    assert {str(g): m for g, m in snap.unexplained.items()} == want["unexplained"]
    assert snap.hidden_pids == want["hidden"]
    assert plan.nothing_to_do == want["nothing_to_do"]
    for h in plan.targets:
        assert plan.why(h) == ("ours" if h.pid in want["ours"] else "FOREIGN")


def test_there_are_cases():
    assert len(CASES) >= 8
