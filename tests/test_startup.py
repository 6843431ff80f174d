"""Start-up: what a fresh command does besides its job (tests/test_startup_budget.py counts its
instructions; tests/bench/bench_startup.py measures the time)."""
from __future__ import annotations

import pytest

from support.helpers import write_playbook, write_yaml

from eaglebot.config import Settings
from eaglebot.configfile import TOP_KEYS
from eaglebot.engine import playbook as playbook_mod
from eaglebot.errors import UsageError

def test_history_without_a_db_creates_none(tmp_path):
    from support.helpers import eagle

    c = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "a.db"})
    res = eagle("history", config=c)
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "a.db").exists()


def test_history_with_a_bad_config_still_says_what_is_wrong(tmp_path):
    from support.helpers import eagle

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


def test_a_run_without_metrics_is_still_fingerprinted(tmp_path):
    from support.helpers import eagle

    (tmp_path / "books").mkdir()
    write_playbook(tmp_path / "books", "hi", "name: hi\nsteps:\n  - skill: shell\n    with: {command: 'true'}\n")
    c = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "a.db", "playbooks_dir": "books"})
    res = eagle("run", "hi", config=c)
    assert res.returncode == 0, res.stderr
    con = __import__("sqlite3").connect(tmp_path / "a.db")
    assert con.execute("select fingerprint is not null from runs").fetchall() == [(1,)]


def _commands(parser):
    return next(a for a in parser._actions if a.dest == "cmd").choices


def test_the_parser_built_for_a_command_word_parses_it_as_the_whole_parser_does():
    from eaglebot.frontends.cli.main import build_parser, command_word

    whole = _commands(build_parser())
    for name, sub in whole.items():
        one = _commands(build_parser(name))
        assert name in one and len(one) <= 4, (name, list(one))   # `diff`, `bisect`, `sweep`, `ack` come as one
        assert one[name].format_help() == sub.format_help()
    assert list(_commands(build_parser("no-such-command"))) == list(whole)   # its error lists them all
    assert command_word(["--config", "e.yaml", "run", "hello"]) == "run"
    assert command_word(["--conf", "e.yaml", "show", "last"]) == "show"      # argparse's prefix of --config
    assert command_word(["--config=e.yaml", "history"]) == "history"
    for line in (["-h", "run"], ["--version"], ["--he"], [], ["--"]):
        assert command_word(line) is None                                    # the whole parser answers


def test_a_line_parses_the_same_with_only_its_command_built():
    from eaglebot.frontends.cli.main import build_parser, command_word

    for line in (["run", "hello", "-H", "local", "-e", "a=1", "--json"], ["--config", "x.yaml", "show", "last"],
                 ["schedule", "pause", "nightly"], ["audit", "verify"], ["watch", "3"], ["history", "--limit", "5"]):
        assert vars(build_parser(command_word(line)).parse_args(line)) == vars(build_parser().parse_args(line))
