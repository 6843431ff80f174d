"""The /eagle router: pure parsing and access checks, and `eagle chat` on a real store."""
from __future__ import annotations

import pytest
import yaml

from support.inproc import eagle_here
from support.slack_harness import PLAYBOOKS

from eaglebot.frontends.chat.access import authorize
from eaglebot.frontends.chat.caller import Caller
from eaglebot.frontends.chat.grammar import parse, unescape
from eaglebot.frontends.chat.router import handle
from eaglebot.frontends.cli.chat import chat_main
from eaglebot.config import AccessConfig, load_settings


@pytest.mark.parametrize("text, fragment", [
    ("relaunch gpu-01; rm -rf /", "not a host name"),
    ("$(reboot)", "unknown command"),
    ("hello `id`", "not a host name"),
    ("hello 'a b", "quotes must be balanced"),
    ("hello gpu-01 rm -rf", "unexpected argument 'rm'"),
    ("hello --yes", "unknown option"),
    ("hello gpu-01 a=1 a=2", "given twice"),
    ("hello gpu-01 1bad=x", "not an input name"),
    ("ünïcode", "unknown command"),
    ("hello x=\x01", "control characters"),
    ("hel\x00lo x=1", "unknown command 'hel?lo'"),
    ("hello gp\x00u x=1", "'gp?u' is not a host name"),
    ("hello x\x00=1", "'x?' is not an input name"),
    ("show \x00", "usage: /eagle show ID"),
    ("x" * 10_000, "too long"),
    ("show abc", "usage: /eagle show ID"),
    ("baseline 12", "usage: /eagle baseline set ID"),
    ("trend bench gpu-01", "usage: /eagle trend"),
    ("logs gpu-01,gpu-02", "usage: /eagle logs HOST"),
    ("playbooks now", "takes no arguments"),
    ("/etc/passwd.yaml", "unknown command"),
    ("bench.yaml", "unknown command"),
])
def test_hostile_or_malformed_text_is_an_error_never_a_command(text, fragment):
    cmd = parse(text)
    assert cmd.name == "error" and fragment in cmd.error


def test_a_nul_in_an_input_value_is_left_to_the_engine_which_names_the_input():
    cmd = parse("hello x=a\x00b")
    assert cmd.name == "run" and cmd.inputs == (("x", "a\x00b"),)


def test_slack_escapes_are_undone_before_splitting_like_a_shell():
    assert unescape("a &amp;&amp; b &lt;x&gt; &amp;lt;") == "a && b <x> &lt;"
    cmd = parse('relaunch gpu-01,gpu-02 spec_steps=5 note="a &amp; b" aux_layers=[-1,2,30] --dry-run')
    assert cmd.name == "run" and cmd.playbook == "relaunch" and cmd.hosts == ("gpu-01", "gpu-02")
    assert dict(cmd.inputs) == {"spec_steps": "5", "note": "a & b", "aux_layers": "[-1,2,30]"}
    assert cmd.dry_run


def test_builtins_parse_their_arguments():
    assert parse("").name == "help"
    assert parse("HISTORY bench gpu-01 500").args == ("bench", "gpu-01", "50")
    assert parse("history").args == ("10",)
    assert parse("show #42").run_id == 42
    assert parse("baseline set 7").run_id == 7
    assert parse("trend bench gpu-01 output_throughput").args == ("bench", "gpu-01", "output_throughput")
    assert parse("hello greeting=x").hosts == ()


def test_access_operators_run_viewers_read_and_playbook_allowlists_apply():
    access = AccessConfig(operators=["UOP"], approvers=["UAP"], viewers=["UVIEW"],
                          playbooks={"relaunch": ["UOTHER"]})
    assert authorize(access, parse("hello"), "UOP") is None
    assert "only operators" in authorize(access, parse("hello"), "UVIEW")
    assert "allowlist" in authorize(access, parse("relaunch gpu-01"), "UOP")
    assert "only operators" in authorize(access, parse("cancel 3"), "UVIEW")
    assert authorize(access, parse("history"), "UVIEW") is None
    assert authorize(access, parse("history"), "UOP") is None   # operators can read too
    assert "only viewers" in authorize(access, parse("status"), "USTRANGER")
    assert authorize(access, parse("help"), "USTRANGER") is None
    assert "only operators" in authorize(AccessConfig(), parse("hello"), "ANYONE")  # closed by default
    assert authorize(AccessConfig(), parse("history"), "ANYONE") is None           # viewing is open


@pytest.fixture
def chat_settings(tmp_path):
    pdir = tmp_path / "playbooks"
    pdir.mkdir()
    for name in ("hello", "fails"):
        (pdir / f"{name}.yaml").write_text(yaml.safe_dump(PLAYBOOKS[name]))
    p = tmp_path / "eagle.yaml"
    p.write_text(yaml.safe_dump({"audit_db": str(tmp_path / "eagle.db"), "playbooks_dir": str(pdir),
                                 "access": {"operators": ["UNOBODY"], "viewers": ["UNOBODY"]}}))
    return load_settings(p)


