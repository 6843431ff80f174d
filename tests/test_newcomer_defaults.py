"""Small defaults that trip newcomers: ./playbooks without a config, a missing playbooks_dir,
config errors with line numbers, and dry runs that show every step's plan and change nothing."""
from __future__ import annotations

import json

from support.helpers import eagle, eagle_json, write_yaml
from support.inproc import eagle_here

BOOK = """\
name: mine
description: a playbook of my own
steps:
  - skill: shell
    with: {command: "echo mine"}
"""


def test_without_a_config_a_playbooks_folder_in_the_current_directory_is_used(tmp_path):
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "mine.yaml").write_text(BOOK)
    res = eagle_here("run", "mine", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "mine" in eagle_here("playbooks", cwd=tmp_path).stdout


def test_a_configured_playbooks_dir_that_does_not_exist_is_an_error_with_its_line(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "playbooks_dir": "nowhere"})
    res = eagle_here("playbooks", config=cfg)
    assert res.returncode == 2
    assert f"{cfg}:2: playbooks_dir: {tmp_path / 'nowhere'} is not a folder" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_unknown_keys_in_eagle_yaml_are_errors_with_the_line_number(tmp_path):
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text("audit_db: eagle.db\nslack:\n  channel: C1\n  chanel: C2\n")
    res = eagle_here("hosts", config=cfg)
    assert res.returncode == 2 and f"{cfg}:4: slack.chanel: unknown key" in res.stderr


def test_a_dry_run_on_a_host_without_nvidia_smi_shows_every_steps_plan_and_notes_nothing(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    res, doc = eagle_json("run", "relaunch", "--dry-run", "-e", "aux_layers=1,2", config=cfg,
                          env={"PATH": "/usr/bin:/bin"})
    steps = {s["name"]: s for s in doc["steps"]}
    free = steps["free the GPUs"]
    assert free["status"] == "skipped" and "nvidia-smi not found" in free["summary"], free
    assert steps["benchmark"]["status"] == "skipped" and "dry-run" in steps["benchmark"]["summary"]
    # every step after the probe that failed still reports its plan, none is "not run"
    assert not [s for s in doc["steps"] if s["summary"].startswith("not run")]
    note = steps["audit.note"]
    assert note["status"] == "skipped" and note["summary"] == "dry-run: no note"
    shown = json.loads(eagle("show", str(doc["run_id"]), "--json", config=cfg).stdout)
    assert shown["steps"] == doc["steps"]


def test_typos_leave_rejected_events_not_failed_runs(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    chat = eagle_here("chat", "skills", config=cfg)
    typo = eagle_here("run", "dsik", config=cfg)
    assert chat.returncode == 2 and typo.returncode == 2 and "unknown playbook 'dsik'" in typo.stderr
    assert json.loads(eagle_here("history", "--json", config=cfg).stdout) == []
    import sqlite_utils

    rows = list(sqlite_utils.Database(tmp_path / "eagle.db").query(
        "select text, reason from events where kind = 'rejected' order by id"))
    assert [r["text"] for r in rows] == ["skills", "dsik"]
    assert all("unknown playbook" in r["reason"] for r in rows)
