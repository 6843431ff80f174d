"""Issue 46 item 4: an interrupted `eagle tune` puts back the config it found running. A real
`eagle` process over the real loopback sshd (SIMULATED GPU and SGLang on the far side) is sent
SIGTERM (a service restart) or SIGINT (Ctrl-C) while the server runs one of its experimental
cells; it relaunches the config found running, records the restore, ends `cancelled`, exits
128 + the signal."""
from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import yaml
from support.helpers import eagle
from test_server_skills import PY, Host

FAST = json.dumps({"EAGLE_SIM_LOAD_S": "0.05", "EAGLE_SIM_WARMUP_S": "0.05"})
FOUND = {"spec_steps": 3, "spec_topk": 1, "spec_draft_tokens": 4}       # the config the tuning finds running
TUNE = ["tune", "relaunch", "-H", "gpu-01", "--batch-sizes", "1", "--steps", "5-7", "--topk", "1",
        "--repeats", "1", "--prompts", "4", "--output-len", "16", "-e", f"env={FAST}"]
# The next run that changes the host after a SIGKILL: a small benchmark.
BENCH = ["run", "bench", "-H", "gpu-01", "-e", "num_prompts=2", "-e", "output_len=8", "-e", "input_len=32", "--json"]


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


def _finished_by_the_next_run(cfg, db_path, playbook: str) -> tuple[sqlite3.Connection, int, list[str], dict]:
    """After a SIGKILL, the next run that changes the host (a small bench): the killed run of
    `playbook` is `interrupted`; returns the store, its id, what the bench's warnings say of it, and
    the bench's JSON."""
    doc = json.loads(eagle(*BENCH, config=cfg, timeout=300).stdout)
    db = sqlite3.connect(db_path)
    run_id, status = db.execute("select id, status from runs where playbook = ?", [playbook]).fetchone()
    assert status == "interrupted"
    said = [w for w in json.dumps(doc.get("warnings")).split('"') if f"{playbook} run #{run_id}" in w]
    return db, run_id, said, doc


def _experimental_launch(db_path, proc: subprocess.Popen) -> int:
    """Wait (on the audit store, bounded) until the tuning's first cell is up: a relaunch of its own
    that succeeded. Returns that run's id."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if db_path.exists():
            row = sqlite3.connect(db_path).execute(
                "select c.id from runs c join runs t on c.parent_run_id = t.id where t.playbook = 'tune' and "
                "c.playbook = 'relaunch' and c.status = 'succeeded' order by c.id limit 1").fetchone()
            if row:
                return int(row[0])
        time.sleep(0.2)      # polling the store for the event, not a timed assertion
    raise AssertionError(f"the tuning never launched a cell (rc {proc.poll()})")


@pytest.mark.parametrize("sig", [signal.SIGTERM,
                                 pytest.param(signal.SIGINT, marks=pytest.mark.e2e)],   # the same path, ~15 s more
                         ids=["SIGTERM", "SIGINT"])
def test_an_interrupted_tune_relaunches_the_config_it_found_running(remote, sig):
    h, cfg = remote
    db_path = cfg.parent / "eagle.db"
    found = [a for k, v in FOUND.items() for a in ("-e", f"{k}={v}")]
    assert eagle("run", "relaunch", "-H", "gpu-01", *found, "-e", f"env={FAST}", "-e", "bench_prompts=0", "--yes",
                 config=cfg, timeout=300).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "--config", str(cfg), *TUNE], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cfg.parent)
    try:
        cell_run = _experimental_launch(db_path, proc)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig.value, err[-3000:]
    assert f"{sig.name}: stopping the tuning and relaunching the config found running" in err
    db = sqlite3.connect(db_path)
    tune_id, status, error = db.execute("select id, status, error from runs where playbook = 'tune'").fetchone()
    assert status == "cancelled" and error == "interrupted: the config found running was relaunched"
    restore, = db.execute("select status, summary, data from steps where run_id = ? and skill = 'tune.restore'",
                          [tune_id]).fetchall()
    assert restore[0] == "changed" and "relaunched the config found running, steps=3 topk=1 draft=4" in restore[1]
    last_id, inputs = db.execute("select id, inputs from runs where playbook = 'relaunch' and status = 'succeeded' "
                                 "order by id desc limit 1").fetchone()
    assert last_id > cell_run and json.loads(restore[2])["run_id"] == last_id
    assert {k: int(json.loads(inputs)[k]) for k in FOUND} == FOUND       # the server runs what it ran before
    launch, = db.execute("select summary from steps where run_id = ? and name = 'launch SGLang'", [last_id]).fetchone()
    assert "steps=3 topk=1 draft_tokens=4" in launch


def _step_done(db_path, proc: subprocess.Popen, name: str) -> None:
    """Wait (on the audit store, bounded) until the draft-repair's step `name` has ended changed."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if db_path.exists() and sqlite3.connect(db_path).execute(
                "select 1 from steps where name = ? and status = 'changed'", [name]).fetchone():
            return
        time.sleep(0.2)      # polling the store for the event, not a timed assertion
    raise AssertionError(f"step {name!r} never ended changed (rc {proc.poll()})")


