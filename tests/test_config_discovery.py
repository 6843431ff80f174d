"""Config discovery as git and ansible do it (issue 24): --config, $EAGLE_CONFIG, ./eagle.yaml,
the nearest eagle.yaml in a parent folder, ~/.config/eaglebot/eagle.yaml, /etc/eaglebot/eagle.yaml.
A command that only reads never creates a DB; empty results say what was filtered; lint says
when a valid file is not runnable by name. The CLI in this process where only the folder
matters, real `eagle` processes where the environment does; real SQLite files."""
from __future__ import annotations

import json
import os

import yaml
from support.helpers import eagle
from support.inproc import eagle_here

from eaglebot import configfile
from eaglebot.configfile import config_path


def _cfg(folder, **data):
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "eagle.yaml"
    p.write_text(yaml.safe_dump({"audit_db": "eagle.db", **data}))
    return p


def test_the_search_order_is_flag_env_here_parents_user_then_system(tmp_path, monkeypatch):
    system = _cfg(tmp_path / "etc")
    user = _cfg(tmp_path / "xdg" / "eaglebot")
    top = _cfg(tmp_path / "work")
    deep = tmp_path / "work" / "a" / "b"
    deep.mkdir(parents=True)
    named = _cfg(tmp_path / "named")
    monkeypatch.setattr(configfile, "SYSTEM_CONFIG", system)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("EAGLE_CONFIG", raising=False)
    monkeypatch.chdir(deep)
    assert config_path(None) == (top, False)                      # the nearest parent's
    here = _cfg(deep)
    assert config_path(None)[0].resolve() == here.resolve()       # ./eagle.yaml first
    monkeypatch.setenv("EAGLE_CONFIG", str(named))
    assert config_path(None) == (named, True)                     # then $EAGLE_CONFIG wins
    assert config_path(str(system)) == (system, True)             # and --config over all
    monkeypatch.delenv("EAGLE_CONFIG")
    here.unlink()
    top.unlink()
    assert config_path(None) == (user, False)                     # no parent has one: the user's
    user.unlink()
    assert config_path(None) == (system, False)                   # then the system's
    system.unlink()
    assert config_path(None) == (configfile.Path("eagle.yaml"), False)   # none: built-in defaults


def test_a_subfolder_uses_the_parents_config_and_its_db_and_hosts_names_the_file(tmp_path):
    cfg = _cfg(tmp_path / "proj", hosts={"gpu-01": {"address": "10.0.0.7"}})
    sub = tmp_path / "proj" / "notes"
    sub.mkdir()
    assert eagle_here("run", "hello", cwd=tmp_path / "proj").returncode == 0
    hist = eagle_here("history", "--json", cwd=sub)
    assert hist.returncode == 0 and [r["playbook"] for r in json.loads(hist.stdout)] == ["hello"]
    assert not (sub / "eagle.db").exists()
    hosts = eagle_here("hosts", cwd=sub)
    assert hosts.stdout.splitlines()[0] == f"config: {cfg.resolve()}" and "gpu-01" in hosts.stdout
    doctor = eagle_here("doctor", cwd=sub)
    assert f"ok    config: {cfg.resolve()}" in doctor.stdout


def test_the_user_config_is_found_when_no_folder_has_one(tmp_path):
    xdg = tmp_path / "xdg"
    cfg = _cfg(xdg / "eaglebot", audit_db=str(tmp_path / "user.db"))
    work = tmp_path / "elsewhere"
    work.mkdir()
    res = eagle("hosts", cwd=work, env={"XDG_CONFIG_HOME": str(xdg)})
    assert res.returncode == 0 and res.stdout.splitlines()[0] == f"config: {cfg.resolve()}"


def test_reads_in_an_empty_folder_create_no_db_and_say_where_they_looked(tmp_path):
    work = tmp_path / "empty"
    work.mkdir()
    hist = eagle_here("history", cwd=work)
    assert hist.returncode == 0 and hist.stdout.startswith("no runs yet: no audit DB at ")
    assert "no eagle.yaml in this folder, its parents" in hist.stdout
    assert json.loads(eagle_here("history", "--json", cwd=work).stdout) == []
    for args in (["show", "last"], ["show", "3"], ["diff", "1", "2"], ["trend", "bench", "local", "x"]):
        res = eagle_here(*args, cwd=work)
        assert res.returncode == 2 and "no audit DB at" in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1
    doctor = eagle_here("doctor", cwd=work)
    assert "ok    config: built-in defaults: no eagle.yaml in this folder, its parents" in doctor.stdout
    assert "does not exist yet; `eagle run` will create it" in doctor.stdout
    assert os.listdir(work) == []


def test_an_empty_filtered_history_says_what_it_filtered(tmp_path):
    cfg = _cfg(tmp_path)
    assert eagle_here("run", "hello", config=cfg).returncode == 0
    res = eagle_here("history", "--status", "failed", "--since", "7d", config=cfg)
    assert res.stdout.strip() == "no failed runs in the last 7d (1 run in all)"
    res = eagle_here("history", "--playbook", "bench", "--host", "gpu-01", config=cfg)
    assert res.stdout.strip() == "no runs of bench on gpu-01 (1 run in all)"


def test_lint_says_a_valid_file_outside_playbooks_dir_is_not_runnable_by_name(tmp_path):
    cfg = _cfg(tmp_path)
    (tmp_path / "slow.yaml").write_text("name: slow\nsteps:\n  - skill: shell\n    with: {command: 'true'}\n")
    res = eagle_here("lint", str(tmp_path / "slow.yaml"), config=cfg)
    assert res.returncode == 0 and "ok " in res.stdout
    assert "valid, but not runnable by name: `eagle run slow` looks in playbooks_dir" in res.stdout
    assert "set playbooks_dir in eagle.yaml to its folder" in res.stdout
    run = eagle_here("run", "slow", config=cfg)
    assert run.returncode == 2 and "names come from the shipped ones (no playbooks_dir in eagle.yaml)" in run.stderr
    books = tmp_path / "books"
    books.mkdir()
    (books / "slow.yaml").write_text((tmp_path / "slow.yaml").read_text())
    cfg2 = _cfg(tmp_path / "two", playbooks_dir=str(books))
    ok = eagle_here("lint", str(books / "slow.yaml"), config=cfg2)
    assert ok.returncode == 0 and "not runnable by name" not in ok.stdout
