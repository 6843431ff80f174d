"""A recursive YAML alias (`vars: &v {x: *v}`) in any file the bot reads is refused at its
line, in bounded time: it used to hang `eagle lint` and `eagle playbooks` with memory growing
without bound (issue 17, "Requests and input")."""
from __future__ import annotations

import pytest

from support.helpers import eagle

RECURSIVE = {
    "mapping": "vars: &v {x: *v}\n",
    "sequence": "vars: {x: &l [1, *l]}\n",
    "deep": "vars:\n  a: &v\n    b:\n      c: [1, {d: *v}]\n",
    "block": "vars: &v\n  x: 1\n  y: *v\n",
}
STEPS = "steps:\n  - skill: audit.note\n    with: {message: hi}\n"


def _playbook(tmp_path, shape: str):
    p = tmp_path / "pb" / "rec.yaml"
    p.parent.mkdir(exist_ok=True)
    p.write_text("name: rec\n" + RECURSIVE[shape] + STEPS)
    return p


@pytest.mark.parametrize("shape", list(RECURSIVE))
def test_lint_refuses_a_recursive_alias_with_its_line(tmp_path, shape):
    p = _playbook(tmp_path, shape)
    res = eagle("lint", str(p), cwd=tmp_path, timeout=15)
    assert res.returncode == 2, res.stderr
    line = next(i for i, s in enumerate(p.read_text().splitlines(), 1) if "*" in s)
    assert f"rec.yaml:{line}: " in res.stderr and "recursive alias" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_playbooks_and_run_refuse_a_recursive_playbook_in_bounded_time(tmp_path):
    p = _playbook(tmp_path, "mapping")
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(f"audit_db: {tmp_path / 'eagle.db'}\nplaybooks_dir: {p.parent}\n")
    listed = eagle("playbooks", config=cfg, timeout=15)
    assert "rec: INVALID" in listed.stdout and "rec.yaml:2: " in listed.stdout
    assert "hello:" in listed.stdout           # the others are still listed
    ran = eagle("run", "rec", config=cfg, timeout=15)
    assert ran.returncode == 2 and "rec.yaml:2: " in ran.stderr and "recursive alias" in ran.stderr


def test_a_recursive_alias_in_eagle_yaml_is_refused_with_its_line(tmp_path):
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(f"audit_db: {tmp_path / 'eagle.db'}\n"
                   "hosts: &h\n  gpu-01: {address: 127.0.0.1, vars: *h}\n")
    res = eagle("hosts", config=cfg, timeout=15)
    assert res.returncode == 2
    assert "eagle.yaml:3: " in res.stderr and "recursive alias" in res.stderr
    sched = tmp_path / "sched.yaml"
    sched.write_text("schedules:\n  - {name: n, playbook: hello, every: 5m, inputs: &i {greeting: *i}}\n")
    res = eagle("schedule", "list", config=sched, timeout=15)
    assert res.returncode == 2 and "sched.yaml:2: " in res.stderr and "recursive alias" in res.stderr


def test_an_alias_in_an_input_value_is_refused(tmp_path):
    res = eagle("run", "hello", "-e", "greeting=&v [*v]", "--dry-run", cwd=tmp_path, timeout=15)
    # a str input keeps the text as typed; a dict input parses it and refuses the alias
    assert res.returncode == 0, res.stderr
    res = eagle("run", "patch-config", "-e", "set={a: &v [*v]}", "--dry-run", cwd=tmp_path, timeout=15)
    assert res.returncode == 2 and "input set:" in res.stderr and "not allowed in inputs" in res.stderr