@pytest.mark.e2e  # the always-steps' path; the SIGKILL test below covers the repair in the default run
def test_a_draft_repair_sigtermed_mid_attempt_restores_the_config_and_the_server(remote):
    """SIGTERM while the server runs attempt 1's capture list: the always-steps put the draft's
    config back byte for byte and relaunch the server on it."""
    h, cfg = remote
    db_path = cfg.parent / "eagle.db"
    draft_cfg = h.draft / "config.json"
    doc = json.loads(draft_cfg.read_text())
    doc["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [-1, 2, 30]     # a wrong capture list to repair
    draft_cfg.write_text(json.dumps(doc, indent=2))
    original = draft_cfg.read_bytes()
    found = [a for k, v in FOUND.items() for a in ("-e", f"{k}={v}")]
    assert eagle("run", "relaunch", "-H", "gpu-01", *found, "-e", f"env={FAST}", "-e", "bench_prompts=0", "--yes",
                 config=cfg, timeout=300).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "--config", str(cfg), "run", "draft-repair", "-H",
                             "gpu-01", "--yes", "-e", "draft_train_layers=2,30,58", "-e", f"env={FAST}"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cfg.parent)
    try:
        _step_done(db_path, proc, "attempt 1: launch")
        assert draft_cfg.read_bytes() != original                     # the server runs an attempt's list
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, err[-3000:]
    db = sqlite3.connect(db_path)
    run_id, status = db.execute("select id, status from runs where playbook = 'draft-repair'").fetchone()
    assert status == "cancelled", err[-3000:]
    steps = {n: (i, s) for i, n, s in db.execute("select id, name, status from steps where run_id = ?", [run_id])}
    assert draft_cfg.read_bytes() == original
    assert steps["restore the draft's config if the run stopped early"][1] == "changed"
    revert = steps["restore the draft's config if the run stopped early"]
    launch = steps["restore: launch on the restored config"]
    assert launch[1] == "changed" and revert[0] < launch[0]          # relaunched after the config was put back
    assert "choose the best" not in steps or steps["choose the best"][1] == "skipped"


@pytest.mark.e2e  # ~16 s; the same finishing path as the SIGKILLed draft-repair below, in the default run
def test_a_sigkilled_tune_is_finished_by_the_next_run_on_its_host(remote):
    """SIGKILL can run no cleanup: the next run that changes the host (here a benchmark) first
    relaunches the config the tuning found running, as a `restore` step of the tuning, and says so."""
    h, cfg = remote
    db_path = cfg.parent / "eagle.db"
    found = [a for k, v in FOUND.items() for a in ("-e", f"{k}={v}")]
    assert eagle("run", "relaunch", "-H", "gpu-01", *found, "-e", f"env={FAST}", "-e", "bench_prompts=0", "--yes",
                 config=cfg, timeout=300).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "--config", str(cfg), *TUNE], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cfg.parent)
    try:
        cell_run = _experimental_launch(db_path, proc)
    finally:
        proc.kill()
        proc.wait(60)
    db, tune_id, said, doc = _finished_by_the_next_run(cfg, db_path, "tune")
    assert said and "the config it found running (steps=3 topk=1 draft=4) was relaunched first" in said[0], doc
    restore, = db.execute("select status, data from steps where run_id = ? and skill = 'tune.restore'",
                          [tune_id]).fetchall()
    assert restore[0] == "changed"
    relaunch = json.loads(restore[1])["run_id"]
    parent, inputs, rstatus = db.execute("select parent_run_id, inputs, status from runs where id = ?",
                                         [relaunch]).fetchone()
    assert parent == tune_id and rstatus == "succeeded" and relaunch > cell_run and relaunch < doc["run_id"]
    assert {k: int(json.loads(inputs)[k]) for k in FOUND} == FOUND
    again = eagle(*BENCH, config=cfg, timeout=300)
    assert f"tune run #{tune_id}" not in again.stdout                 # finished once


