"""A step that writes what sshd or the login shell runs before every later command (issue 46,
item 1d): `~/.ssh/rc` starting an injector that writes `status=OK` into every later command of
the bot, and a line appended to `~/.bashrc`. Over a real OpenSSH sshd, as a user of this test
alone (its home is what the attack changes: the shared test user's would reach other tests).
The step fails, an `events` row says what it changed, the changed files are moved aside (an
existing one put back byte for byte), the injector the end-of-step session itself started
is stopped, and the next run's output is its own.
"""
from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
from pathlib import Path

import pytest
import yaml

from support.helpers import eagle, pid_alive, pid_folder
from support.sshd import start_sshd

USER = "eaglerc"
INJECT = ("t=${EAGLE_PROC_TAG%%-*}; echo $$ >> {pids}; while :; do for f in /proc/[0-9]*/environ; do "
          "if grep -q \"EAGLE_PROC_TAG=$t-\" \"$f\" 2>/dev/null; then p=${f#/proc/}; p=${p%/environ}; "
          "echo 'INJECTED-BY-OTHER-RUN status=OK' > /proc/$p/fd/1 2>/dev/null; fi; done; sleep 0.02; done\n")
BASHRC = b"# the user's own\nexport EDITOR=vi\n"


@pytest.fixture(scope="module")
def rc_sshd():
    server = start_sshd(Path("/tmp") / f"eagle-rc-sshd-{os.getpid()}", user=USER)
    yield server
    server.stop()


@pytest.fixture
def home(rc_sshd):
    pw = pwd.getpwnam(USER)
    h = Path(pw.pw_dir)
    for rel in (".ssh", ".bashrc", ".bashrc.eagle-refused"):
        p = h / rel
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    (h / ".bashrc").write_bytes(BASHRC)
    os.chown(h / ".bashrc", pw.pw_uid, pw.pw_gid)
    yield h


@pytest.fixture
def folder():
    yield from pid_folder("rc")


def test_a_step_that_writes_the_logins_startup_files_is_refused(tmp_path, rc_sshd, home, folder):
    script = folder / "inject.sh"
    script.write_text(INJECT.replace("{pids}", str(folder / "injector.pids")))
    os.chmod(script, 0o644)
    plant = (f"mkdir -p ~/.ssh && printf 'setsid sh {script} </dev/null >/dev/null 2>&1 &\\n' > ~/.ssh/rc && "
             "echo 'export PS9=injected' >> ~/.bashrc")
    pdir = tmp_path / "playbooks"
    pdir.mkdir()
    (pdir / "plant.yaml").write_text(yaml.safe_dump({"name": "plant", "steps": [
        {"name": "writes rc", "skill": "shell", "with": {"command": plant}}]}))
    (pdir / "victim.yaml").write_text(yaml.safe_dump({"name": "victim", "steps": [
        {"name": "check", "skill": "shell", "register": "out", "with": {"command": "sleep 1; echo status=FAIL"}},
        {"name": "deploy", "skill": "shell", "when": "'status=OK' in out.stdout", "with": {"command": "echo deployed"}}]}))
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": "eagle.db", "playbooks_dir": "playbooks",
                                   "hosts": {"box": rc_sshd.host_config()}}))

    res = eagle("run", "plant", "-H", "box", "--json", config=cfg)
    assert res.returncode == 1, res.stdout + res.stderr
    step = json.loads(res.stdout)["steps"][0]
    assert step["status"] == "failed" and "it changed ~/.ssh/rc, ~/.bashrc" in step["summary"], step
    assert "put back as it was: ~/.bashrc" in step["summary"], step
    assert not (home / ".ssh" / "rc").exists() and (home / ".ssh" / "rc.eagle-refused").exists()
    assert (home / ".bashrc").read_bytes() == BASHRC
    # The end-of-step session itself ran the planted rc: what it started was stopped with the step.
    started = [int(p) for p in (folder / "injector.pids").read_text().split()]
    assert started and not any(pid_alive(p) for p in started), started
    conn = sqlite3.connect(tmp_path / "eagle.db")
    events = conn.execute("select run_id, message from events where kind = 'login_files_changed'").fetchall()
    assert events and events[0][0] == 1 and "~/.ssh/rc" in events[0][1], events

    res = eagle("run", "victim", "-H", "box", "--json", config=cfg)
    assert res.returncode == 0, res.stdout + res.stderr
    outputs = dict(conn.execute("select name, output from steps where run_id = 2").fetchall())
    conn.close()
    assert outputs["check"] == "status=FAIL\n", outputs
    assert {s["name"]: s["status"] for s in json.loads(res.stdout)["steps"]}["deploy"] == "skipped"
