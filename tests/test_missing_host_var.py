"""One message for a variable nobody set (issue 24), from every playbook, before any step
runs: `host var `X` is not set on H; set it in eagle.yaml under hosts.H.vars or pass -e ...`.
The CLI in this process (tests/support/inproc.py), a real SQLite file."""
from __future__ import annotations

import json

import sqlite_utils
import yaml

from support.inproc import eagle_here


def _cfg(tmp_path, vars_=None):
    p = tmp_path / "eagle.yaml"
    p.write_text(yaml.safe_dump({"audit_db": "eagle.db", "hosts": {
        "box": {"transport": "local", "vars": vars_ or {}}}}))
    return p


def test_relaunch_and_patch_config_say_the_same_thing_before_any_step_runs(tmp_path):
    cfg = _cfg(tmp_path)
    relaunch = eagle_here("run", "relaunch", "-H", "box", "--yes", config=cfg)
    patch = eagle_here("run", "patch-config", "-H", "box", "-e", "aux_layers=1,2", config=cfg)
    assert relaunch.returncode == 2 and patch.returncode == 2
    # every variable missing on the host, in one sentence (issue 34: they came one run at a time)
    assert relaunch.stderr == ("eagle: host vars `model` and `draft` are not set on box; set them in eagle.yaml "
                               "under hosts.box.vars or pass -e model=... -e draft=...\n")
    assert patch.stderr == ("eagle: host var `draft` is not set on box; set it in eagle.yaml under "
                            "hosts.box.vars or pass -e path=...\n")
    db = sqlite_utils.Database(tmp_path / "eagle.db")
    assert list(db.query("select count(*) n from runs")) == [{"n": 0}]          # nothing ran, no run row
    reasons = [r["reason"] for r in db.query("select reason from events where kind = 'rejected' order by id")]
    assert len(reasons) == 2 and all(r.startswith(("host var `", "host vars `")) for r in reasons)


def test_a_var_set_by_the_user_or_the_host_is_enough_and_a_dry_run_says_the_same_at_its_step(tmp_path):
    cfg = _cfg(tmp_path, {"model": str(tmp_path / "m")})
    dry = eagle_here("run", "relaunch", "-H", "box", "--dry-run", "--json", config=cfg)
    doc = json.loads(dry.stdout)
    launch = next(s for s in doc["steps"] if s["skill"] == "server.launch")
    assert launch["status"] == "failed"
    assert launch["summary"] == ("host var `draft` is not set on box; set it in eagle.yaml under hosts.box.vars "
                                 "or pass -e draft=...")
    # given with -e, the request passes the check (then fails on the host, not on the variable)
    given = eagle_here("run", "patch-config", "-H", "box", "-e", "aux_layers=1,2", "-e",
                  f"path={tmp_path / 'none.json'}", config=cfg)
    assert given.returncode == 1 and "host var" not in given.stderr


def test_what_is_given_is_not_reported_and_the_rest_comes_in_one_sentence(tmp_path):
    cfg = _cfg(tmp_path, {"draft": str(tmp_path / "d")})
    res = eagle_here("run", "relaunch", "-H", "box", "--yes", config=cfg)
    assert res.returncode == 2
    assert res.stderr == ("eagle: host var `model` is not set on box; set it in eagle.yaml under hosts.box.vars "
                          "or pass -e model=...\n")
    given = eagle_here("run", "relaunch", "-H", "box", "--yes", "-e", f"model={tmp_path / 'm'}", config=cfg)
    assert "host var" not in given.stderr
