"""The terminal front end as people read it: skills with types/defaults/allowed values,
history with regressions, dry runs, filters and local time, prune's dry run and question,
and shell completion."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from support.helpers import eagle, eagle_json, write_playbook, write_yaml
from support.inproc import eagle_here, eagle_here_json
from support.history_seed import seed_run

from eaglebot.store import Store


@pytest.fixture
def cfg(tmp_path) -> Path:
    books = tmp_path / "books"
    books.mkdir()
    write_playbook(books, "ok", """
        name: ok
        steps:
          - skill: shell
            with: {command: "echo ok"}
    """)
    write_playbook(books, "cmp", """
        name: cmp
        steps:
          - skill: bench.compare
            with: {baseline: {output_throughput: 100, median_tpot_ms: 10}, better: {median_tpot_ms: lower},
                   metrics: {output_throughput: 50, median_tpot_ms: 20}}
    """)
    return write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "playbooks_dir": "books"})


def test_skills_and_help_show_each_parameters_type_default_and_allowed_values(cfg):
    res = eagle_here("skills", config=cfg)
    assert res.returncode == 0 and "PydanticUndefined" not in res.stdout
    assert "    grace_s: float (default: 10.0; >= 0, <= 600)" in res.stdout
    assert "    baseline: dict[str, float] (required)" in res.stdout
    assert "    better: dict[str, one of 'higher', 'lower'] (default: {})" in res.stdout
    doc = json.loads(eagle_here("skills", "--json", config=cfg).stdout)
    cleanup = next(s for s in doc if s["name"] == "gpu.cleanup")
    assert {"name": "grace_s", "type": "float", "default": "default: 10.0", "allowed": ">= 0, <= 600",
            "description": "seconds between SIGTERM and SIGKILL"} in cleanup["params"]
    helped = eagle_here("chat", "help bench.serving", config=cfg)
    assert "  port (int, default: 30000; allowed: >= 1, <= 65535): " in helped.stdout
    assert "PydanticUndefined" not in helped.stdout


def test_history_marks_regressions_and_dry_runs_and_filters_by_status_and_age(cfg):
    assert eagle_here("run", "cmp", config=cfg).returncode == 3
    assert eagle_here("run", "ok", "--dry-run", config=cfg).returncode == 0
    store = Store(cfg.parent / "eagle.db")
    old = seed_run(store, "ok", "local", status="failed", started_at="2020-01-01T00:00:00.000Z")
    store.close()
    out = eagle_here("history", config=cfg).stdout
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert "succeeded ▼2" in rows["#1"] and "succeeded (dry-run)" in rows["#2"] and "failed" in rows[f"#{old}"]
    _, recent = eagle_here_json("history", "--since", "1d", config=cfg)
    assert [r["run_id"] for r in recent] == [2, 1]
    _, failed = eagle_here_json("history", "--status", "failed", config=cfg)
    assert [r["run_id"] for r in failed] == [old]
    bad = eagle_here("history", "--since", "3m", config=cfg)
    assert bad.returncode == 2 and "--since 3m: 'm' is ambiguous" in bad.stderr


def test_history_shows_local_time_to_people_and_utc_in_json(cfg):
    eagle("run", "ok", config=cfg)
    _, doc = eagle_json("history", config=cfg)
    started = doc[0]["started_at"]
    assert started.endswith("Z")
    tokyo = datetime.fromisoformat(started.replace("Z", "+00:00")).astimezone(
        __import__("zoneinfo").ZoneInfo("Asia/Tokyo")).strftime("%Y-%m-%d %H:%M")
    out = eagle("history", config=cfg, env={"TZ": "Asia/Tokyo"}).stdout
    assert "started (JST)" in out and tokyo in out


def _seed_old(cfg, n):
    store = Store(cfg.parent / "eagle.db")
    for _ in range(n):
        seed_run(store, "ok", "local", started_at="2020-01-01T00:00:00.000Z")
    store.close()


def test_prune_dry_run_deletes_nothing_and_a_terminal_is_asked_above_100_runs(cfg):
    _seed_old(cfg, 101)
    dry = eagle_here("prune", "--older-than", "30d", "--dry-run", config=cfg)
    assert dry.returncode == 0 and "would prune 101 runs older than 30d" in dry.stdout
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "prune", "--older-than", "30d", "--config",
                                 str(cfg)], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.write(master, b"n\n")
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 1 and "delete 101 runs older than 30d" in out and "nothing was deleted" in out
    _, hist = eagle_here_json("history", "--limit", "500", config=cfg)
    assert len(hist) == 101
    done = eagle_here("prune", "--older-than", "30d", config=cfg)      # no terminal: no question
    assert done.returncode == 0 and "pruned 101 runs" in done.stdout


def _complete(script: str, *words: str, env: dict | None = None) -> list[str]:
    prog = (f'eval "$1"; COMP_WORDS=({" ".join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; _eagle; '
            'printf "%s\\n" "${COMPREPLY[@]}"')
    e = {k: v for k, v in os.environ.items() if k != "EAGLE_CONFIG"}
    res = subprocess.run(["bash", "-c", prog, "bash", script], capture_output=True, text=True, timeout=30,
                         env={**e, **(env or {})})
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_bash_completion_knows_the_commands_their_options_and_choices(tmp_path):
    script = eagle_here("completion", "bash").stdout
    assert "complete -F _eagle eagle" in script
    assert _complete(script, "eagle", "hist") == ["history"]
    assert _complete(script, "eagle", "history", "--s") == ["--since", "--status"]
    assert _complete(script, "eagle", "completion", "") == ["--config", "--help", "--list", "--playbook", "-h",
                                                            "bash", "hosts", "inputs", "playbooks", "schedules",
                                                            "targets", "zsh"]
    assert "list" in _complete(script, "eagle", "schedule", "")
    zsh = eagle_here("completion", "zsh").stdout
    assert "bashcompinit" in zsh and "complete -F _eagle eagle" in zsh
    assert eagle_here("completion", "fish").returncode == 2


def test_bash_completion_offers_the_configs_playbooks_hosts_and_schedules(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    write_playbook(books, "nightly-bench", "name: nightly-bench\nsteps:\n  - skill: shell\n    with: {command: 'true'}\n")
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text("playbooks_dir: books\nhosts:\n  gpu-01: {transport: local}\n  gpu-02: {transport: local}\n"
                   "groups: {pair: [gpu-01, gpu-02]}\n"
                   "schedules:\n  - {name: nightly, playbook: nightly-bench, cron: '0 3 * * *'}\n")
    script = eagle("completion", "bash").stdout
    path = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # the venv's `eagle`
    c = "--config", str(cfg)
    assert _complete(script, "eagle", *c, "run", "ni", env=path) == ["nightly-bench"]
    assert _complete(script, "eagle", "run", "ni", env=path) == []  # the shipped ones only
    assert _complete(script, "eagle", "run", "ni", env={**path, "EAGLE_CONFIG": str(cfg)}) == ["nightly-bench"]
    assert _complete(script, "eagle", *c, "trend", "nightly-bench", "g", env=path) == ["gpu-01", "gpu-02"]
    assert _complete(script, "eagle", "run", "nightly-bench", *c, "-H", "gpu", env=path) == ["gpu-01", "gpu-02"]
    # -H offers groups and `all` too; after -e, the playbook's input names
    assert _complete(script, "eagle", "run", "hello", *c, "-H", "", env=path) == ["all", "gpu-01", "gpu-02",
                                                                                  "local", "pair"]
    assert _complete(script, "eagle", *c, "run", "hello", "-e", "gr", env=path) == ["greeting="]
    assert _complete(script, "eagle", "logs", "", env={**path, "EAGLE_CONFIG": str(cfg)}) == ["gpu-01", "gpu-02", "local"]
    assert _complete(script, "eagle", "schedule", "pause", "n", env={**path, "EAGLE_CONFIG": str(cfg)}) == ["nightly"]
    assert _complete(script, "eagle", *c, "hosts", "pin", "gpu", env=path) == ["gpu-01", "gpu-02"]
    assert _complete(script, "eagle", "hosts", "", env=path) == ["pin", "--config", "--help", "--json", "-h"]
    assert _complete(script, "eagle", "run", "nightly-bench", "--dr", env=path) == ["--dry-run"]
    assert eagle_here("completion", "--list", "playbooks", config=cfg).stdout.split()[-1] == "verify"
    assert eagle_here("completion").returncode == 2


def test_a_run_prints_one_result_block_each_metric_once_and_one_line_per_regression(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    write_playbook(books, "cmp", """
        name: cmp
        steps:
          - skill: metric.record
            with: {name: median_itl_ms, value: 7.7123, unit: ms, better: lower}
          - skill: metric.record
            with: {name: output_throughput, value: 1234.5678, unit: tok/s}
          - skill: bench.compare
            with: {baseline: {output_throughput: 2000, median_itl_ms: 5}, better: {median_itl_ms: lower},
                   metrics: {output_throughput: 1234.5678, median_itl_ms: 7.7123}}
    """)
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "playbooks_dir": "books"})
    res = eagle("run", "cmp", config=cfg)
    assert res.returncode == 3
    out = res.stdout.splitlines()
    assert out[0].startswith("run #1 cmp on local: succeeded in ") and res.stdout.count("run #1") == 1
    assert "run #1" not in res.stderr.replace("run #1: cmp on local", "")      # the result is printed once
    assert "  median_itl_ms = 7.71" in out and "  output_throughput = 1230 tok/s" in out
    regs = [line for line in out if "REGRESSION" in line]
    assert regs == ["▼ REGRESSION local: output_throughput 2000 → 1230 (-38.3%)  "
                    "no earlier good run on local to compare with",
                    "▼ REGRESSION local: median_itl_ms 5 → 7.71 (+54.2%)  no earlier good run on local to compare with"]
    assert "\x1b[" not in res.stdout                                         # no colour without a terminal
