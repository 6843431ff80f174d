"""`eagle fleet` remembers a manual health run (issue 34: it forgot one, and said nothing about
how to watch). Over the real loopback sshd, the SIMULATED nvidia-smi: `eagle run health` on two
hosts, then `eagle fleet` and `/eagle fleet` show each host's last recorded verdicts, with no
watch configured (and say how to set one up) and with one."""
from __future__ import annotations

import json

from support.gpu_helpers import PY
from support.helpers import write_yaml
from support.inproc import eagle_here

from eaglebot.sim import gpu_state, install_sim_bin


def _fleet_cfg(tmp_path, remote_dir, sshd, **extra):
    hosts = {}
    for name in ("gpu-01", "gpu-02"):
        state = remote_dir / name / "state"
        sim = install_sim_bin(remote_dir / name / "bin", state, python=PY)
        gpu_state.init_state(state, 2)
        hosts[name] = sshd.host_config(vars={"nvidia_smi": sim["nvidia_smi"], "dmesg": sim["dmesg"]})
    gpu_state.set_health(remote_dir / "gpu-02" / "state", 1, temp_c=88)
    return write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "hosts": hosts, **extra})


def test_fleet_shows_the_last_recorded_health_verdicts_with_or_without_a_watch(sshd, remote_dir, tmp_path):
    cfg = _fleet_cfg(tmp_path, remote_dir, sshd)
    res = eagle_here("fleet", config=cfg)                       # nothing recorded yet: says so, and how to watch
    assert res.returncode == 0 and "none has a recorded state or check" in res.stdout
    assert "no health watch: to watch the fleet, add `health_watch:` to eagle.yaml" in res.stdout
    assert "`eagle run health -H HOST`" in res.stdout
    first = eagle_here("run", "health", "-H", "gpu-01,gpu-02", "--json", config=cfg)
    assert first.returncode == 0, first.stderr
    rid = json.loads(first.stdout)["run_id"]

    res = eagle_here("fleet", config=cfg)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "last recorded checks (gpu.health), 2 host(s):" in lines
    row = {tuple(ln.split()[:2]): ln for ln in lines if ln.startswith("gpu-0")}
    assert set(row) == {("gpu-01", "0"), ("gpu-01", "1"), ("gpu-02", "0"), ("gpu-02", "1")}
    assert row["gpu-01", "0"].split()[2:4] == ["ok", f"#{rid}"]
    assert row["gpu-02", "1"].split()[2:4] == ["warn", f"#{rid}"] and "88" in row["gpu-02", "1"]
    assert lines[-1].startswith("no health watch: to watch the fleet")
    doc = json.loads(eagle_here("fleet", "--json", config=cfg).stdout)
    assert doc["watching"] is False and doc["hosts"] == []
    assert {(c["host"], c["gpu"], c["verdict"], c["run_id"]) for c in doc["checks"]} == {
        ("gpu-01", 0, "ok", rid), ("gpu-01", 1, "ok", rid), ("gpu-02", 0, "ok", rid), ("gpu-02", 1, "warn", rid)}

    # a later check of one host replaces that host's verdicts only; Slack's view says the same
    gpu_state.set_health(remote_dir / "gpu-02" / "state", 1, temp_c=50)
    second = eagle_here("run", "health", "-H", "gpu-02", "--json", config=cfg)
    assert second.returncode == 0, second.stderr
    rid2 = json.loads(second.stdout)["run_id"]
    doc = json.loads(eagle_here("fleet", "--json", config=cfg).stdout)
    assert {(c["host"], c["gpu"]): (c["verdict"], c["run_id"]) for c in doc["checks"]} == {
        ("gpu-01", 0): ("ok", rid), ("gpu-01", 1): ("ok", rid), ("gpu-02", 0): ("ok", rid2),
        ("gpu-02", 1): ("ok", rid2)}
    chat = eagle_here("chat", "fleet", config=cfg)
    assert chat.returncode == 0 and "last recorded checks (gpu.health), 2 host(s):" in chat.stdout

    # with a watch configured: its table (every watched host healthy so far) and the checks; no hint
    cfg = _fleet_cfg(tmp_path, remote_dir, sshd, health_watch={"hosts": ["all"]})
    res = eagle_here("fleet", config=cfg)
    assert res.returncode == 0 and res.stdout.startswith("2 healthy\n")
    assert "last recorded checks (gpu.health), 2 host(s):" in res.stdout and "no health watch" not in res.stdout
    assert json.loads(eagle_here("fleet", "--json", config=cfg).stdout)["watching"] is True