def test_a_sigkilled_draft_repair_is_finished_by_the_next_run_on_its_host(remote):
    """SIGKILL mid-attempt: the next run that changes the host first puts the draft's config back
    byte for byte and relaunches the server on it, and says so."""
    h, cfg = remote
    db_path = cfg.parent / "eagle.db"
    draft_cfg = h.draft / "config.json"
    doc = json.loads(draft_cfg.read_text())
    doc["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [-1, 2, 30]
    draft_cfg.write_text(json.dumps(doc, indent=2))
    original = draft_cfg.read_bytes()
    found = [a for k, v in FOUND.items() for a in ("-e", f"{k}={v}")]
    assert eagle("run", "relaunch", "-H", "gpu-01", *found, "-e", f"env={FAST}", "-e", "bench_prompts=0", "--yes",
                 config=cfg, timeout=300).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "--config", str(cfg), "run", "draft-repair", "-H",
                             "gpu-01", "--yes", "-e", "draft_train_layers=2,30,58", "-e", f"env={FAST}"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=cfg.parent)
    try:
        _step_done(db_path, proc, "attempt 1: launch")
    finally:
        proc.kill()
        proc.wait(60)
    assert draft_cfg.read_bytes() != original                         # left on attempt 1's list
    db, repair, said, doc = _finished_by_the_next_run(cfg, db_path, "draft-repair")
    assert draft_cfg.read_bytes() == original
    assert said and "the draft's config was restored (run #" in said[0] and "the server was relaunched on it" in said[0]
    kids = db.execute("select playbook, status from runs where parent_run_id = ? order by id", [repair]).fetchall()
    assert kids == [("revert-config", "succeeded"), ("relaunch", "succeeded")]


def test_a_sigtermed_sweep_relaunches_what_ran_before_it(remote):
    h, cfg = remote
    db_path = cfg.parent / "eagle.db"
    found = [a for k, v in FOUND.items() for a in ("-e", f"{k}={v}")]
    assert eagle("run", "relaunch", "-H", "gpu-01", *found, "-e", f"env={FAST}", "-e", "bench_prompts=0", "--yes",
                 config=cfg, timeout=300).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "--config", str(cfg), "sweep", "relaunch", "-H",
                             "gpu-01", "spec_topk=2,4,8", "spec_steps=5", "spec_draft_tokens=8", "bench_prompts=4",
                             "bench_output_len=16", "--yes"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cfg.parent)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if db_path.exists() and sqlite3.connect(db_path).execute(
                    "select 1 from runs c join runs s on c.parent_run_id = s.id where s.playbook = 'sweep' "
                    "and c.status = 'succeeded'").fetchone():
                break
            time.sleep(0.2)      # polling the store for the event, not a timed assertion
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM.value, err[-3000:]
    db = sqlite3.connect(db_path)
    sweep_id, status, error = db.execute("select id, status, error from runs where playbook = 'sweep'").fetchone()
    assert status == "failed" and "interrupted; the config that ran before (run #1's inputs) was relaunched" in error
    last, parent, inputs = db.execute("select id, parent_run_id, inputs from runs where playbook = 'relaunch' and "
                                      "status = 'succeeded' order by id desc limit 1").fetchone()
    assert parent == sweep_id and {k: int(json.loads(inputs)[k]) for k in FOUND} == FOUND
    launch, = db.execute("select summary from steps where run_id = ? and name = 'launch SGLang'", [last]).fetchone()
    assert "steps=3 topk=1 draft_tokens=4" in launch


@pytest.mark.e2e  # the same finishing path as the SIGKILLed draft-repair, in the default run
def test_a_sigkilled_sweep_is_finished_by_the_next_run_on_its_host(remote):
    h, cfg = remote
    db_path = cfg.parent / "eagle.db"
    found = [a for k, v in FOUND.items() for a in ("-e", f"{k}={v}")]
    assert eagle("run", "relaunch", "-H", "gpu-01", *found, "-e", f"env={FAST}", "-e", "bench_prompts=0", "--yes",
                 config=cfg, timeout=300).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "--config", str(cfg), "sweep", "relaunch", "-H",
                             "gpu-01", "spec_topk=2,4,8", "spec_steps=5", "spec_draft_tokens=8", "bench_prompts=4",
                             "bench_output_len=16", "--yes"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=cfg.parent)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if db_path.exists() and sqlite3.connect(db_path).execute(
                    "select 1 from runs c join runs s on c.parent_run_id = s.id where s.playbook = 'sweep' "
                    "and c.status = 'succeeded'").fetchone():
                break
            time.sleep(0.2)      # polling the store for the event, not a timed assertion
    finally:
        proc.kill()
        proc.wait(60)
    db, sweep_id, said, doc = _finished_by_the_next_run(cfg, db_path, "sweep")
    assert said and "the config that ran before (run #1's inputs) was relaunched by run #" in said[0], doc
    last, parent, inputs = db.execute("select id, parent_run_id, inputs from runs where playbook = 'relaunch' and "
                                      "status = 'succeeded' order by id desc limit 1").fetchone()
    assert parent == sweep_id and last < doc["run_id"] and {k: int(json.loads(inputs)[k]) for k in FOUND} == FOUND

