"""Nothing a step leaves behind outlives its run unnoticed (issue 35, item 2).

The attack reproduced against the landed tree: a step starts a process that sheds everything
the clean-up knew it by (`env -u EAGLE_PROC_TAG setsid sh -c '...' &`) and then writes
`status=OK` into the stdout of every later command it finds by that very tag
(`/proc/PID/fd/1`), forging a later run's recorded output and its `when:` decisions; in
persistent mode it can also read the next command from the shell's stdin. Run through the
real `eagle` CLI on the host `local`, over a real OpenSSH sshd as the non-root user
`eagletest`, and over a real sshd as root, in both shell modes. What holds in each case is in
docs/reliability.md ("What a step can leave behind").
"""
from __future__ import annotations

import json
import os
import shlex
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
# ... and one that steals the next command from a persistent shell's stdin (one of its own
# cgroup's, for the same reason).
READER = ("env -u EAGLE_PROC_TAG setsid sh -c 'echo $$ > {pidfile}; me=$(cat /proc/self/cgroup); while :; do "
          "for d in /proc/[0-9]*; do case \"$(tr \"\\\\0\" \" \" < $d/cmdline 2>/dev/null)\" in "
          "*--norc*) [ \"$(cat $d/cgroup 2>/dev/null)\" = \"$me\" ] && "
          "timeout 1 cat $d/fd/0 >> {stolen} 2>/dev/null;; esac; done; sleep 0.02; done' "
          "</dev/null >/dev/null 2>&1 &")

VICTIM = {"name": "victim", "steps": [
    {"name": "check", "skill": "shell", "register": "out",
     "with": {"command": "sleep 1.5; echo status=FAIL"}},
    {"name": "deploy", "skill": "shell", "when": "'status=OK' in out.stdout",
     "with": {"command": "echo the forged decision ran"}},
    {"name": "fails", "skill": "shell", "continue_on_error": True, "with": {"command": "echo running; exit 5"}},
]}


def _config(tmp_path: Path, mode: str, sshd, root_sshd, plant: str) -> Path:
    pdir = tmp_path / "playbooks"
    pdir.mkdir(exist_ok=True)
    books = {"plant": {"name": "plant", "inputs": {"pidfile": {"type": "str"}, "stolen": {"type": "str"}},
                       # (the step ends once its process runs: the sweep must find it, not race it)
                       "steps": [{"name": "plants", "skill": "shell", "with": {
                           "command": plant + " while [ ! -s {{ pidfile }} ]; do sleep 0.01; done"}}]},
             "victim": VICTIM}
    for name, pb in books.items():
        (pdir / f"{name}.yaml").write_text(yaml.safe_dump(pb, sort_keys=False))
    cfg = {"audit_db": "eagle.db", "playbooks_dir": "playbooks",
           "hosts": {"local": {"transport": "local", "shell": mode},
                     "box": sshd.host_config(shell=mode),
                     "rootbox": root_sshd.host_config(shell=mode)}}
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


