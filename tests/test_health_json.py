"""Per-GPU health in `eagle run health --json` and `eagle show` (issue 24): each GPU's verdict,
reasons and readings, from the gpu.health step's data. The CLI in this process on the
SIMULATED nvidia-smi (local transport), a real SQLite file."""
from __future__ import annotations

import json

import yaml

from support.inproc import eagle_here

from eaglebot.sim import gpu_state, install_sim_bin


def _host(tmp_path):
    v = install_sim_bin(tmp_path / "bin", tmp_path / "state")
    gpu_state.init_state(tmp_path / "state", 2)
    gpu_state.set_health(tmp_path / "state", 1, temp_c=88)
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": "e.db", "hosts": {
        "local": {"transport": "local", "vars": {"nvidia_smi": v["nvidia_smi"]}}}}))
    return cfg


def test_health_json_and_show_give_each_gpus_verdict_reasons_and_readings(tmp_path):
    cfg = _host(tmp_path)
    res = eagle_here("run", "health", "--json", config=cfg)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    by_gpu = {h["gpu"]: h for h in doc["gpu_health"]}
    assert sorted(by_gpu) == [0, 1] and all(h["host"] == "local" for h in by_gpu.values())
    assert by_gpu[0]["verdict"] == "ok" and by_gpu[0]["reasons"] == []
    assert by_gpu[1]["verdict"] == "warn" and any("88" in r for r in by_gpu[1]["reasons"])
    assert by_gpu[1]["readings"]["temperature.gpu"] == 88 and by_gpu[0]["readings"]["power.limit"] == 700.0
    shown = json.loads(eagle_here("show", str(doc["run_id"]), "--json", config=cfg).stdout)
    assert shown["gpu_health"] == doc["gpu_health"]
    text = eagle_here("show", str(doc["run_id"]), config=cfg).stdout
    assert "GPU health:" in text
    row = next(line for line in text.splitlines() if line.startswith("local  1 "))
    assert "warn" in row and "88" in row
