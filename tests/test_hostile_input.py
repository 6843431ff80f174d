"""Hostile input: alias bombs, deep nesting, oversized values, NUL bytes, template text in
user values, broken config. Each is one clear line, a usage exit code, and nothing runs."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from support.helpers import write_playbook, write_yaml
from support.inproc import eagle_here as eagle, eagle_here_json as eagle_json

from eaglebot.engine import limits


def alias_bomb(levels: int, width: int = 9) -> str:
    parts = ["a0: &a0 [" + ",".join(["x"] * width) + "]"]
    parts += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "{" + ", ".join(parts) + "}"


@pytest.fixture
def cfg(tmp_path) -> Path:
    books = tmp_path / "books"
    books.mkdir()
    write_playbook(books, "echo", """
        name: echo
        inputs:
          word: {type: str, default: hi}
          env: {type: dict, required: false}
          layers: {type: "list[int]", required: false}
        vars:
          greeting: "say {{ word }}"
        steps:
          - skill: shell
            with: {command: "echo {{ greeting }}"}
    """)
    return write_yaml(tmp_path / "eagle.yaml", {
        "audit_db": "eagle.db", "playbooks_dir": "books",
        "hosts": {"local": {"transport": "local", "vars": {"secret_host_var": "s3cr3t-value"}}}})


def _runs(cfg: Path) -> list[dict]:
    db = cfg.parent / "eagle.db"
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    return [dict(r) for r in conn.execute("select * from runs")]


@pytest.mark.parametrize("value,needle", [
    (alias_bomb(7), "anchors (&name) are not allowed"),
    ("[" * 3000 + "]" * 3000, "nested more than 32 levels"),
    ('{"a": ' * 40 + "1" + "}" * 40, "nested more than 32 levels"),
    ("{k: " + "x" * 9000 + "}", "the limit is 8 KiB"),
])
def test_a_hostile_dict_input_is_refused_in_one_line(cfg, value, needle):
    res = eagle("run", "echo", "-e", f"env={value}", config=cfg)
    assert res.returncode == 2
    assert needle in res.stderr and res.stderr.count("\n") == 1
    assert _runs(cfg) == []                                  # a refusal is not a run row...
    conn = sqlite3.connect(cfg.parent / "eagle.db")
    events = conn.execute("select text, reason from events where kind = 'rejected'").fetchall()
    assert len(events) == 1 and needle in events[0][1]       # ...it is an audited event...
    assert len(events[0][0]) <= 500                          # ...that does not store the bomb
    assert (cfg.parent / "eagle.db").stat().st_size < 2_000_000


def test_list_inputs_refuse_aliases_too(cfg):
    res = eagle("run", "echo", "-e", "layers=[&a 1, *a]", config=cfg)
    assert res.returncode == 2 and "not allowed in inputs" in res.stderr


def test_all_inputs_of_a_request_are_capped(cfg, tmp_path):
    (tmp_path / "books" / "many.yaml").write_text(
        "name: many\ninputs:\n" + "".join(f"  k{i}: {{type: str, default: x}}\n" for i in range(10))
        + "steps:\n  - skill: audit.note\n    with: {message: hi}\n")
    args = [a for i in range(10) for a in ("-e", f"k{i}={'y' * 8000}")]
    res = eagle("run", "many", *args, config=cfg)
    assert res.returncode == 2 and "the limit is 64 KiB" in res.stderr


def test_a_nul_byte_in_an_input_is_refused_before_any_host_is_touched(cfg):
    from eaglebot.engine.playbook import InputSpec, coerce_input
    from eaglebot.errors import UsageError
    with pytest.raises(UsageError, match="NUL byte"):
        coerce_input("word", InputSpec(type="str"), "a\x00b")
    with pytest.raises(UsageError, match="NUL byte"):
        coerce_input("env", InputSpec(type="dict"), {"k": "a\x00b"})
    with pytest.raises(UsageError, match="not valid UTF-8"):
        coerce_input("word", InputSpec(type="str"), "caf\udce9")


USER_TEMPLATES = ["{{ 7*7 }}", "{{ secret_host_var }}", "{{ 'a'*10**10 }}",
                  "{% for i in range(10**5) %}{% for j in range(10**5) %}x{% endfor %}{% endfor %}"]


def test_a_users_value_is_data_never_a_template(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    write_playbook(books, "echo4", """
        name: echo4
        inputs: {w0: {type: str}, w1: {type: str}, w2: {type: str}, w3: {type: str}}
        vars: {said: "{{ w0 }}|{{ w1 }}|{{ w2 }}|{{ w3 }}"}
        steps:
          - skill: shell
            with: {command: "printf %s {{ said }}"}
    """)
    cfg = write_yaml(tmp_path / "eagle.yaml", {
        "audit_db": "eagle.db", "playbooks_dir": "books",
        "hosts": {"local": {"transport": "local", "vars": {"secret_host_var": "s3cr3t-value"}}}})
    args = [a for i, v in enumerate(USER_TEMPLATES) for a in ("-e", f"w{i}={v}")]
    res, doc = eagle_json("run", "echo4", *args, config=cfg)
    assert res.returncode == 0, res.stderr
    assert doc["steps"][0]["summary"] == "|".join(USER_TEMPLATES)
    assert "s3cr3t-value" not in res.stdout + res.stderr


def test_a_default_that_needs_a_missing_host_var_says_so(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    res = eagle("run", "patch-config", "-e", "aux_layers=1,2", config=cfg)
    assert res.returncode == 2   # refused before any step ran (issue 24)
    assert "host var `draft` is not set on local" in res.stderr
    assert "{{ draft }}/config.json" not in res.stderr


def test_a_users_path_is_used_as_given(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "hosts": {
        "local": {"transport": "local", "vars": {"draft": str(tmp_path)}}}})
    target = tmp_path / "{{ draft }}"
    target.mkdir()
    (target / "c.json").write_text('{"a": 1}')
    res = eagle("run", "patch-config", "-e", f"path={target}/c.json", "-e", 'set={"a": 2}', config=cfg)
    assert res.returncode == 0, res.stderr
    assert json.loads((target / "c.json").read_text()) == {"a": 2}


def test_linting_a_nine_level_alias_bomb_is_one_line(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text("name: bomb\nvars: " + alias_bomb(9) + "\nsteps:\n  - skill: audit.note\n    with: {message: x}\n")
    res = eagle("lint", str(p), timeout=60)
    assert res.returncode == 2
    assert "expands to more than 100,000 values" in res.stderr and res.stderr.count("\n") == 1


@pytest.mark.parametrize("content,needle", [
    ("name: deep\nvars: {x: " + "[" * 3000 + "]" * 3000 + "}\nsteps: []\n", "nested more than 64 levels"),
    (b"name: bad\xff\nsteps: []\n", "not UTF-8 text"),
])
def test_an_unreadable_playbook_is_one_line(tmp_path, content, needle):
    p = tmp_path / "x.yaml"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    res = eagle("lint", str(p))
    assert res.returncode == 2 and needle in res.stderr and res.stderr.count("\n") == 1


@pytest.mark.parametrize("config,needle", [
    ({"redact": ["("]}, "is not a valid regular expression"),
    ({"hosts": {"a": {"address": "x", "jump": "b"}, "b": {"address": "y", "jump": "a"}}}, "jump hosts form a loop"),
    ({"hosts": {"a": {"address": "x", "jump": "local"}}}, "a jump host must be an ssh host"),
])
def test_a_broken_config_is_one_line(tmp_path, config, needle):
    cfg = write_yaml(tmp_path / "eagle.yaml", config)
    res = eagle("hosts", config=cfg)
    assert res.returncode == 2 and needle in res.stderr and res.stderr.count("\n") == 1


@pytest.mark.parametrize("age", ["1000000d", "99999999999999999999h", "5000000w"])
def test_prune_with_an_absurd_age_is_one_line(tmp_path, age):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    res = eagle("prune", "--older-than", age, config=cfg)
    assert res.returncode == 2 and "at most 100 years" in res.stderr and res.stderr.count("\n") == 1


def test_the_limits_are_what_the_readme_says():
    assert (limits.MAX_VALUE_BYTES, limits.MAX_REQUEST_BYTES, limits.MAX_DEPTH) == (8192, 65536, 32)


async def test_a_nul_byte_from_a_playbook_fails_one_step_and_the_connection_lives(services, sshd):
    """A NUL that reaches a command (here from a playbook var) fails that step with one
    sentence before anything is sent; the next step on the same SSH connection works."""
    from eaglebot.engine.runner import RunRequest
    from support.gpu_helpers import playbook
    svc = await services({"r": sshd.host_config()})
    book = playbook(json.dumps({"name": "nul", "vars": {"v": "a\x00b"}, "steps": [
        {"name": "bad", "skill": "shell", "continue_on_error": True, "with": {"command": "echo {{ v }}"}},
        {"name": "good", "skill": "shell", "with": {"command": "echo fine"}}]}))
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["r"]))
    assert [s.status for s in out.steps] == ["failed", "changed"]
    assert "NUL byte" in out.steps[0].summary and out.steps[1].summary == "fine"
