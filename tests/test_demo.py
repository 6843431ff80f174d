"""`eagle demo`: the whole relaunch story on a SIMULATED host, through the real CLI code."""
from __future__ import annotations

from pathlib import Path

import pytest

from eaglebot.frontends.cli.main import main


def _processes_mentioning(text: str) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text in cmd and state not in ("Z", "X"):
            out.append(f"{d.name}: {cmd}")
    return out


@pytest.mark.e2e  # the whole demo story
def test_demo_runs_the_relaunch_story_and_leaves_nothing_running(tmp_path, capsys, monkeypatch):
    # the simulated model load and warm-up take 0.3 s + 1 s a launch for a person watching
    monkeypatch.setenv("EAGLE_SIM_LOAD_S", "0.05")
    monkeypatch.setenv("EAGLE_SIM_WARMUP_S", "0.05")
    sandbox = tmp_path / "demo"
    assert main(["demo", "--dir", str(sandbox)]) == 0
    captured = capsys.readouterr()
    out, both = captured.out, captured.out + captured.err
    assert out.count("SIMULATED") >= 3 and "finished (as expected)" in out
    assert "draft config.json restored byte for byte: True" in out
    # the gate: the wrong patch refused before the running server is touched, both lists in words
    assert "(exit code 2)" in out and "is still serving, untouched: True" in out
    assert ("mismatch: the server will feed the draft the embedding and the outputs of layers 2 and 30; training "
            "used the outputs of layers 2, 30 and 58 (first seen in run 1)") in both
    # allowed anyway, the probe tells wrong inputs from a weak draft and names the capture list
    assert "wrong inputs: position 1 accepted" in both and "likely cause: the capture list" in both
    # the repair keeps the capture list training used
    assert "keeping the outputs of layers 2, 30 and 58" in both
    assert "(exit code 3)" in out                      # the patched config's regression was flagged
    # ... and the regression says which change since the last good run caused it
    assert ("changed since last good run #2: eagle_config.eagle_aux_hidden_state_layer_ids "
            "[2, 30, 58] → [-1, 2, 30]") in out
    # ... and bisection relaunches both sides and names the planted change (SIMULATED numbers)
    assert "culprit: eagle_config.eagle_aux_hidden_state_layer_ids [2, 30, 58] → [-1, 2, 30]" in out
    assert (sandbox / "eagle.db").exists()
    assert _processes_mentioning(str(sandbox)) == []
