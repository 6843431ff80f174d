"""Start-up (issue 13): what each command loads, checked by module, not by the clock
(tests/bench/bench_startup.py measures the time)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import write_playbook, write_yaml

from eaglebot.config import Settings
from eaglebot.configfile import TOP_KEYS
from eaglebot.engine import playbook as playbook_mod
from eaglebot.errors import UsageError
from eaglebot.store.rows import NewRun

HEAVY = ["pydantic", "sqlite_utils", "jinja2", "asyncssh", "numpy", "yaml", "asyncio", "eaglebot.engine",
         "eaglebot.store", "eaglebot.config"]


def loaded_after(argv: list[str], cwd) -> dict:
    code = ("import sys, json, contextlib, io\n"
            "from eaglebot.frontends.cli.main import main\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):\n"
            "    try:\n        rc = main(sys.argv[1:])\n    except SystemExit as e:\n        rc = e.code\n"
            f"print(json.dumps({{'rc': rc, 'mods': [m for m in {HEAVY!r} if m in sys.modules]}}))\n")
    res = subprocess.run([sys.executable, "-c", code, *argv], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_help_loads_nothing_heavy(tmp_path):
    out = loaded_after(["--help"], tmp_path)
    assert out == {"rc": 0, "mods": []}


def test_history_loads_the_store_but_not_sqlite_utils_pydantic_jinja_ssh_or_numpy(tmp_path):
    from eaglebot.store import Store

    write_yaml(tmp_path / "eagle.yaml", {"audit_db": "a.db", "hosts": {"gpu": {"address": "10.0.0.1"}}})
    Store(tmp_path / "a.db").close()
    out = loaded_after(["history"], tmp_path)
    assert out["rc"] == 0
    assert set(out["mods"]) == {"eaglebot.store", "yaml"}   # sqlite-utils only for the schema (store/sqlite_db.py)


def test_history_without_a_db_creates_none_and_loads_no_pydantic(tmp_path):
    write_yaml(tmp_path / "eagle.yaml", {"audit_db": "a.db"})
    out = loaded_after(["history"], tmp_path)
    assert out["rc"] == 0 and "pydantic" not in out["mods"]
    assert not (tmp_path / "a.db").exists()


def test_run_on_local_never_loads_asyncssh(tmp_path):
    (tmp_path / "books").mkdir()
    write_playbook(tmp_path / "books", "hi", "name: hi\nsteps:\n  - skill: shell\n    with: {command: 'true'}\n")
    write_yaml(tmp_path / "eagle.yaml", {"audit_db": "a.db", "playbooks_dir": "books"})
    out = loaded_after(["run", "hi"], tmp_path)
    assert out["rc"] == 0 and "asyncssh" not in out["mods"] and "pydantic" in out["mods"]


def test_history_with_a_bad_config_still_says_what_is_wrong(tmp_path):
    from helpers import eagle

    c = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "x.db", "hostz": {}})
    res = eagle("history", config=c)
    assert res.returncode == 2 and "hostz: unknown key" in res.stderr


def test_top_keys_match_the_settings_model():
    assert TOP_KEYS == {k for k in Settings.model_fields if k not in ("base_dir", "source")}


def test_a_playbook_is_parsed_once_with_the_c_loader(tmp_path, monkeypatch):
    calls = []
    real = playbook_mod._line_map
    monkeypatch.setattr(playbook_mod, "_line_map", lambda text: calls.append(1) or real(text))
    p = write_playbook(tmp_path, "ok", "name: ok\nsteps:\n  - skill: shell\n    with: {command: 'true'}\n")
    playbook_mod.load_playbook(p)
    assert calls == []  # the line map (a second parse) is only built for an error
    import yaml
    if hasattr(yaml, "CSafeLoader"):
        assert playbook_mod.SafeLoader is yaml.CSafeLoader
    bad = write_playbook(tmp_path, "bad", "name: bad\nsteps:\n  - skill: shell\n    with: {command: 'true'}\n"
                                          "    timeout_z: 3\n")
    with pytest.raises(UsageError, match=r"bad.yaml:5: steps\[0\].timeout_z: unknown key"):
        playbook_mod.load_playbook(bad)
    assert calls == [1]


def test_show_loads_neither_the_engine_nor_pydantic_jinja_or_asyncio(tmp_path):
    from eaglebot.store import Store

    write_yaml(tmp_path / "eagle.yaml", {"audit_db": "a.db"})
    s = Store(tmp_path / "a.db")
    rid = s.create_run(NewRun(playbook="hello", hosts=["local"], inputs={}, variables={}, actor="tester", origin="cli"))
    s.finish_run(rid, "succeeded", exit_code=0)
    s.close()
    out = loaded_after(["show", "last"], tmp_path)
    assert out["rc"] == 0
    assert not {"pydantic", "jinja2", "asyncio", "eaglebot.engine", "eaglebot.config"} & set(out["mods"])


def test_run_without_metrics_on_an_existing_store_loads_neither_sqlite_utils_nor_the_judges(tmp_path):
    from eaglebot.store import Store

    (tmp_path / "books").mkdir()
    write_playbook(tmp_path / "books", "hi", "name: hi\nsteps:\n  - skill: shell\n    with: {command: 'true'}\n")
    write_yaml(tmp_path / "eagle.yaml", {"audit_db": "a.db", "playbooks_dir": "books"})
    Store(tmp_path / "a.db").close()
    code = ("import sys, json, contextlib, io\n"
            "from eaglebot.frontends.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    rc = main(['run', 'hi'])\n"
            "print(json.dumps([rc, sorted(m for m in sys.modules if m.startswith(('sqlite_utils', "
            "'eaglebot.history.regress', 'eaglebot.history.recorder')))]))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1]) == [0, []]
    con = __import__("sqlite3").connect(tmp_path / "a.db")
    assert con.execute("select fingerprint is not null from runs").fetchall() == [(1,)]   # still fingerprinted
