"""`eagle doctor`: hosts (real sshd on loopback), host keys, tools, Slack tokens, the DB."""
from __future__ import annotations

import os
from pathlib import Path

import asyncssh
import pytest
import yaml

from support.fakes.slack_api import FakeSlackAPI
from support.gpu_helpers import PY

from eaglebot.config import load_settings
from eaglebot.frontends.cli.doctor import doctor_main, run_checks
from eaglebot.sim import gpu_state, install_sim_bin
from eaglebot.facts.gpu import nvsmi


def settings_for(tmp_path: Path, hosts: dict):
    p = tmp_path / "eagle.yaml"
    p.write_text(yaml.safe_dump({"audit_db": str(tmp_path / "eagle.db"), "hosts": hosts}))
    return load_settings(p)


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, NVIDIA H200'\necho '1, NVIDIA H200'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return smi


async def test_doctor_passes_with_reachable_hosts_tools_valid_tokens_and_writable_db(
        tmp_path, fake_nvidia_smi, monkeypatch):
    fake = await FakeSlackAPI().start()
    try:
        monkeypatch.setenv("SLACK_API_URL", fake.base_url)
        monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-doctor-test-token")
        monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-doctor-test-token")
        lines = []
        sim = install_sim_bin(tmp_path / "sim-bin", tmp_path / "gpu-state", python=PY)
        checks = await run_checks(settings_for(tmp_path, {"local": {"transport": "local", "gpu": True,
                                                                    "vars": {"python": sim["python"]}}}),
                                  lambda c: lines.append(c.line()))
    finally:
        await fake.stop()
    assert all(c.ok for c in checks), lines
    text = "\n".join(lines)
    assert "host local nvidia-smi" in text and "2 GPU(s)" in text
    # the host's Python imports sglang, and says which release answered
    assert f"ok    host local python: {sim['python']} is Python 3." in text and " with SGLang 0.5.23" in text
    assert "SLACK_BOT_TOKEN: valid: bot eaglebot" in text and "SLACK_APP_TOKEN: valid" in text
    assert "audit db" in text
    assert [c.method for c in fake.calls] == ["auth.test", "apps.connections.open"]


async def test_doctor_prints_the_fingerprint_of_an_unknown_host_key(tmp_path, sshd, remote_dir):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    sim = install_sim_bin(remote_dir / "sim-bin", remote_dir / "gpu-state", python=PY)
    hosts = {"gpu-pinned": sshd.host_config(vars={"python": sim["python"]}),
             "gpu-new": sshd.host_config(known_hosts=str(empty))}
    lines = []
    checks = await run_checks(settings_for(tmp_path, hosts), lambda c: lines.append(c.line()))
    by = {c.name: c for c in checks}
    assert by["host gpu-pinned"].ok
    assert by["host gpu-pinned python"].ok and by["host gpu-pinned python"].detail.endswith(" with SGLang 0.5.23")
    assert not by["host gpu-new"].ok
    expected = asyncssh.import_public_key(sshd.host_pub).get_fingerprint("sha256")
    assert expected in by["host gpu-new"].detail


async def test_doctor_reports_unreachable_hosts_missing_tools_and_refused_tokens(tmp_path, monkeypatch):
    fake = await FakeSlackAPI().start()
    try:
        fake.fail("auth.test", "invalid_auth")
        monkeypatch.setenv("SLACK_API_URL", fake.base_url)
        monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-revoked-token-000")
        monkeypatch.delenv("SLACK_APP_TOKEN", raising=False)
        monkeypatch.setenv("PATH", "/usr/bin:/bin")
        known = tmp_path / "kh"
        known.write_text("")
        hosts = {"gone": {"address": "127.0.0.1", "port": 9, "known_hosts": str(known), "connect_timeout_s": 2},
                 "local": {"transport": "local", "gpu": True, "vars": {"python": "/nonexistent/python"}}}
        checks = await run_checks(settings_for(tmp_path, hosts), lambda c: None)
    finally:
        await fake.stop()
    by = {c.name: c for c in checks}
    assert not by["host gone"].ok and "unreachable" in by["host gone"].detail
    assert not by["host local nvidia-smi"].ok and "not found" in by["host local nvidia-smi"].detail
    assert not by["host local python"].ok and "/nonexistent/python not runnable" in by["host local python"].detail
    assert not by["SLACK_BOT_TOKEN"].ok and "invalid_auth" in by["SLACK_BOT_TOKEN"].detail


