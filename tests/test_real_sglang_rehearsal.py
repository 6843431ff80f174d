"""The real-SGLang GPU sequence (tests/gpu/test_real_sglang.py) rehearsed without a GPU: the same module,
every test of it, against the SIMULATED SGLang speaking 0.5.17 and the simulated nvidia-smi
(EAGLE_GPU_REHEARSAL=1). Its logic (the shipped playbooks' inputs, the order, both transports, what it
records, the cleanup) is proven here, so a device run (minutes of a 30-minute budget) fails only on what
only a real GPU and a real SGLang can say. About 40 s: one pytest process running eight CLI sequences."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULE = "tests/gpu/test_real_sglang.py"
STEPS = ["1_target_alone_over_ssh", "2_bench_over_ssh", "3_eagle3_local", "4_lossless_eagle3", "5_refused",
         "6_crash", "7_simulated_acceptance", "8_stop"]


def _pytest(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("EAGLE_CONFIG", "PYTEST_ADDOPTS")}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT, env=e,
                          capture_output=True, text=True, timeout=timeout)


def test_the_real_sglang_module_is_a_gpu_module_out_of_the_default_run():
    p = _pytest("--collect-only", "-q", MODULE)
    assert "8 deselected" in p.stdout, p.stdout + p.stderr
    p = _pytest("--collect-only", "-q", "-o", "addopts=", "-m", "gpu", MODULE)
    assert [ln.split("::")[1] for ln in p.stdout.splitlines() if "::" in ln] == [
        "test_1_relaunch_over_ssh_starts_the_target_alone",
        "test_2_bench_over_ssh_records_the_greedy_reference_and_health_sees_the_server",
        "test_3_relaunch_with_topk_1_and_16_draft_tokens_is_warned_before_and_confirmed_after",
        "test_4_bench_checks_eagle3_against_the_greedy_reference",
        "test_5_an_unknown_flag_is_refused_by_the_hosts_sglang_and_the_old_server_keeps_serving",
        "test_6_a_real_startup_crash_is_reported_with_sglangs_own_fatal_line",
        "test_7_a_server_with_simulated_acceptance_is_refused_by_the_benchmark",
        "test_8_stop_and_cleanup_free_the_gpu"], p.stdout


@pytest.mark.e2e  # the whole GPU sequence in rehearsal: minutes
def test_the_real_sglang_sequence_passes_in_rehearsal_and_records_what_it_measured(tmp_path):
    p = _pytest("-o", "addopts=", "-m", "gpu", "-q", MODULE, env={"EAGLE_GPU_REHEARSAL": "1", "OUT": str(tmp_path)})
    assert p.returncode == 0, p.stdout[-8000:] + p.stderr[-3000:]
    assert re.search(r"\b8 passed\b", p.stdout) and "skipped" not in p.stdout, p.stdout[-2000:]
    rec = json.loads((tmp_path / "real-sglang.json").read_text())
    assert rec["mode"] == "rehearsal (SIMULATED SGLang)" and rec["sglang"] == "0.5.17"
    assert [k for k in STEPS if k not in rec] == []
    assert rec["1_target_alone_over_ssh"]["ready_s"] > 0 and rec["2_bench_over_ssh"]["output_tok_s"] > 0
    assert rec["3_eagle3_local"]["effective"]["speculative_num_draft_tokens"] == 4
    assert rec["3_eagle3_local"]["accept_length"] <= 1.05
    assert 0 <= rec["4_lossless_eagle3"]["greedy_match_rate"] <= 1
    assert rec["6_crash"]["kv_budget_line"] is True
    assert max(rec["8_stop"]["gpu_mib_after"].values()) == 0
    assert rec["teardown"]["killed_leftover_pids"] == [] and max(rec["teardown"]["gpu_mib"].values()) == 0
    gate = rec["draft_gate"]   # issue 31's static check, three ways, and its probe in test 3's relaunch
    assert gate["first"]["verdict"] in ("ok", "unknown") and "mismatch" in gate["mismatch"]["summary"]
    assert rec["3_eagle3_local"]["draft_probe"]["data"]["verdict"] == "unknown"   # dummy weights
    assert (tmp_path / "real-sglang.db").stat().st_size > 0