def test_eagle_chat_runs_the_same_router_as_slack_as_text(chat_settings, capsys):
    assert chat_main(chat_settings, "hello greeting=from-chat") == 0
    cap = capsys.readouterr()
    assert "run #1 hello on local: succeeded" in cap.out and "from-chat" in cap.err  # progress on stderr
    assert chat_main(chat_settings, "fails") == 1
    assert chat_main(chat_settings, "history") == 0
    out = capsys.readouterr().out
    assert "#1" in out and "#2" in out and "failed" in out
    assert chat_main(chat_settings, "show 1") == 0
    assert "greet" in capsys.readouterr().out
    assert chat_main(chat_settings, "hello gpu-01; rm -rf /") == 2
    assert "not a host name" in capsys.readouterr().err
    assert chat_main(chat_settings, "help hello") == 0
    assert "greeting (str, default hello)" in capsys.readouterr().out
    assert chat_main(chat_settings, "hello times=9") == 2          # typed by the playbook: max 5
    assert chat_main(chat_settings, "nosuch") == 2
    assert "unknown playbook 'nosuch'" in capsys.readouterr().err


async def test_rerun_repeats_a_run_with_its_inputs_and_records_where_it_came_from(services, tmp_path):
    pdir = tmp_path / "pb"
    pdir.mkdir()
    (pdir / "hello.yaml").write_text(yaml.safe_dump(PLAYBOOKS["hello"]))
    svc = await services(playbooks_dir=str(pdir))
    caller = Caller("UALICE", check_access=False)
    first = await handle(svc, "hello greeting=again times=2", caller)
    await first.task
    again = await handle(svc, f"rerun {first.run_id}", caller)
    outcome = await again.task
    run = await svc.store.call(lambda s: s.get_run(outcome.run_id))
    assert outcome.status == "succeeded" and run["rerun_of"] == first.run_id
    assert run["inputs"] == {"greeting": "again", "times": 2}
    base = await handle(svc, f"baseline set {outcome.run_id}", caller)
    assert "is now the baseline of hello on local" in base.text
    assert (await svc.store.call(lambda s: s.baseline("hello", "local")))["run_id"] == outcome.run_id


async def test_logs_tails_the_newest_server_log_on_the_host(services, tmp_path):
    state = tmp_path / "state"
    (state / "logs").mkdir(parents=True)
    (state / "logs" / "server-30000.log").write_text("".join(f"[2026-01-01 00:00:{i:02d}] line {i}\n"
                                                          for i in range(100)) + "token xoxb-1234567890-abc\n")
    svc = await services(state_dir=str(state))
    reply = await handle(svc, "logs local", Caller("U1", check_access=False))
    assert "line 99" in reply.text and "line 10\n" not in reply.text
    assert "xoxb-1234567890" not in reply.text
    missing = await handle(svc, "logs nowhere", Caller("U1", check_access=False))
    assert missing.is_error and "unknown host 'nowhere'" in missing.text


def test_eagle_console_treats_each_line_as_a_slash_command(chat_settings):
    import subprocess
    import sys

    lines = "help shell\nhello greeting=console\nhistory\nbogus; rm -rf /\nexit\n"
    res = subprocess.run([sys.executable, "-m", "eaglebot", "console", "--config", str(chat_settings.source)],
                         input=lines, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "command (str, required)" in res.stdout                  # a skill's parameters
    assert "run #1 hello on local: succeeded" in res.stdout and "#1" in res.stdout
    assert "unknown command 'bogus;'" in res.stderr


async def test_an_edited_playbook_is_read_again(services, tmp_path):
    pdir = tmp_path / "pb"
    pdir.mkdir()
    pb = dict(PLAYBOOKS["hello"])
    (pdir / "hello.yaml").write_text(yaml.safe_dump(pb))
    svc = await services(playbooks_dir=str(pdir))
    caller = Caller("U1", check_access=False)
    assert "say hello" in (await handle(svc, "help hello", caller)).text
    first = await handle(svc, "hello", caller)
    await first.task
    pb["description"] = "say hello, edited"
    (pdir / "hello.yaml").write_text(yaml.safe_dump(pb))
    assert "say hello, edited" in (await handle(svc, "help hello", caller)).text
    pb["inputs"] = {}
    (pdir / "hello.yaml").write_text(yaml.safe_dump(pb))
    refused = await handle(svc, "hello greeting=x", caller)
    assert refused.is_error and "has no input 'greeting'" in refused.text


def test_help_lists_the_playbooks_first_and_the_skills_on_request(tmp_path):
    """Issue 34: `/eagle help` listed 19 skills and no playbook. The default config's shipped
    playbooks come first, with what each does; the skills, what playbooks are made of, by
    `help skills`."""
    res = eagle_here("chat", "help", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.startswith("playbooks (/eagle help PLAYBOOK: its inputs and examples):\n")
    books = [ln.split(":")[0].strip() for ln in out.split("\n\n")[0].splitlines()[1:]]
    assert {"relaunch", "verify", "bench"} <= set(books), books
    assert "/eagle help [playbook|skill|skills]" in out and "/eagle help skills lists them" in out
    assert "gpu.verify" not in out                           # the skills are one count, not a wall of names
    res = eagle_here("chat", "help skills", cwd=tmp_path)
    assert res.returncode == 0 and "\n  gpu.verify: " in res.stdout and "\n  shell: " in res.stdout
    assert "relaunch" in eagle_here("chat", "help relaunch", cwd=tmp_path).stdout
