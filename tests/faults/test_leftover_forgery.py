"""Nothing a step leaves behind outlives its run unnoticed (issue 35, item 2).

The attack reproduced against the landed tree: a step starts a process that sheds everything
the clean-up knew it by (`env -u EAGLE_PROC_TAG setsid sh -c '...' &`) and then writes
`status=OK` into the stdout of every later command it finds by that very tag
(`/proc/PID/fd/1`), forging a later run's recorded output and its `when:` decisions. Run
through the real `eagle` CLI on the host `local`, over a real OpenSSH sshd as the non-root
user `eagletest`, and over a real sshd as root. What holds in each case is in
docs/reliability.md ("What a step can leave behind").

Issue 46, item 1: the same attacker printing a forged start announcement first (it made the
sweep's start negative: the leftover was never looked for), and a fork-hopper (fork and exit
every 2 ms: never in the snapshot the kill worked from).
"""
from __future__ import annotations

import contextlib
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

from support.helpers import eagle, pid_alive, wait_for

from eaglebot.config import HostConfig
from eaglebot.transport import LocalTransport, SSHTransport
from eaglebot.transport.base import CURRENT, StepProcs

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


# The attack, as written: announce a made-up process group and a start of -1 on
# stderr, then leave an injector that answers for every later command of this bot.
INJECT = ("t=${EAGLE_PROC_TAG%%-*}; echo $$ > {pidfile}; while :; do for f in /proc/[0-9]*/environ; do "
          "if grep -q \"EAGLE_PROC_TAG=$t-\" \"$f\" 2>/dev/null; then p=${f#/proc/}; p=${p%/environ}; "
          "echo 'INJECTED-BY-OTHER-RUN status=OK' > /proc/$p/fd/1 2>/dev/null; fi; done; sleep 0.02; done\n")
FORGED_ANNOUNCE = "printf '\\036EAGLE-PGID 999999 -1\\n' >&2; env -u EAGLE_PROC_TAG setsid sh {script} </dev/null >/dev/null 2>&1 &"


@pytest.mark.parametrize("host", [pytest.param("local", marks=pytest.mark.e2e), "box"])  # local never read one
def test_a_forged_start_announcement_does_not_hide_a_leftover(tmp_path, sshd, root_sshd, host, folder):
    d = folder
    script = d / "inject.sh"
    script.write_text(INJECT.replace("{pidfile}", str(d / "injector.pid")))
    os.chmod(script, 0o644)
    cfg = _config(tmp_path, sshd, root_sshd, FORGED_ANNOUNCE.format(script=script))
    pid, out = _plant(cfg, host, d / "injector.pid")
    assert not pid_alive(pid), f"the injector {pid} outlived its step"
    assert any("stopped at the end of the step" in w for w in out["warnings"]), out["warnings"]
    conn = sqlite3.connect(tmp_path / "eagle.db")
    rows = conn.execute("select state, note from remote_procs where run_id = ?", [out["run_id"]]).fetchall()
    outputs = None
    res = eagle("run", "victim", "-H", host, "--json", config=cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    outputs = dict(conn.execute("select name, output from steps where run_id = ?", [out["run_id"] + 1]).fetchall())
    conn.close()
    assert rows and rows[0][0] == "stopped" and "stopped at the end of the step" in rows[0][1], rows
    steps = {s["name"]: s for s in json.loads(res.stdout)["steps"]}
    assert steps["deploy"]["status"] == "skipped"
    assert outputs["check"] == "status=FAIL\n", outputs


# Fork and exit every 2 ms, ignoring SIGTERM, in a session of its own: no snapshot of /proc
# holds its live generation for long. Its generations keep the session, so the test can ask
# the kernel whether any is left (kill(-sid, 0)) without a scan of its own.
HOPPER = """import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
while True:
    t = time.monotonic() + 0.002
    while time.monotonic() < t:
        pass
    if os.fork():
        os._exit(0)
"""


@pytest.fixture(params=["local", "ssh"])
async def transport(request, sshd):
    t = LocalTransport("local") if request.param == "local" else SSHTransport("box", HostConfig(**sshd.host_config()))
    yield t
    await t.close()


async def test_a_fork_hopper_is_frozen_then_killed(transport, folder):
    d = folder
    (d / "hop.py").write_text(HOPPER)
    os.chmod(d / "hop.py", 0o644)
    sid_file = d / "hopper.sid"
    sp = StepProcs(tag=f"t-{os.urandom(4).hex()}")
    token = CURRENT.set(sp)
    try:
        res = await transport.run(f"env -u EAGLE_PROC_TAG setsid python3 {d}/hop.py {sid_file} "
                                  f"</dev/null >/dev/null 2>&1 & while [ ! -s {sid_file} ]; do sleep 0.01; done")
        assert res.ok, res.stderr
        sid = int(sid_file.read_text())
        os.killpg(sid, 0)   # hopping
        found, note = await transport.leftovers(sp)
    finally:
        CURRENT.reset(token)
    # Stop whatever of its session still lives (one signal to the group: a generation forking
    # meanwhile is stopped with it), then look: zombies (the init here reaps late) hold nothing.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sid, signal.SIGSTOP)
    alive = [p for p in os.listdir("/proc") if p.isdigit() and _session(int(p)) == sid]
    if alive:
        os.killpg(sid, signal.SIGKILL)
    assert not alive, f"the fork-hopper of session {sid} outlived the sweep ({note})"
    assert found >= 1 and "stopped at the end of the step" in note, note


def _session(pid: int) -> int | None:
    """The session of a live process; None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in "ZX" else int(fields[3])
