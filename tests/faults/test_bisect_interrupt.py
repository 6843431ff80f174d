"""An interrupted `eagle bisect` leaves the host in the configuration it was to leave (issue 46,
items 4 and LOW): a real `eagle bisect GOOD BAD --leave bad` on the SIMULATED SGLang server (local
transport: real relaunches, real processes) is sent SIGTERM (a service restart) once a point has
relaunched the server on its own mix, or SIGKILLed there; either way the draft's config ends as
BAD's, by the bisection's own end (SIGTERM) or by the next run that changes the host (SIGKILL),
which says so in its warnings."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from support.helpers import eagle
from support.tuning_sandbox import HOST, sim_host

SPEC = ["-e", "spec_steps=5", "-e", "spec_topk=4", "-e", "spec_draft_tokens=8", "-e", "bench_prompts=8",
        "-e", "bench_output_len=64", "-e", "bench_repeats=1"]
GOOD_LAYERS, BAD_LAYERS = [2, 30, 58], [-1, 2, 30]


def _layers(sb) -> list[int]:
    return json.loads((sb["draft"] / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]


def _point_launched(db, proc: subprocess.Popen) -> None:
    """Until a bisection point relaunched the server (a `bisect-point` run's launch changed the host)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        conn = sqlite3.connect(db)
        try:
            row = conn.execute("select 1 from steps s join runs r on r.id = s.run_id where r.playbook = 'bisect-point' "
                               "and s.skill = 'server.launch' and s.status = 'changed'").fetchone()
        finally:
            conn.close()
        if row:
            return
        time.sleep(0.05)
    raise AssertionError(f"no bisection point relaunched the server (the bisect exited {proc.poll()})")


def _start(tmp_path):
    sb_cm = sim_host(tmp_path)
    sb = sb_cm.__enter__()
    cfg = sb["cfg"]
    assert eagle("run", "relaunch", "-H", HOST, "--yes", *SPEC, "-e", f"aux_layers={GOOD_LAYERS}",
                 "-e", "mem_fraction=0.8", config=cfg, timeout=300).returncode == 0
    rc = eagle("run", "relaunch", "-H", HOST, "--yes", *SPEC, "-e", f"aux_layers={BAD_LAYERS}",
               "-e", "draft_mismatch=allow", "-e", "mem_fraction=0.85", config=cfg, timeout=300).returncode
    assert rc in (0, 3) and _layers(sb) == BAD_LAYERS
    env = {k: v for k, v in os.environ.items() if k != "EAGLE_CONFIG"}
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "bisect", "1", "2", "-H", HOST, "--leave", "bad",
                             "--repeats", "1", "--prompts", "8", "--yes", "--config", str(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    return sb_cm, sb, cfg, proc


@pytest.mark.e2e  # two relaunches and a bisection on the simulator
def test_sigterm_mid_bisect_leaves_the_host_in_the_configuration_asked_for(tmp_path):
    sb_cm, sb, cfg, proc = _start(tmp_path)
    try:
        _point_launched(sb["db"], proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 128 + signal.SIGTERM, out + err
        assert "stopping the bisect and leaving" in err and "interrupted by SIGTERM" in err, err
        assert _layers(sb) == BAD_LAYERS
        db = sqlite3.connect(sb["db"])
        (parent,) = db.execute("select id from runs where playbook = 'bisect'").fetchone()
        (last,) = db.execute("select inputs from runs where playbook = 'bisect-point' and parent_run_id = ? "
                             "order by id desc limit 1", [parent]).fetchone()
        assert json.loads(last)["num_prompts"] in (0, "0")   # the final relaunch, no benchmark
    finally:
        if proc.poll() is None:
            proc.kill()
        sb_cm.__exit__(None, None, None)


@pytest.mark.e2e  # two relaunches, a bisection and a benchmark on the simulator
def test_a_sigkilled_bisect_is_finished_by_the_next_run_that_changes_the_host(tmp_path):
    sb_cm, sb, cfg, proc = _start(tmp_path)
    try:
        _point_launched(sb["db"], proc)
        proc.kill()
        proc.communicate(timeout=60)
        res = eagle("run", "bench", "-H", HOST, "-e", "num_prompts=2", "-e", "output_len=8", "-e", "input_len=32",
                    "--json", config=cfg, timeout=300)
        doc = json.loads(res.stdout)
        db = sqlite3.connect(sb["db"])
        run_id, status = db.execute("select id, status from runs where playbook = 'bisect'").fetchone()
        assert status == "interrupted"
        said = [w for w in doc.get("warnings", []) if f"bisect run #{run_id}" in w]
        assert said and "relaunched in BAD's configuration first" in said[0], doc.get("warnings")
        assert _layers(sb) == BAD_LAYERS
    finally:
        if proc.poll() is None:
            proc.kill()
        sb_cm.__exit__(None, None, None)
