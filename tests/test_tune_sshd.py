"""`eagle tune ... --apply` over a real OpenSSH sshd (SIMULATED GPU and SGLang on the far side, the
default `state_dir`): the tuning runs, then waits on the terminal for an approval, and only after
a yes relaunches with the chosen flags; a no changes nothing. Both leave their approval row."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading

import pytest
import yaml
from support.helpers import eagle, eagle_json
from test_server_skills import PY, Host

FAST = json.dumps({"EAGLE_SIM_LOAD_S": "0.05", "EAGLE_SIM_WARMUP_S": "0.05"})
TUNE = ["tune", "relaunch", "-H", "gpu-01", "--batch-sizes", "1,8", "--steps", "2-4", "--topk", "1",
        "--repeats", "1", "--prompts", "4", "--output-len", "16", "-e", f"env={FAST}", "--apply"]


@pytest.fixture
def remote(sshd, remote_dir, tmp_path):
    from support.sshd import chown_to

    h = Host(remote_dir, sshd.bin_dir, PY, ssh=sshd.host_config())
    chown_to(remote_dir)
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"hosts": {"gpu-01": h.config}}))
    yield h, cfg
    eagle("run", "stop", "-H", "gpu-01", "--yes", config=cfg, timeout=120)
    h.stop()


def _tune_on_a_terminal(cfg, answer: str, db) -> tuple[int, str, str, int]:
    """Run `eagle tune --apply` with a terminal on stdin; answer the question once it is asked.
    Returns (exit code, stdout, stderr, relaunch runs that existed while it waited)."""
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "--config", str(cfg), *TUNE], stdin=slave,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cfg.parent)
    err: list[str] = []
    asked = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        buf = ""
        while ch := proc.stderr.read(1):
            buf += ch
            if buf.endswith("approve? [y/N] "):
                asked.set()
        err.append(buf)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    try:
        assert asked.wait(600), "eagle tune never asked for the approval"
        waiting = db.execute("select count(*) from runs where playbook = 'relaunch'").fetchone()[0]
        os.write(master, answer.encode() + b"\n")
        out, _ = proc.communicate(timeout=600)
    finally:
        os.close(master)
        os.close(slave)
    t.join(30)
    return proc.returncode, out, "".join(err), waiting


@pytest.mark.e2e  # a tune and its apply over a real sshd
def test_apply_waits_for_the_approval_then_relaunches_with_the_choice(remote, tmp_path):
    h, cfg = remote
    db_path = cfg.parent / "eagle.db"
    rc, out, err, waiting = _tune_on_a_terminal(cfg, "y", _Later(db_path))
    assert rc == 0, err[-3000:]
    assert "step 'apply' wants to relaunch gpu-01 with steps=" in err
    db = sqlite3.connect(db_path)
    tune_run, = db.execute("select id from runs where playbook = 'tune'").fetchone()
    launches = db.execute("select count(*) from runs where playbook = 'relaunch'").fetchone()[0]
    assert launches == waiting + 1           # nothing was relaunched while it waited; one relaunch after the yes
    status, who = db.execute("select status, decided_by from approvals where run_id = ?", [tune_run]).fetchone()
    assert status == "approved" and who
    res, shown = eagle_json("show", str(tune_run), config=cfg)
    choose = next(s for s in shown["steps"] if s["skill"] == "tune.choose")
    apply = next(s for s in shown["steps"] if s["skill"] == "tune.apply")
    assert apply["status"] == "changed" and "approved by" in apply["summary"]
    chosen = choose["summary"].split(":")[1].strip()             # "static: steps=N topk=1 draft=M: ..."
    last, = db.execute("select id, inputs from runs where playbook = 'relaunch' order by id desc limit 1").fetchall()
    inputs = json.loads(last[1])
    assert f"steps={inputs['spec_steps']} topk={inputs['spec_topk']} draft={inputs['spec_draft_tokens']}" == chosen
    res, relaunch = eagle_json("show", str(last[0]), config=cfg)
    launch = next(s for s in relaunch["steps"] if s["name"] == "launch SGLang")
    assert launch["status"] == "changed" and (
        f"steps={inputs['spec_steps']} topk=1 draft_tokens={inputs['spec_draft_tokens']}" in launch["summary"])
    assert "applied (approved by" in out
    cells = [s for s in shown["steps"] if s["skill"] == "tune.cell"]
    assert len(cells) == 3 and all("(runs #" in s["summary"] for s in cells)


def test_a_no_changes_nothing_and_is_recorded(remote):
    h, cfg = remote
    db_path = cfg.parent / "eagle.db"
    rc, out, err, waiting = _tune_on_a_terminal(cfg, "n", _Later(db_path))
    assert rc == 1 and "not applied: not approved" in out, err[-2000:]
    db = sqlite3.connect(db_path)
    assert db.execute("select count(*) from runs where playbook = 'relaunch'").fetchone()[0] == waiting
    tune_run, status = db.execute("select id, status from runs where playbook = 'tune'").fetchone()
    assert status == "failed"
    assert db.execute("select status from approvals where run_id = ?", [tune_run]).fetchone()[0] == "denied"


class _Later:
    """The audit DB, opened when first read (the tuning made it before it asked)."""

    def __init__(self, path):
        self.path = path

    def execute(self, *a):
        return sqlite3.connect(self.path).execute(*a)
