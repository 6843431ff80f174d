"""A lock-free run's command never runs beside a step that runs a playbook's code on the same
login (issue 46, item 1c). The attack: a run holds the host with a `shell` step whose live
child writes `INJECTED-BY-OTHER-RUN` into every command of the bot it finds (`/proc/PID/fd/1`),
while `eagle logs` (the lock-free `server-logs`) reads the server log there. Over a real
OpenSSH sshd, through the real CLI: `eagle logs` waits until that step has ended (and its
child was stopped with it), says so, and its recorded output is the log's.
"""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.helpers import pid_folder, wait_for

INJECT = ("t=${EAGLE_PROC_TAG%%-*}; echo $$ > {pidfile}; while :; do "
          "for f in $(grep -lz \"EAGLE_PROC_TAG=$t-\" /proc/[0-9]*/environ 2>/dev/null); do "
          "p=${f#/proc/}; p=${p%/environ}; echo INJECTED-BY-OTHER-RUN > /proc/$p/fd/1 2>/dev/null; done; done\n")


@pytest.fixture
def folder():
    yield from pid_folder("lockfree")


def _eagle(cfg: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "EAGLE_CONFIG"}
    return subprocess.Popen([sys.executable, "-m", "eaglebot", *args, "--config", str(cfg)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_eagle_logs_waits_for_a_step_whose_child_writes_into_other_commands(tmp_path, sshd, folder):
    (folder / "inject.sh").write_text(INJECT.replace("{pidfile}", str(folder / "injector.pid")))
    (folder / "server.log").write_text("line one\nline two\n")
    for f in ("inject.sh", "server.log"):
        os.chmod(folder / f, 0o644)
    release = folder / "release"
    pdir = tmp_path / "playbooks"
    pdir.mkdir()
    (pdir / "attack.yaml").write_text(yaml.safe_dump({"name": "attack", "steps": [{"name": "holds", "skill": "shell", "with": {
        "command": f"sh {folder}/inject.sh </dev/null >/dev/null 2>&1 & while [ ! -e {release} ]; do sleep 0.02; done"}}]}))
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": "eagle.db", "playbooks_dir": "playbooks",
                                   "hosts": {"box": sshd.host_config(vars={"server_log": str(folder / "server.log")})}}))
    attack = _eagle(cfg, "run", "attack", "-H", "box")
    try:
        wait_for(lambda: (folder / "injector.pid").exists() and (folder / "injector.pid").read_text().strip(), 60,
                 what="the attacker's child")
        logs = _eagle(cfg, "logs", "box")
        db = tmp_path / "eagle.db"

        def waiting() -> bool:
            conn = sqlite3.connect(db)
            try:
                row = conn.execute("select output from steps where run_id = 2").fetchone()
            finally:
                conn.close()
            return bool(row and "waiting until step `holds` of run #1 (shell) ends on box" in (row[0] or ""))

        wait_for(lambda: waiting() or logs.poll() is not None, 60, what="eagle logs to wait or end")
        assert waiting(), "eagle logs ran beside the attacker's step"
        release.touch()
        assert attack.wait(60) == 0, attack.stderr.read() if attack.stderr else ""
        out, err = logs.communicate(timeout=60)
    finally:
        release.touch()
        for p in (attack,):
            if p.poll() is None:
                p.kill()
    assert logs.returncode == 0, out + err
    assert "INJECTED" not in out and "line one\nline two\n" in out, out
    conn = sqlite3.connect(tmp_path / "eagle.db")
    status, output = conn.execute("select status, output from steps where run_id = 2").fetchone()
    conn.close()
    assert status == "ok" and "INJECTED" not in output and output.endswith("line one\nline two\n"), (status, output)
