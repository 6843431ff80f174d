"""Playbook loading: schema, file:line errors, input typing, templating rules."""
from __future__ import annotations

import pytest

from support.helpers import write_playbook

from eaglebot.engine import templating
from eaglebot.errors import UsageError
from eaglebot.engine.playbook import InputSpec, coerce_input, load_playbook, resolve_inputs


def _err(tmp_path, body: str) -> str:
    p = write_playbook(tmp_path, "bad", body)
    with pytest.raises(UsageError) as ei:
        load_playbook(p)
    return str(ei.value).replace(str(tmp_path) + "/", "")


def test_invalid_skill_param_names_file_line_and_field(tmp_path):
    msg = _err(tmp_path, """
        name: bad
        steps:
          - skill: shell
            with: {command: "true"}
          - skill: wait
            timeout_s: 5
            with:
              seconds: soon
    """)
    assert msg.startswith("bad.yaml:8: steps[1].with.seconds: ")
    assert "valid number" in msg


def test_step_timeout_type_error_points_at_its_line(tmp_path):
    msg = _err(tmp_path, """
        name: bad
        steps:
          - skill: shell
            timeout_s: ten
            with: {command: "true"}
    """)
    assert msg.startswith("bad.yaml:4: steps[0].timeout_s: ")


def test_unknown_skill_is_caught_at_load_time(tmp_path):
    msg = _err(tmp_path, """
        name: bad
        steps:
          - skill: shell
            with: {command: "true"}
          - skill: gpu.explode
    """)
    assert msg.startswith("bad.yaml:5: steps[1].skill: unknown skill 'gpu.explode'")


def test_unknown_step_key_is_an_error(tmp_path):
    msg = _err(tmp_path, """
        name: bad
        steps:
          - skill: shell
            retires: 2
            with: {command: "true"}
    """)
    assert msg == "bad.yaml:4: steps[0].retires: unknown key (did you mean 'retries'?)"


def test_unknown_skill_param_is_an_error(tmp_path):
    msg = _err(tmp_path, """
        name: bad
        steps:
          - skill: shell
            with:
              command: "true"
              comand: "false"
    """)
    assert msg == "bad.yaml:6: steps[0].with.comand: unknown key (did you mean 'command'?)"


def test_missing_required_skill_param(tmp_path):
    msg = _err(tmp_path, """
        name: bad
        steps:
          - skill: shell
            with: {cwd: /tmp}
    """)
    assert msg.startswith("bad.yaml:4: steps[0].with.command: field required")


def test_templated_param_is_checked_after_rendering_not_at_load(tmp_path):
    p = write_playbook(tmp_path, "ok", """
        name: ok
        inputs: {s: {type: float, default: 1}}
        steps:
          - skill: wait
            with: {seconds: "{{ s }}"}
    """)
    assert load_playbook(p).steps[0].with_ == {"seconds": "{{ s }}"}


def test_reserved_name_is_refused(tmp_path):
    msg = _err(tmp_path, """
        name: history
        steps:
          - skill: shell
            with: {command: "true"}
    """)
    assert msg.startswith("bad.yaml:1: name: ") and "reserved" in msg


def test_invalid_yaml_reports_line(tmp_path):
    msg = _err(tmp_path, "name: bad\nsteps:\n  - skill: shell\n    with: {command: [unclosed\n")
    assert msg.startswith("bad.yaml:") and "invalid YAML" in msg


def test_bad_when_expression(tmp_path):
    msg = _err(tmp_path, """
        name: bad
        steps:
          - skill: shell
            when: "x ==="
            with: {command: "true"}
    """)
    assert msg.startswith("bad.yaml:4: steps[0].when: invalid expression")


def test_empty_steps_is_an_error(tmp_path):
    msg = _err(tmp_path, "name: bad\nsteps: []\n")
    assert msg.startswith("bad.yaml:2: steps: ")


def test_bad_input_default_is_caught(tmp_path):
    msg = _err(tmp_path, """
        name: bad
        inputs:
          n: {type: int, default: many}
        steps:
          - skill: shell
            with: {command: "true"}
    """)
    assert msg.startswith("bad.yaml:3: inputs.n.default: input n: 'many' is not an int")


@pytest.mark.parametrize("raw,expected", [
    ("[-1,2,30]", [-1, 2, 30]),
    ("-1,2,30", [-1, 2, 30]),
    ("[2, 30, 58]", [2, 30, 58]),
    ([1, 2], [1, 2]),
])
def test_list_inputs_accept_flow_and_comma_forms(raw, expected):
    assert coerce_input("aux", InputSpec(type="list[int]"), raw) == expected


def test_input_typing_and_bounds():
    spec = InputSpec(type="int", min=1, max=16)
    assert coerce_input("s", spec, "5") == 5
    with pytest.raises(UsageError, match="above the maximum 16"):
        coerce_input("s", spec, "17")
    with pytest.raises(UsageError, match="'five' is not an int"):
        coerce_input("s", spec, "five")
    assert coerce_input("b", InputSpec(type="bool"), "yes") is True
    assert coerce_input("d", InputSpec(type="dict"), '{"NCCL_MIN_NCHANNELS": "8"}') == {"NCCL_MIN_NCHANNELS": "8"}
    with pytest.raises(UsageError, match="JSON object"):
        coerce_input("d", InputSpec(type="dict"), "[1]")
    with pytest.raises(UsageError, match="not one of"):
        coerce_input("c", InputSpec(type="str", choices=["EAGLE", "EAGLE3"]), "NGRAM")


def test_unknown_and_missing_inputs(tmp_path):
    pb = load_playbook(write_playbook(tmp_path, "p", """
        name: p
        inputs:
          need: {type: str}
          opt: {type: "list[int]", required: false}
        steps:
          - skill: shell
            with: {command: "true"}
    """))
    with pytest.raises(UsageError, match="has no input 'nope'"):
        resolve_inputs(pb, {"need": "x", "nope": "1"})
    with pytest.raises(UsageError, match="needs input 'need'"):
        resolve_inputs(pb, {})
    assert resolve_inputs(pb, {"need": "x"}) == {"need": "x"}


def test_single_expression_keeps_native_type():
    ctx = {"layers": [2, 30, 58], "n": 3}
    assert templating.render_value("{{ layers }}", ctx) == [2, 30, 58]
    assert templating.render_value("{{ n + 1 }}", ctx) == 4
    assert templating.render_value("n={{ n }}", ctx) == "n=3"
    assert templating.render_value({"a": ["{{ n }}"]}, ctx) == {"a": [3]}


def test_undefined_variable_fails_strictly():
    with pytest.raises(templating.TemplateFailure, match="undefined"):
        templating.render_value("{{ nope }}", {})
    with pytest.raises(templating.TemplateFailure, match="undefined"):
        templating.render_value("x {{ nope }}", {})


def test_shell_strings_quote_each_value_unless_raw():
    ctx = {"x": "a b; rm -rf /", "y": "$(reboot)", "flags": "-l -a"}
    assert templating.render_value("echo {{ x }} {{ y }}", ctx, shell=True) == "echo 'a b; rm -rf /' '$(reboot)'"
    assert templating.render_value("ls {{ flags | raw }}", ctx, shell=True) == "ls -l -a"


def test_sandbox_blocks_attribute_escapes():
    with pytest.raises(templating.TemplateFailure):
        templating.render_value("{{ ''.__class__.__mro__[1].__subclasses__() }}", {})