def _plant(cfg: Path, host: str, pidfile: Path, stolen: Path) -> tuple[int, dict]:
    res = eagle("run", "plant", "-H", host, "-e", f"pidfile={pidfile}", "-e", f"stolen={stolen}", "--json",
                config=cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    pid = int(pidfile.read_text())
    return pid, json.loads(res.stdout)


@pytest.mark.parametrize("host", ["local", "box", "rootbox"])
def test_a_process_that_sheds_its_tag_and_session_is_stopped_with_its_step(tmp_path, sshd, root_sshd,
                                                                           shell_mode, host, folder):
    d = folder
    cfg = _config(tmp_path, shell_mode, sshd, root_sshd, FORGER.format(pidfile=d / "forger.pid"))
    pid, out = _plant(cfg, host, d / "forger.pid", d / "stolen")
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


@pytest.mark.parametrize("host", ["local", "box", "rootbox"])
def test_a_leftover_cannot_read_the_next_runs_commands_from_a_persistent_shell(tmp_path, sshd, root_sshd, host,
                                                                               folder):
    d = folder
    stolen = d / "stolen"
    cfg = _config(tmp_path, "persistent", sshd, root_sshd, READER.format(pidfile=d / "reader.pid", stolen=stolen))
    pid, _ = _plant(cfg, host, d / "reader.pid", stolen)
    assert not pid_alive(pid)
    res = eagle("run", "victim", "-H", host, "--json", config=cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    steps = {s["name"]: s for s in json.loads(res.stdout)["steps"]}
    assert steps["fails"]["status"] == "failed" and "exit status 5" in steps["fails"]["summary"]
    assert not stolen.exists() or stolen.read_bytes() == b""


def test_a_process_no_step_started_cannot_reach_a_persistent_shells_descriptors(tmp_path, sshd, root_sshd, folder):
    """A process of the SSH user that was running before the run (a login, a cron job) is no
    step's leftover: the sweep leaves it alone. It still cannot read the persistent shell's
    stdin nor write into its stdout: the shell runs from an unreadable copy, so the kernel
    keeps its /proc/PID/fd closed to the user's other processes."""
    d = folder
    probe, shell_pid = d / "probe", d / "shell.pid"
    # Started over its own SSH session, before the run: waits for the run's shell and tries both ways.
    script = (f"while [ ! -s {shell_pid} ]; do sleep 0.02; done; p=$(cat {shell_pid}); "
              f"r=$(timeout 1 cat /proc/$p/fd/0 2>&1 >/dev/null); "
              f"w=$( (echo forged > /proc/$p/fd/1) 2>&1); echo \"$r|$w\" > {probe}")
    watcher = subprocess.Popen([*sshd.ssh_argv(), f"sh -c {shlex.quote(script)}"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pdir = tmp_path / "playbooks"
        pdir.mkdir()
        (pdir / "watched.yaml").write_text(yaml.safe_dump({"name": "watched", "steps": [
            {"skill": "shell", "with": {"command": f"echo $PPID > {shell_pid}; sleep 0.2; "
                                                   f"while [ ! -s {probe} ]; do sleep 0.02; done; echo own"}},
            {"skill": "shell", "continue_on_error": True, "with": {"command": "echo running; exit 5"}}]}))
        cfg = tmp_path / "eagle.yaml"
        cfg.write_text(yaml.safe_dump({"audit_db": "eagle.db", "playbooks_dir": "playbooks",
                                       "hosts": {"box": sshd.host_config(shell="persistent")}}))
        res = eagle("run", "watched", "-H", "box", "--json", config=cfg)
        assert res.returncode == 0, res.stdout + res.stderr
        read, write = probe.read_text().strip().split("|")
        assert "Permission denied" in read and "Permission denied" in write, (read, write)
        steps = json.loads(res.stdout)["steps"]
        assert steps[1]["status"] == "failed" and "exit status 5" in steps[1]["summary"]
        assert watcher.wait(30) == 0
    finally:
        if watcher.poll() is None:
            watcher.kill()


def test_the_shell_the_local_transport_opens_is_closed_to_the_users_other_processes(tmp_path):
    """The same opening script on the host `local`, run as a non-root user (the bot's user in
    production; the tests' bot is root, whom nothing is closed to)."""
    from eaglebot.transport.shell import OPEN_SHELL

    shell = subprocess.Popen(["runuser", "-u", "eagletest", "--", "/bin/sh", "-c", OPEN_SHELL],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/tmp")
    try:
        assert shell.stdin is not None and shell.stdout is not None
        shell.stdin.write(b'echo "$$"\n')
        shell.stdin.flush()
        pid = int(shell.stdout.readline())
        other = subprocess.run(["runuser", "-u", "eagletest", "--", "ls", f"/proc/{pid}/fd"],
                               capture_output=True, text=True, timeout=30)
        assert other.returncode != 0 and "Permission denied" in other.stderr
    finally:
        shell.kill()
        shell.wait()


@pytest.mark.parametrize("host", ["local", "box"])
def test_what_a_crashed_run_left_hidden_is_stopped_by_the_next_run(tmp_path, sshd, root_sshd, shell_mode, host,
                                                                  folder):
    """`eagle` SIGKILLed while the step that hid a process still runs: nothing stops it then;
    the next run on the host finds it by the step's recorded start and stops it first."""
    import sys

    d = folder
    pidfile = d / "hidden.pid"
    cfg = _config(tmp_path, shell_mode, sshd, root_sshd, "true")
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
