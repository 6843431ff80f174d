"""The shipped systemd unit starts with one host down: the install steps in its comments, done
under a temporary root as written (folders as deploy/tmpfiles.d says, `eagle audit init-key`,
`eagle hosts pin`), then its ExecStartPre (`eagle doctor --service`) and ExecStart (`eagle
serve`) in order, on a bot host without GPUs, with the example config's hosts at the test sshd
(through the example's jump host), gpu-02 at a closed port, and Slack at the fake Web API.
The unit, sysusers.d and tmpfiles.d files and the example config agree with each other."""
from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
import yaml

from support.slack_harness import SECRET, command_body, signed_headers
from support.sshd import chown_to, free_port

from eaglebot.sim import gpu_state, install_sim_bin

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "eaglebot.service"
SYSUSERS = DEPLOY / "sysusers.d" / "eaglebot.conf"
TMPFILES = DEPLOY / "tmpfiles.d" / "eaglebot.conf"
EXAMPLE = DEPLOY / "eagle.example.yaml"
PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
EAGLE = str(Path(sys.executable).parent / "eagle")


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd's unit syntax: [Section], Key=Value (a key may repeat), # and ; comments."""
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


def config_lines(path: Path) -> list[list[str]]:
    """sysusers.d / tmpfiles.d: whitespace-separated fields, double quotes group, # comments."""
    return [shlex.split(line) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def tmpfiles_dirs() -> dict[str, tuple[str, str, str]]:
    """path -> (mode, user, group) of each `d` line."""
    return {f[1]: (f[2], f[3], f[4]) for f in config_lines(TMPFILES) if f[0] == "d"}


SERVICE = parse_unit(UNIT.read_text())["Service"]
SERVICE_ENV = dict(a.partition("=")[::2] for a in SERVICE["Environment"])


def test_the_units_documentation_link_names_a_shipped_file():
    doc = parse_unit(UNIT.read_text())["Unit"]["Documentation"][0]
    assert doc.startswith("file:///opt/eaglebot/")
    assert (ROOT / doc.removeprefix("file:///opt/eaglebot/")).is_file()


def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    analyze = systemd_tool("systemd-analyze")
    unit = tmp_path / "eaglebot.service"      # the venv where this test's eagle is
    unit.write_text(UNIT.read_text().replace("/opt/eaglebot/.venv/bin/eagle", EAGLE))
    res = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stderr == "" and res.stdout == "", res.stderr


def systemd_tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: install Debian's `systemd` package"
    return path


def install_root(root: Path) -> Path:
    """Install step 2 as written, into `root`: systemd-sysusers, then systemd-tmpfiles --create."""
    (root / "etc").mkdir(parents=True)
    for tool, conf in (("systemd-sysusers", SYSUSERS), ("systemd-tmpfiles", TMPFILES)):
        args = [systemd_tool(tool), f"--root={root}"] + (["--create"] if tool == "systemd-tmpfiles" else [])
        res = subprocess.run([*args, str(conf)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
    return root


def test_sysusers_and_tmpfiles_create_the_user_and_folders_the_unit_names(tmp_path):
    root = install_root(tmp_path / "root")
    passwd = {line.split(":")[0]: line.split(":") for line in (root / "etc/passwd").read_text().splitlines()}
    user = passwd[SERVICE["User"][0]]
    uid, gid, home, shell = int(user[2]), int(user[3]), user[5], user[6]
    groups = {line.split(":")[0]: int(line.split(":")[2]) for line in (root / "etc/group").read_text().splitlines()}
    assert groups[SERVICE["Group"][0]] == gid and home == SERVICE["WorkingDirectory"][0]
    assert shell == "/usr/sbin/nologin"
    for path, (mode, owner, group) in tmpfiles_dirs().items():
        st = (root / path.lstrip("/")).stat()
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == int(mode, 8), path
        assert st.st_uid == (uid if owner == user[0] else 0) and st.st_gid == (gid if group == user[0] else 0), path
    for path in (home, *SERVICE["ReadWritePaths"]):   # what the bot writes is its own
        assert (root / path.lstrip("/")).stat().st_uid == uid


def test_sysusers_tmpfiles_and_the_example_config_agree_with_the_unit():
    [user] = [f for f in config_lines(SYSUSERS) if f[0] == "u"]
    _, name, _, _, home, shell = user
    assert SERVICE["User"] == [name] and SERVICE["Group"] == [name]
    assert SERVICE["WorkingDirectory"] == [home] and shell == "/usr/sbin/nologin"
    dirs = tmpfiles_dirs()
    assert dirs[home] == ("0750", name, name)
    assert SERVICE["StateDirectory"] == ["eaglebot"] and home == "/var/lib/eaglebot"
    assert SERVICE["ReadWritePaths"] == [home]
    config = Path(SERVICE_ENV["EAGLE_CONFIG"])
    env_file = Path(SERVICE["EnvironmentFile"][0])
    for folder in {config.parent, env_file.parent}:   # root writes, the bot reads
        assert dirs[str(folder)] == ("0750", "root", name)
    assert f"--env-file {env_file}" in SERVICE["ExecStart"][0]
    assert SERVICE["ExecStartPre"] == ["/opt/eaglebot/.venv/bin/eagle doctor --service"]
    assert SERVICE["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert SERVICE["Restart"] == ["on-failure"] and SERVICE["NoNewPrivileges"] == ["true"]
    assert SERVICE["ProtectSystem"] == ["strict"]

    cfg = yaml.safe_load(EXAMPLE.read_text())
    for key in ("audit_db", "audit_key_file"):        # written by the bot: under its writable path
        assert cfg[key].startswith(home + "/"), key
    assert str(config.parent / cfg["playbooks_dir"]) in dirs
    ssh = f"{home}/.ssh"
    assert dirs[ssh] == ("0700", name, name)
    for host in cfg["hosts"].values():
        if host.get("transport") != "local":
            assert Path(host["key"]).parent == Path(ssh) and Path(host["known_hosts"]).parent == Path(ssh)


def test_the_install_steps_name_shipped_files_and_the_paths_the_unit_uses():
    comments = "\n".join(line for line in UNIT.read_text().splitlines() if line.startswith("#"))
    for path in re.findall(r"/opt/eaglebot/(deploy/[\w./-]+)", comments):
        assert (ROOT / path).is_file(), path
    assert f"/etc/eaglebot/eagle.yaml" in comments and SERVICE["EnvironmentFile"][0] in comments
    assert yaml.safe_load(EXAMPLE.read_text())["audit_key_file"] in comments


async def run_line(line: str, *, cwd: str, env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(*shlex.split(line), cwd=cwd, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out = (await asyncio.wait_for(proc.communicate(), 120))[0].decode()
    assert proc.returncode is not None
    return proc.returncode, out


async def stop(proc: asyncio.subprocess.Process) -> tuple[int | None, str]:
    assert SERVICE["KillSignal"] == ["SIGTERM"]
    proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(proc.communicate(), float(SERVICE["TimeoutStopSec"][0]))
    return proc.returncode, err.decode(errors="replace")


@pytest.mark.e2e  # the whole unit, started
async def test_the_shipped_unit_starts_the_bot_with_one_host_down_on_a_host_without_gpus(
        tmp_path, fake, sshd, remote_dir):
    root = tmp_path / "root"
    paths = {"/opt/eaglebot/.venv/bin/eagle": EAGLE, "/etc/eaglebot": str(root / "etc/eaglebot"),
             "/var/lib/eaglebot": str(root / "var/lib/eaglebot")}

    def mapped(value: str) -> str:
        for old, new in paths.items():
            value = value.replace(old, new)
        return value

    # Step 2: the user and folders, by systemd-sysusers and systemd-tmpfiles.
    install_root(root)
    # Step 3: the example config, its GPU host at the test sshd (simulated GPUs there), gpu-02 down.
    sim = install_sim_bin(remote_dir / "sim-bin", remote_dir / "gpu-state", python=PY)
    gpu_state.init_state(remote_dir / "gpu-state", 8)
    chown_to(remote_dir)
    cfg = yaml.safe_load(EXAMPLE.read_text())
    for key in ("audit_db", "audit_key_file"):
        cfg[key] = mapped(cfg[key])
    for name, host in cfg["hosts"].items():
        if host.get("transport") == "local":
            continue
        host.update(address="127.0.0.1", port=sshd.port, user=sshd.user, key=mapped(host["key"]),
                    known_hosts=mapped(host["known_hosts"]))
        if name == "gpu-01":
            host["vars"].update(python=sim["python"], nvidia_smi=sim["nvidia_smi"])
    down = free_port()
    cfg["hosts"]["gpu-02"].update(port=down, connect_timeout_s=3, connect_retries=1)
    config = Path(mapped(SERVICE_ENV["EAGLE_CONFIG"]))
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    # Step 4: the tokens.
    env_file = Path(mapped(SERVICE["EnvironmentFile"][0]))
    env_file.write_text(f"# tokens\nSLACK_BOT_TOKEN=xoxb-deploy-test\nSLACK_APP_TOKEN=\"xapp-1-deploy-test\"\n"
                        f"SLACK_SIGNING_SECRET={SECRET}\nSLACK_API_URL={fake.base_url}\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "EAGLE_"))}
    env["PATH"] = "/usr/bin:/bin"                 # the bot host: no nvidia-smi anywhere
    cwd = mapped(SERVICE["WorkingDirectory"][0])
    # Steps 5 and 6: the audit key, the bot's SSH key (the test sshd's authorized one), host keys pinned.
    rc, out = await run_line(f"{EAGLE} audit init-key {cfg['audit_key_file']}", cwd=cwd, env=env)
    assert rc == 0, out
    shutil.copy(sshd.client_key, cfg["hosts"]["gpu-01"]["key"])
    for name in ("bastion", "gpu-01"):
        rc, out = await run_line(f"{EAGLE} --config {config} hosts pin {name} --yes", cwd=cwd, env=env)
        assert rc == 0, out
    known = Path(cfg["hosts"]["gpu-01"]["known_hosts"])
    assert stat.S_IMODE(known.stat().st_mode) == 0o600 and "already pinned" in out

    # The unit: its environment as systemd gives it, then ExecStartPre and ExecStart in order.
    for line in env_file.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value.strip('"')
    env.update({k: mapped(v) for k, v in SERVICE_ENV.items()})

    t0 = time.monotonic()
    rc, out = await run_line(mapped(SERVICE["ExecStartPre"][0]), cwd=cwd, env=env)
    assert rc == 0, out
    assert re.search(rf"^WARN  host gpu-02: .*unreachable at 127\.0\.0\.1:{down}", out, re.M), out
    assert "ok    host gpu-01 nvidia-smi" in out and "8 GPU(s)" in out
    assert "ok    host local nvidia-smi: not a GPU host" in out
    assert "host bastion nvidia-smi: not a GPU host" in out
    assert "ok    tokens: SLACK_BOT_TOKEN, SLACK_APP_TOKEN, SLACK_SIGNING_SECRET set" in out
    assert "SLACK_BOT_TOKEN: valid" in out and "xoxb-deploy-test" not in out
    assert re.search(r"^ok    playbooks: \d+ valid", out, re.M)

    # ExecStart: Socket Mode, the tokens read again from --env-file.
    proc = await asyncio.create_subprocess_exec(*shlex.split(mapped(SERVICE["ExecStart"][0])), cwd=cwd,
                                                env={k: v for k, v in env.items() if not k.startswith("SLACK_")},
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
        rc, err = await stop(proc)
    assert rc == 0, err
    assert fake.calls_to("apps.connections.open")[0].headers["Authorization"] == "Bearer xapp-1-deploy-test"

    # The unit's HTTP-mode ExecStart (commented beside it): a signed request is answered.
    [http_line] = [line.lstrip("# ") for line in UNIT.read_text().splitlines()
                   if line.startswith("# ExecStart=") and "--http" in line]
    port = free_port()
    argv = shlex.split(mapped(http_line.partition("=")[2]).replace("--http 3000", f"--http {port}"))
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        body = command_body("status", user="U02BOB", channel="C0123456789", response_url=fake.response_url("h1"))
        async with aiohttp.ClientSession() as s:
            for _ in range(300):
                try:
                    async with s.post(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                                      headers=signed_headers(body)) as r:
                        status, text = r.status, await r.text()
                    break
                except aiohttp.ClientConnectorError:
                    assert proc.returncode is None, "eagle serve --http exited"
                    await asyncio.sleep(0.1)
        assert status == 200
        if "no runs are running" not in text:
            reply = await fake.wait_for(lambda: [c for c in fake.calls_to("response_url")
                                                 if c.args.get("_name") == "h1"])
            assert "no runs are running" in reply[0].all_text()
    finally:
        rc, err = await stop(proc)
    assert rc == 0, err
    print(f"\nsystemd-style start (ExecStartPre doctor --service, one host down + ExecStart serve) "
          f"to serving a command: {serving:.2f} s")


def test_the_unit_raises_the_open_files_limit_above_what_the_http_port_admits():
    """systemd's default soft limit (1,024) is what 1,100 trickling connections exhausted
    (issue 35): the unit sets LimitNOFILE, and the HTTP port's cap stays under any limit."""
    from eaglebot.frontends.service.http_guard import MAX_CONNECTIONS, accept_backlog, connection_cap

    (limit,) = SERVICE["LimitNOFILE"]
    assert int(limit) >= 65536 and connection_cap(int(limit)) == MAX_CONNECTIONS
    for soft in (256, 1024, 4096, int(limit)):
        assert connection_cap(soft) + 2 * accept_backlog(soft) + 64 <= soft