def test_doctor_main_exits_1_when_a_check_fails_and_prints_one_line_per_check(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    monkeypatch.delenv("SLACK_APP_TOKEN", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    code = doctor_main(settings_for(tmp_path, {"local": {"transport": "local", "gpu": True}}))
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert any(line.startswith("FAIL  host local nvidia-smi") for line in out)
    assert any(line.startswith("ok    audit db") for line in out)


async def test_doctor_runs_the_nvidia_smi_named_by_the_host_var_as_the_gpu_skills_do(
        tmp_path, sshd, remote_dir, monkeypatch):
    """Regression: doctor used to look only on PATH, so a host the GPU skills could use failed it."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")          # no nvidia-smi on this host's PATH
    local = install_sim_bin(tmp_path / "sim-bin", tmp_path / "gpu-state", python=PY)
    gpu_state.init_state(tmp_path / "gpu-state", 2)
    remote = install_sim_bin(remote_dir / "sim-bin", remote_dir / "gpu-state", python=PY)
    gpu_state.init_state(remote_dir / "gpu-state", 8)    # not the count of any simulator on the SSH PATH
    wrong = str(tmp_path / "no-such-dir" / "nvidia-smi")
    hosts = {"local": {"transport": "local", "vars": {"nvidia_smi": local["nvidia_smi"]}},
             "gpu-ssh": sshd.host_config(vars={"nvidia_smi": remote["nvidia_smi"]}),
             "gpu-wrong": {"transport": "local", "vars": {"nvidia_smi": wrong}}}
    by = {c.name: c for c in await run_checks(settings_for(tmp_path, hosts), lambda c: None)}
    assert by["host local nvidia-smi"].ok, by["host local nvidia-smi"].detail
    assert by["host local nvidia-smi"].detail == f"{local['nvidia_smi']} answers: 2 GPU(s) (2 x NVIDIA H200)"
    assert by["host gpu-ssh nvidia-smi"].ok, by["host gpu-ssh nvidia-smi"].detail
    assert "8 GPU(s)" in by["host gpu-ssh nvidia-smi"].detail
    assert not by["host gpu-wrong nvidia-smi"].ok
    assert by["host gpu-wrong nvidia-smi"].detail == (
        f"nvidia-smi not found on gpu-wrong ({wrong}); install the NVIDIA driver or set the host var nvidia_smi")


async def test_doctor_explains_nvidia_smi_exit_codes_in_the_words_the_gpu_skills_use(tmp_path, monkeypatch):
    sim = install_sim_bin(tmp_path / "sim-bin", tmp_path / "gpu-state", python=PY)
    gpu_state.init_state(tmp_path / "gpu-state", 2, exit_code=15)
    hosts = {"local": {"transport": "local", "vars": {"nvidia_smi": sim["nvidia_smi"]}}}
    by = {c.name: c for c in await run_checks(settings_for(tmp_path, hosts), lambda c: None)}
    assert not by["host local nvidia-smi"].ok
    assert by["host local nvidia-smi"].detail == nvsmi.explain_exit("local", sim["nvidia_smi"], 15, "", "")
    assert by["host local nvidia-smi"].detail == ("GPU check failed on local: a GPU has fallen off the bus "
                                                  "(nvidia-smi exit 15); the node needs attention")


async def test_doctor_checks_nvidia_smi_only_on_gpu_hosts(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")                 # no nvidia-smi on the bot host
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    monkeypatch.delenv("SLACK_APP_TOKEN", raising=False)
    checks = await run_checks(settings_for(tmp_path, {"local": {"transport": "local"}}), lambda c: None)
    by = {c.name: c for c in checks}
    assert by["host local nvidia-smi"].ok and "not a GPU host" in by["host local nvidia-smi"].detail
    assert by["access"].warn and "no `access` section" in by["access"].detail
    assert all(c.ok for c in checks), [c.line() for c in checks]


def test_the_retired_persistent_shell_is_accepted_runs_as_exec_and_doctor_says_so(tmp_path, monkeypatch, capsys,
                                                                                   caplog):
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    monkeypatch.delenv("SLACK_APP_TOKEN", raising=False)
    settings = settings_for(tmp_path, {"local": {"transport": "local", "gpu": False, "shell": "persistent"}})
    assert any("hosts local: `shell: persistent` is retired and runs as `shell: exec`" in r.getMessage()
               for r in caplog.records)
    code = doctor_main(settings)
    out = capsys.readouterr().out.splitlines()
    assert ("WARN  shell mode: hosts local: `shell: persistent` is retired and runs as `shell: exec` "
            "(one channel per command); remove the key") in out
    assert code == 0  # a warning fails nothing
    doctor_main(settings_for(tmp_path, {"local": {"transport": "local", "gpu": False}}))
    assert not any("shell mode" in line for line in capsys.readouterr().out.splitlines())


async def test_doctor_prints_the_key_to_pin_when_known_hosts_is_missing_also_behind_a_jump_host(tmp_path, sshd):
    missing = tmp_path / "nowhere" / "known_hosts"
    hosts = {"bastion": sshd.host_config(),
             "gpu-direct": sshd.host_config(known_hosts=str(missing)),
             "gpu-behind": sshd.host_config(known_hosts=str(missing), jump="bastion")}
    checks = await run_checks(settings_for(tmp_path, hosts), lambda c: None)
    by = {c.name: c for c in checks}
    fp = asyncssh.import_public_key(sshd.host_pub).get_fingerprint("sha256")
    for name in ("gpu-direct", "gpu-behind"):
        assert not by[f"host {name}"].ok
        assert "does not exist" in by[f"host {name}"].detail
        assert f"presents ssh-ed25519 key {fp}" in by[f"host {name}"].detail
        assert f"`eagle hosts pin {name}`" in by[f"host {name}"].detail
    assert not missing.exists()      # doctor pins nothing


def _service_env(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("SLACK_API_URL", raising=False)
    monkeypatch.delenv("SLACK_APP_TOKEN", raising=False)
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    monkeypatch.delenv("SLACK_SIGNING_SECRET", raising=False)


async def test_doctor_service_reports_a_down_host_and_an_unpinned_one_as_warnings(tmp_path, sshd, monkeypatch, capsys):
    from support.sshd import free_port

    fake = await FakeSlackAPI().start()
    try:
        _service_env(monkeypatch)
        monkeypatch.setenv("SLACK_API_URL", fake.base_url)
        monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-service-secret-value")
        monkeypatch.setenv("SLACK_SIGNING_SECRET", "signing-secret-value")
        empty = tmp_path / "empty_known_hosts"
        empty.write_text("")
        hosts = {"down": {"address": "127.0.0.1", "port": free_port(), "known_hosts": str(sshd.known_hosts),
                          "connect_timeout_s": 2, "connect_retries": 0},
                 "unpinned": sshd.host_config(known_hosts=str(empty)),
                 "local": {"transport": "local"}}
        settings = settings_for(tmp_path, hosts)
        lines: list[str] = []
        checks = await run_checks(settings, lambda c: lines.append(c.line()), service=True)
    finally:
        await fake.stop()
    text = "\n".join(lines)
    assert all(c.ok for c in checks), text
    assert any(line.startswith("WARN  host down: ") and "unreachable" in line for line in lines)
    assert any(line.startswith("WARN  host unpinned: ") and "eagle hosts pin unpinned" in line for line in lines)
    assert "ok    tokens: SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET set" in lines
    assert any(line.startswith("ok    playbooks: ") for line in lines)
    assert "audit chain" not in text                      # each start does not walk every row
    assert "secret-value" not in text
    # plain doctor: the same hosts are errors
    assert not all(c.ok for c in await run_checks(settings, lambda c: None))


def test_doctor_service_exit_1_without_tokens_and_with_an_invalid_playbook(tmp_path, monkeypatch, capsys):
    _service_env(monkeypatch)
    book = tmp_path / "playbooks"
    book.mkdir()
    (book / "broken.yaml").write_text("name: broken\nsteps:\n  - skill: no.such.skill\n")
    p = tmp_path / "eagle.yaml"
    p.write_text(yaml.safe_dump({"audit_db": "eagle.db", "playbooks_dir": "playbooks",
                                 "hosts": {"local": {"transport": "local"}}}))
    code = doctor_main(load_settings(p), service=True)
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert ("FAIL  tokens: SLACK_BOT_TOKEN and SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode) "
            "not set in the environment (put them in the unit's EnvironmentFile, mode 0600)") in out
    assert any(line.startswith("FAIL  playbook broken: ") and "no.such.skill" in line for line in out)
    (book / "broken.yaml").unlink()
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-x")
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-x")
    monkeypatch.setenv("SLACK_API_URL", "http://127.0.0.1:9/api/")    # Slack unreachable: a warning
    assert doctor_main(load_settings(p), service=True) == 0
    assert any(line.startswith("WARN  SLACK_BOT_TOKEN: could not reach Slack")
               for line in capsys.readouterr().out.splitlines())


def test_doctor_service_exit_2_when_the_config_is_invalid(tmp_path):
    from eaglebot.frontends.cli.main import main

    p = tmp_path / "eagle.yaml"
    p.write_text("audit_db: eagle.db\nplaybooks_dir: missing\n")
    assert main(["--config", str(p), "doctor", "--service"]) == 2


async def test_doctor_fails_a_gpu_hosts_python_that_cannot_import_sglang_over_ssh(tmp_path, sshd, monkeypatch):
    """Issue 34: `ok host gpu-01 python: ... is Python 3.11.2`, then the relaunch took the server down
    because that Python had no sglang. A GPU host's Python must import it; the bot's own host need not."""
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    monkeypatch.delenv("SLACK_APP_TOKEN", raising=False)
    hosts = {"gpu-01": sshd.host_config(vars={"python": PY}), "local": {"transport": "local", "gpu": False}}
    by = {c.name: c for c in await run_checks(settings_for(tmp_path, hosts), lambda c: None)}
    bad = by["host gpu-01 python"]
    assert not bad.ok and bad.detail.startswith(f"{PY} is Python 3.") and bad.detail.endswith(
        " but cannot import sglang: ModuleNotFoundError: No module named 'sglang'"), bad.detail
    assert by["host local python"].ok and "sglang" not in by["host local python"].detail


def test_the_host_vars_doctor_takes_as_declared_are_ones_the_full_scan_knows(tmp_path):
    # doctor's shortcut (no skill, playbook model or template loaded when every host var is declared)
    # must never hide a warning: what it calls declared is known to the engine's own scan too.
    from eaglebot.engine.hostvars import known_host_vars
    from eaglebot.engine.registry import SkillRegistry
    from eaglebot.frontends.cli.doctor import declared_host_vars

    book = tmp_path / "playbooks"
    book.mkdir()
    (book / "mine.yaml").write_text("name: mine\ninputs:\n  my_knob: {type: int, default: 1}\n"
                                    "vars:\n  my_var: 2\nsteps:\n  - skill: shell\n    with: {command: 'echo {{ my_knob }}'}\n")
    settings = settings_for(tmp_path, {})
    registry = SkillRegistry.from_settings(settings)
    for user_dir in (None, book):
        declared = declared_host_vars(user_dir)
        assert {"python", "model", "draft", "tp", "spec_steps"} <= declared
        assert declared <= known_host_vars(registry, user_dir), declared - known_host_vars(registry, user_dir)
    assert {"my_knob", "my_var"} <= declared_host_vars(book) and "my_knob" not in declared_host_vars(None)


def test_doctor_on_the_quick_start_config_loads_no_engine_no_slack_client(tmp_path):
    # What made doctor slow at load and is not needed on a first node: the skills, playbooks and
    # templates (the host-var scan), the Slack client and aiohttp with no token set.
    import subprocess
    import sys

    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": str(tmp_path / "eagle.db"), "hosts": {"gpu-01": {
        "address": "127.0.0.1", "port": 1, "connect_retries": 0,
        "vars": {"python": "~/sglang/bin/python", "model": "~/models/target", "draft": "~/models/eagle3", "tp": 8}}}}))
    probe = ("import asyncio, sys\nfrom eaglebot.config import load_settings\n"
             "from eaglebot.frontends.cli.doctor import run_checks\n"
             f"checks = asyncio.run(run_checks(load_settings({str(cfg)!r}), lambda c: None))\n"
             "assert any(c.name == 'host gpu-01' and not c.ok for c in checks)\n"
             "print(sorted(m for m in sys.modules if m.startswith(('eaglebot.engine', 'eaglebot.skills', "
             "'slack_sdk', 'aiohttp', 'jinja2'))))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]", res.stdout
