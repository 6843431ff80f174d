"""The `eagle` command as users (and acceptance tests) call it: exit codes, --json, the store.

Decisions (exit codes, one-sentence errors, listings) call the CLI in this process
(tests/support/inproc.py); what only a process shows (the --json contract of a real run, a SIGKILL,
many processes at once, a closed pipe) starts real `eagle` processes."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlite_utils

from support.helpers import eagle, eagle_json, pid_alive, tagged_pids, wait_for, write_playbook, write_yaml
from support.inproc import eagle_here, eagle_here_json

from eaglebot.store import Store


@pytest.fixture
def cfg(tmp_path) -> Path:
    books = tmp_path / "books"
    books.mkdir()
    write_playbook(books, "ok", """
        name: ok
        description: Two quick steps.
        inputs:
          word: {type: str, default: hi, description: what to echo}
          n: {type: int, default: 1, min: 1, max: 5}
        steps:
          - skill: shell
            with: {command: "echo {{ word }} {{ n }}"}
          - skill: audit.note
            with: {message: done}
    """)
    write_playbook(books, "fails", """
        name: fails
        steps:
          - name: boom
            skill: shell
            with: {command: "echo bad >&2; exit 4"}
    """)
    write_playbook(books, "slow", """
        name: slow
        steps:
          - name: nap
            skill: shell
            with: {command: "sleep 60"}
    """)
    return write_yaml(tmp_path / "eagle.yaml", {"audit_db": "audit/eagle.db", "playbooks_dir": "books"})


def test_run_json_has_the_contract_shape(cfg):
    res, doc = eagle_json("run", "ok", "-e", "word=yo", config=cfg)
    assert res.returncode == 0, res.stderr
    assert set(doc) == {"run_id", "status", "parent_run_id", "children", "steps", "metrics", "warnings", "regressions",
                        "hosts"}
    assert doc["status"] == "succeeded"
    assert doc["hosts"] == [{"name": "local", "status": "changed", "ok": 1, "changed": 1, "failed": 0,
                             "unreachable": 0, "skipped": 0, "duration_s": doc["hosts"][0]["duration_s"],
                             "failure": None}]  # the per-host recap
    assert doc["steps"][0] == {"name": "shell", "skill": "shell", "host": "local", "status": "changed",
                               "summary": "yo 1", "duration_ms": doc["steps"][0]["duration_ms"], "attempts": 1,
                               "data": doc["steps"][0]["data"]}
    # `data`: the step's registered data (the shell skill's rc and output)
    assert doc["steps"][0]["data"]["rc"] == 0 and doc["steps"][0]["data"]["stdout"].startswith("yo 1")
    assert "run #" in res.stderr  # progress goes to stderr
    assert (cfg.parent / "audit" / "eagle.db").exists()  # audit_db is relative to the config file


def test_show_json_matches_run_json(cfg):
    _, ran = eagle_here_json("run", "ok", config=cfg)
    res, shown = eagle_here_json("show", str(ran["run_id"]), config=cfg)
    assert res.returncode == 0
    assert shown == ran


def test_failed_run_exits_1_and_says_why_on_stderr(cfg):
    res = eagle_here("run", "fails", config=cfg)
    assert res.returncode == 1
    assert "boom: exit status 4: bad" in res.stderr


@pytest.mark.parametrize("args,needle", [
    (["run", "nope"], "unknown playbook 'nope'"),
    (["run", "ok", "-H", "gpu-9"], "unknown host 'gpu-9' (known: local)"),
    (["run", "ok", "-e", "n=9"], "input n: 9 is above the maximum 5"),
    (["run", "ok", "-e", "n=$(reboot)"], "input n: '$(reboot)' is not an int"),
    (["run", "ok", "-e", "bogus=1"], "playbook 'ok' has no input 'bogus'"),
    (["run", "ok", "-e", "novalue"], "-e expects key=value"),
    (["show", "999"], "no run #999"),
])
def test_bad_input_exits_2_with_one_sentence(cfg, args, needle):
    res = eagle_here(*args, config=cfg)
    assert res.returncode == 2
    assert needle in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_rejected_request_is_an_event_not_a_run(cfg):
    res = eagle_here("run", "ok", "-H", "gpu-9", config=cfg)
    assert res.returncode == 2
    _, hist = eagle_here_json("history", config=cfg)
    assert hist == []
    db = sqlite_utils.Database(Path(cfg).parent / "audit" / "eagle.db")
    ev = list(db.query("select * from events where kind = 'rejected'"))
    assert len(ev) == 1 and ev[0]["text"] == "ok gpu-9" and "unknown host 'gpu-9'" in ev[0]["reason"]
    assert ev[0]["actor"]


def test_history_json(cfg):
    eagle_here("run", "ok", config=cfg)
    eagle_here("run", "fails", config=cfg)
    res, hist = eagle_here_json("history", config=cfg)
    assert res.returncode == 0
    assert [h["playbook"] for h in hist] == ["fails", "ok"]
    assert set(hist[0]) == {"run_id", "playbook", "hosts", "status", "actor", "origin", "started_at", "finished_at",
                            "parent_run_id", "children", "dry_run", "duration_ms", "key_metric", "regressions"}
    assert hist[0]["origin"] == "cli" and hist[0]["hosts"] == ["local"]
    assert hist[0]["started_at"].endswith("Z")
    _, only = eagle_here_json("history", "--playbook", "ok", "--limit", "5", config=cfg)
    assert [h["playbook"] for h in only] == ["ok"]
    _, none = eagle_here_json("history", "--host", "elsewhere", config=cfg)
    assert none == []


def test_lint(cfg, tmp_path):
    res = eagle_here("lint", config=cfg)
    assert res.returncode == 0, res.stderr
    bad = write_playbook(tmp_path, "bad", "name: bad\nsteps:\n  - skill: shell\n    with: {commnd: x}\n")
    res = eagle_here("lint", str(bad), config=cfg)
    assert res.returncode == 2
    assert f"{bad}:4: steps[0].with.commnd: unknown key (did you mean 'command'?)" in res.stderr


def test_playbooks_and_hosts_listings(cfg):
    res = eagle_here("playbooks", config=cfg)
    assert res.returncode == 0
    assert "ok: Two quick steps." in res.stdout and "n (int, default 1, range 1..5)" in res.stdout
    res = eagle_here("hosts", config=cfg)
    assert res.returncode == 0 and "local" in res.stdout


def test_no_config_uses_eagle_db_in_cwd_and_local_host(tmp_path):
    res = eagle_here("run", "hello", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "eagle.db").exists()


def test_unknown_config_key_is_an_error(tmp_path):
    c = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "x.db", "hostz": {}})
    res = eagle_here("hosts", config=c)
    assert res.returncode == 2 and "hostz: unknown key" in res.stderr


def test_killed_run_becomes_interrupted_and_frees_the_host(cfg):
    db = cfg.parent / "audit" / "eagle.db"
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "run", "slow", "--config", str(cfg)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def running():
        if not db.exists():
            return None
        s = Store(db)
        try:
            rows = [r for r in s.steps(1) if r["status"] == "running"]
            return rows or None
        finally:
            s.close()

    wait_for(running, 30, 0.1, "the step to start")
    busy = eagle("run", "slow", config=cfg)
    assert busy.returncode == 2 and "host local is busy with run #1 since" in busy.stderr
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    res, hist = eagle_json("history", config=cfg)
    by_id = {h["run_id"]: h for h in hist}
    assert by_id[1]["status"] == "interrupted"
    s = Store(db)
    assert s.steps(1)[0]["status"] == "failed"
    # The step's `sleep 60` (its own session) outlived `eagle`: the lock stays, ownerless,
    # and says why, until the next run on the host has stopped it (issue 10: no orphans).
    tag = s.step_procs(s.steps(1)[0]["id"])[0]["tag"]
    left = tagged_pids(tag)
    assert left and [lk["reason"] for lk in s.locks()] == [
        "processes of run #1 may still run on local (not stopped yet: its process is gone)"]
    s.close()
    res = eagle("run", "ok", config=cfg)
    assert res.returncode == 0
    s = Store(db)
    rid = s.last_run_id()  # #2: the busy request above was an event, not a run
    assert rid == 2
    # at least the tagged ones: the sweep (by start time and descent) also takes what shed the tag,
    # so the count may be higher than `left` saw
    [warning] = [w["message"] for w in s.warnings(rid)]
    m = re.fullmatch(r"run #1 had left processes on local: processes tagged " + re.escape(tag) +
                     r": (\d+) process(?:es)? stopped \(SIGTERM, then SIGKILL\)", warning)
    assert m and int(m.group(1)) >= len(left), warning
    assert not tagged_pids(tag)
    assert s.locks() == [] and f"were stopped by run #{rid}" in s.steps(1)[0]["summary"]
    s.close()
    assert not [p for p in left if pid_alive(p)]


def test_prune_and_baseline(cfg):
    _, ran = eagle_here_json("run", "ok", config=cfg)
    res = eagle_here("baseline", "set", str(ran["run_id"]), config=cfg)
    assert res.returncode == 0 and "baseline" in res.stdout
    res = eagle_here("prune", "--older-than", "0d", config=cfg)
    assert res.returncode == 0
    _, hist = eagle_here_json("history", config=cfg)
    assert [h["run_id"] for h in hist] == [ran["run_id"]]  # the baseline is kept
    assert eagle_here("prune", "--older-than", "soon", config=cfg).returncode == 2


def test_many_processes_opening_a_new_audit_db_at_once_all_succeed(tmp_path):
    """The bot and several CLI runs may create and migrate the same DB at the same moment."""
    db = tmp_path / "fresh" / "eagle.db"
    code = ("import sys; from eaglebot.store import Store; from eaglebot.store.rows import NewRun; "
            "s = Store(sys.argv[1]); "
            "s.create_run(NewRun(playbook='p', hosts=['local'], inputs={}, variables={}, actor='a', origin='cli')); "
            "s.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(db)], stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, "\n".join(errors)
    s = Store(db)
    assert len(s.history(limit=100)) == 8
    s.close()


def test_a_reader_that_leaves_early_gets_no_internal_error(tmp_path):
    """`eagle history --json | head -1`: the pipe closes while eagle still writes; eagle
    stops quietly (exit 141, as a shell does on SIGPIPE), no 'internal error' line."""
    from support.history_seed import seed_run

    from eaglebot.store import Store

    store = Store(tmp_path / "eagle.db")
    for _ in range(1500):   # ~250 KB of JSON: more than a pipe holds
        seed_run(store, "bench", "gpu-01")
    store.close()
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text("audit_db: eagle.db\n")
    proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "history", "--json", "--limit", "1500",
                             "--config", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"["
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141 and b"internal error" not in err and b"Traceback" not in err, err
