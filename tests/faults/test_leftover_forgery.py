"""Nothing a step leaves behind outlives its run unnoticed (issue 35, item 2).

The attack reproduced against the landed tree: a step starts a process that sheds everything
the clean-up knew it by (`env -u EAGLE_PROC_TAG setsid sh -c '...' &`) and then writes
`status=OK` into the stdout of every later command it finds by that very tag
(`/proc/PID/fd/1`), forging a later run's recorded output and its `when:` decisions. Run
through the real `eagle` CLI on the host `local`, over a real OpenSSH sshd as the non-root
user `eagletest`, and over a real sshd as root. What holds in each case is in
docs/reliability.md ("What a step can leave behind").
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from helpers import eagle, pid_alive, wait_for

# The attacker: sheds the tag and the session, then answers for every process carrying
# the tag of its own bot (its database's id: the tests' workers run other bots on the same user).
FORGER = ("t=${{EAGLE_PROC_TAG%%-*}}; env -u EAGLE_PROC_TAG t=$t setsid sh -c 'echo $$ > {pidfile}; while :; do "
          "for f in /proc/[0-9]*/environ; do if grep -q \"EAGLE_PROC_TAG=$t-\" \"$f\" 2>/dev/null; then "
          "p=${{f#/proc/}}; p=${{p%/environ}}; echo status=OK > /proc/$p/fd/1 2>/dev/null; fi; done; "
          "sleep 0.02; done' </dev/null >/dev/null 2>&1 &")
VICTIM = {"name": "victim", "steps": [
    {"name": "check", "skill": "shell", "register": "out",
     "with": {"command": "sleep 1.5; echo status=FAIL"}},
    {"name": "deploy", "skill": "shell", "when": "'status=OK' in out.stdout",
     "with": {"command": "echo the forged decision ran"}},
    {"name": "fails", "skill": "shell", "continue_on_error": True, "with": {"command": "echo running; exit 5"}},
]}


def _config(tmp_path: Path, sshd, root_sshd, plant: str) -> Path:
    pdir = tmp_path / "playbooks"
    pdir.mkdir(exist_ok=True)
    books = {"plant": {"name": "plant", "inputs": {"pidfile": {"type": "str"}},
                       # (the step ends once its process runs: the sweep must find it, not race it)
                       "steps": [{"name": "plants", "skill": "shell", "with": {
                           "command": plant + " while [ ! -s {{ pidfile }} ]; do sleep 0.01; done"}}]},
             "victim": VICTIM}
    for name, pb in books.items():
        (pdir / f"{name}.yaml").write_text(yaml.safe_dump(pb, sort_keys=False))
    cfg = {"audit_db": "eagle.db", "playbooks_dir": "playbooks",
           "hosts": {"local": {"transport": "local"},
                     "box": sshd.host_config(),
                     "rootbox": root_sshd.host_config()}}
    path = tmp_path / "eagle.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def folder():
    """A folder the host's user writes (the SSH test user is not root). Afterwards whatever
    pid a planted process wrote there is killed, should it still live (a failing build)."""
    d = Path("/tmp") / f"eagle-leftover-{os.getpid()}-{os.urandom(3).hex()}"
    d.mkdir()
    os.chmod(d, 0o777)
    yield d
    for f in d.glob("*.pid"):
        try:
            os.kill(int(f.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    shutil.rmtree(d, ignore_errors=True)


def _plant(cfg: Path, host: str, pidfile: Path) -> tuple[int, dict]:
    res = eagle("run", "plant", "-H", host, "-e", f"pidfile={pidfile}", "--json",
                config=cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    pid = int(pidfile.read_text())
    return pid, json.loads(res.stdout)


@pytest.mark.parametrize("host", ["local", "box", pytest.param("rootbox", marks=pytest.mark.e2e)])
def test_a_process_that_sheds_its_tag_and_session_is_stopped_with_its_step(tmp_path, sshd, root_sshd,
                                                                           host, folder):
    d = folder
    cfg = _config(tmp_path, sshd, root_sshd, FORGER.format(pidfile=d / "forger.pid"))
    pid, out = _plant(cfg, host, d / "forger.pid")
    # Stopped before the run ended (the kill waits until none is left), and said so.
    assert not pid_alive(pid), f"the forger {pid} outlived its step"
    assert any("left" in w and "stopped at the end of the step" in w for w in out["warnings"]), out["warnings"]
    res = eagle("run", "victim", "-H", host, "--json", config=cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    steps = {s["name"]: s for s in json.loads(res.stdout)["steps"]}
    assert steps["deploy"]["status"] == "skipped"   # the `when:` decision is the command's own
    assert steps["fails"]["status"] == "failed" and "exit status 5" in steps["fails"]["summary"]
    shown = eagle("show", str(out["run_id"] + 1), "--json", config=cfg)
    check = next(s for s in json.loads(shown.stdout)["steps"] if s["name"] == "check")
    assert "status=FAIL" in check["summary"] and "status=OK" not in check["summary"]
    conn = sqlite3.connect(tmp_path / "eagle.db")
    outputs = dict(conn.execute("select name, output from steps where run_id = ?", [out["run_id"] + 1]).fetchall())
    conn.close()
    assert outputs["check"] == "status=FAIL\n" and outputs["fails"] == "running\n", outputs


@pytest.mark.parametrize("host", [pytest.param("local", marks=pytest.mark.e2e), "box"])
def test_what_a_crashed_run_left_hidden_is_stopped_by_the_next_run(tmp_path, sshd, root_sshd, host, folder):
    """`eagle` SIGKILLed while the step that hid a process still runs: nothing stops it then;
    the next run on the host finds it by the step's recorded start and stops it first."""
    import sys

    d = folder
    pidfile = d / "hidden.pid"
    cfg = _config(tmp_path, sshd, root_sshd, "true")
    (tmp_path / "playbooks" / "crash.yaml").write_text(yaml.safe_dump({"name": "crash", "steps": [
        {"skill": "shell", "with": {"command": FORGER.format(pidfile=pidfile)
                                    + f" while [ ! -s {pidfile} ]; do sleep 0.01; done; sleep 300"}}]}))
    env = {k: v for k, v in os.environ.items() if k != "EAGLE_CONFIG"}
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "run", "crash", "-H", host, "--config", str(cfg)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 60, what="the hidden process"))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert pid_alive(pid)   # nothing stopped it: its run is gone
    res = eagle("run", "victim", "-H", host, "--json", config=cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not pid_alive(pid)
    out = json.loads(res.stdout)
    assert any(f"run #1 had left processes on {host}: " in w for w in out["warnings"]), out["warnings"]
    steps = {s["name"]: s for s in out["steps"]}
    assert steps["deploy"]["status"] == "skipped"
