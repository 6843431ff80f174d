"""The shipped systemd unit starts: its ExecStartPre (`eagle doctor`) and ExecStart (`eagle
serve`) run against deploy/eagle.example.yaml on a bot host without GPUs, with the example's
hosts pointed at the test sshd (through the example's jump host) and Slack at the fake Web API."""
from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import yaml

from sshd import chown_to

from eaglebot.sim import gpu_state, install_sim_bin
from eaglebot.store.sealing import init_key

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "deploy" / "eaglebot.service"
EXAMPLE = ROOT / "deploy" / "eagle.example.yaml"
PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd's unit syntax: [Section], Key=Value (a key may repeat), # comments."""
    out: dict[str, dict[str, list[str]]] = {}
    section: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = out.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        section.setdefault(key.strip(), []).append(value.strip())
    return out


def test_the_units_documentation_link_names_a_shipped_file():
    unit = parse_unit(UNIT.read_text())
    doc = unit["Unit"]["Documentation"][0]
    assert doc.startswith("file:///opt/eaglebot/")
    assert (ROOT / doc.removeprefix("file:///opt/eaglebot/")).is_file()


async def test_the_shipped_unit_starts_the_bot_on_a_host_without_gpus(tmp_path, fake, sshd, remote_dir):
    unit = parse_unit(UNIT.read_text())["Service"]
    root = tmp_path / "root"
    paths = {"/opt/eaglebot/.venv/bin/eagle": str(Path(sys.executable).parent / "eagle"),
             "/etc/eaglebot": str(root / "etc"), "/var/lib/eaglebot": str(root / "var")}

    def mapped(value: str) -> str:
        for old, new in paths.items():
            value = value.replace(old, new)
        return value

    (root / "etc" / "playbooks").mkdir(parents=True)
    (root / "var").mkdir()
    # The example config as shipped, but its hosts at the test sshd and the db under the test root.
    sim = install_sim_bin(remote_dir / "sim-bin", remote_dir / "gpu-state", python=PY)
    gpu_state.init_state(remote_dir / "gpu-state", 8)
    chown_to(remote_dir)
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg["audit_db"] = mapped(cfg["audit_db"])
    cfg["audit_key_file"] = mapped(cfg["audit_key_file"])
    init_key(Path(cfg["audit_key_file"]))  # `eagle audit init-key`, as the deploy notes say
    for name, host in cfg["hosts"].items():
        if host.get("transport") == "local":
            continue
        host.update(sshd.host_config())
        if name != "bastion":
            host["vars"].update(python=sim["python"], nvidia_smi=sim["nvidia_smi"])
    Path(mapped("/etc/eaglebot/eagle.yaml")).write_text(yaml.safe_dump(cfg, sort_keys=False))
    Path(mapped("/etc/eaglebot/env")).write_text(
        f"SLACK_BOT_TOKEN=xoxb-deploy-test\nSLACK_APP_TOKEN=xapp-1-deploy-test\nSLACK_API_URL={fake.base_url}\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "EAGLE_"))}
    env["PATH"] = "/usr/bin:/bin"                 # the bot host: no nvidia-smi anywhere
    for line in Path(mapped(unit["EnvironmentFile"][0])).read_text().splitlines():
        key, _, value = line.partition("=")
        env[key] = value
    for assignment in unit["Environment"]:
        key, _, value = assignment.partition("=")
        env[key] = mapped(value)
    cwd = mapped(unit["WorkingDirectory"][0])

    t0 = time.monotonic()
    # (a subprocess of this loop: the fake Slack API answers on it)
    pre = await asyncio.create_subprocess_exec(*shlex.split(mapped(unit["ExecStartPre"][0])), cwd=cwd, env=env,
                                               stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out = (await asyncio.wait_for(pre.communicate(), 120))[0].decode()
    assert pre.returncode == 0, out
    assert "ok    host local nvidia-smi: not a GPU host" in out
    assert "ok    host gpu-01 nvidia-smi" in out and "8 GPU(s)" in out
    assert "host bastion nvidia-smi: not a GPU host" in out
    assert "SLACK_BOT_TOKEN: valid" in out

    proc = await asyncio.create_subprocess_exec(*shlex.split(mapped(unit["ExecStart"][0])), cwd=cwd, env=env,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        ack = await fake.ws_send({"envelope_id": "d1", "type": "slash_commands", "accepts_response_payload": True,
                                  "payload": {"command": "/eagle", "text": "status", "user_id": "U02BOB",
                                              "channel_id": "C0123456789", "team_id": "T0EAGLE",
                                              "response_url": fake.response_url("d1")}}, timeout=60)
        serving = time.monotonic() - t0
        assert ack["envelope_id"] == "d1"
        reply = await fake.wait_for(lambda: [c for c in fake.calls_to("response_url") if c.args.get("_name") == "d1"])
        assert "no runs are running" in reply[0].all_text()
    finally:
        assert unit["KillSignal"] == ["SIGTERM"]
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), float(unit["TimeoutStopSec"][0]))
    assert proc.returncode == 0, err.decode(errors="replace")
    print(f"\nsystemd-style start (ExecStartPre doctor + ExecStart serve) to serving a command: {serving:.2f} s")
