"""Unknown names are refused with the nearest known one suggested (issue 34 item 4; DESIGN:
"did you mean 'relaunch'?"): playbooks, inputs, hosts, groups, skills and every eagle.yaml key,
with the file's line; the same words in the CLI and in Slack. A host var nothing reads but near
one that is (`pyton:`) is a warning, in `eagle doctor` and in the run."""
from __future__ import annotations

import json

import pytest
import sqlite_utils
from support.helpers import write_playbook, write_yaml
from support.inproc import eagle_here


def _rejections(db) -> list[dict]:
    return list(sqlite_utils.Database(db).query("select text, reason from events where kind = 'rejected'"))


@pytest.mark.parametrize("argv,sentence", [
    (["run", "relanch"], "unknown playbook 'relanch'; did you mean 'relaunch'?"),
    (["run", "relaunch", "-H", "box", "-e", "spec_step=3"], "playbook 'relaunch' has no input 'spec_step'; "
                                                             "did you mean 'spec_steps'?"),
    (["run", "hello", "-H", "bx"], "unknown host 'bx'; did you mean 'box'?"),
    (["run", "hello", "-H", "gpus:!bxo"], "unknown host 'bxo'; did you mean 'box'?"),
    (["run", "hello", "-H", "gpuz"], "unknown host 'gpuz'; did you mean 'gpus'?"),   # a group
])
def test_the_cli_suggests_the_nearest_name_in_one_sentence_and_records_the_rejection(tmp_path, argv, sentence):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "hosts": {"box": {"transport": "local"}},
                                               "groups": {"gpus": ["box"]}})
    res = eagle_here(*argv, config=cfg)
    assert res.returncode == 2 and res.stderr == f"eagle: {sentence}\n", res.stderr
    assert [r["reason"] for r in _rejections(tmp_path / "eagle.db")] == [sentence]


def test_a_far_name_still_lists_what_is_known(tmp_path):
    res = eagle_here("run", "zzzzzz", cwd=tmp_path)
    assert res.returncode == 2 and "unknown playbook 'zzzzzz' (known: bench," in res.stderr
    assert "did you mean" not in res.stderr


async def test_slack_says_the_same_words(harness, fake):
    h = await harness()

    async def answer(text: str) -> str:
        status, ack = await h.command(text)
        assert status == 200
        if ack.get("text"):
            return ack["text"]
        return "".join(c.all_text() for c in await fake.wait_for(lambda: h.responses()))

    assert "unknown playbook 'helo'; did you mean 'hello'?" in await answer("helo local")
    assert "playbook 'hello' has no input 'greting'; did you mean 'greeting'?" in await answer("hello local greting=hi")
    assert "unknown host 'locl'; did you mean 'local'?" in await answer("hello locl")
    assert "did you mean `/eagle status`?" in await answer("staus")
    assert "no playbook or skill named 'gpu.verfy'; did you mean 'gpu.verify'?" in await answer("help gpu.verfy")
    assert await h.query("select id from runs") == []


@pytest.mark.parametrize("data,line,sentence", [
    ({"hostz": {}}, 1, "hostz: unknown key (did you mean 'hosts'?)"),
    ({"hosts": {"gpu-01": {"adress": "10.0.0.7"}}}, 3, "hosts.gpu-01.adress: unknown key (did you mean 'address'?)"),
    ({"hosts": {"gpu-01": {"varz": {"python": "/x"}}}}, 3, "hosts.gpu-01.varz: unknown key (did you mean 'vars'?)"),
    # a member of a range points at the range's line
    ({"hosts": {"gpu-[01:04]": {"vars": {}, "prot": 22}}}, 4,
     "hosts.gpu-01.prot: unknown key (did you mean 'port'?)"),
    ({"host_defaults": {"usr": "ops"}}, 2, "host_defaults: usr: not a setting hosts share (did you mean 'user'?)"),
    ({"slack": {"chanel": "C1"}}, 2, "slack.chanel: unknown key (did you mean 'channel'?)"),
    ({"regression": {"confirm_run": 2}}, 2, "regression.confirm_run: unknown key (did you mean 'confirm_runs'?)"),
    ({"schedules": [{"name": "n", "playbook": "bench", "every": "1h", "inptus": {}}]}, 5,
     "schedules.0.inptus: unknown key (did you mean 'inputs'?)"),
    ({"health_watch": {"xid": {"79": {"severity": "fail", "windw_s": 60}}}}, 5,
     "health_watch.xid.79.windw_s: unknown key (did you mean 'window_s'?)"),
    ({"hosts": {"gpu-01": {}}, "groups": {"g": ["gpu-1"]}}, 4, "group 'g': unknown host 'gpu-1'; did you mean 'gpu-01'?"),
])
def test_every_config_key_suggests_the_nearest_at_its_line(tmp_path, data, line, sentence):
    cfg = write_yaml(tmp_path / "eagle.yaml", data)
    res = eagle_here("hosts", config=cfg)
    assert res.returncode == 2 and res.stderr == f"eagle: {cfg}:{line}: {sentence}\n", res.stderr


def test_lint_suggests_skills_and_keys(tmp_path):
    bad = write_playbook(tmp_path, "bad", """
        name: bad
        steps:
          - skill: gpu.verfy
    """)
    keys = write_playbook(tmp_path, "keys", """
        name: keys
        inputs:
          a: {type: int, defualt: 3}
        steps:
          - skill: shell
            with: {command: "true"}
    """)
    res = eagle_here("lint", str(bad), str(keys), cwd=tmp_path)
    assert res.returncode == 2
    assert f"{bad}:3: steps[0].skill: unknown skill 'gpu.verfy'; did you mean 'gpu.verify'?" in res.stderr
    assert f"{keys}:3: inputs.a.defualt: unknown key (did you mean 'default'?)" in res.stderr


def test_a_near_miss_host_var_is_a_warning_in_the_run_and_in_doctor(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "hosts": {"box": {
        "transport": "local", "vars": {"pyton": "/usr/bin/python3", "team_owner": "ml-infra"}}}})
    warning = "host var `pyton` on box is read by no playbook or skill; did you mean 'python'?"
    res = eagle_here("run", "hello", "-H", "box", "--json", config=cfg)
    assert res.returncode == 0, res.stderr
    warnings = json.loads(res.stdout)["warnings"]
    assert warnings == [warning]    # a name far from every known one (team_owner) is the team's own
    doctor = eagle_here("doctor", config=cfg)
    assert f"WARN  host vars: {warning}" in doctor.stdout.splitlines()


def test_the_known_host_vars_are_derived_from_playbooks_and_skills(tmp_path):
    from eaglebot.engine.hostvars import known_host_vars, skill_reads
    from eaglebot.engine.registry import shipped
    from eaglebot.sdk import PATH_VARS

    reads = skill_reads(shipped())
    assert {"python", "nvidia_smi", "server_log", "expected_gpus", "scheduler"} <= reads   # ctx.vars.get(...)
    known = known_host_vars(shipped(), None)
    assert PATH_VARS <= known and reads <= known
    assert {"port", "model", "draft", "spec_steps", "tp"} <= known     # the shipped playbooks' templates and inputs
    pdir = tmp_path / "books"
    pdir.mkdir()
    write_playbook(pdir, "mine", """
        name: mine
        steps:
          - skill: shell
            with: {command: "echo {{ my_team_var }}"}
    """)
    assert "my_team_var" in known_host_vars(shipped(), pdir) and "my_team_var" not in known
