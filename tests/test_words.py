"""The `/eagle` words are declared once (frontends/chat/words.py): the engine's reserved names,
the help, the access classes, the grammar's dispatch and the router's handlers all come from
that table, and adding a word is one entry plus its handler."""
from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from eaglebot.engine import words as engine_words
from eaglebot.engine.playbook import RESERVED
from eaglebot.frontends.chat.access import authorize, command_class
from eaglebot.frontends.chat.grammar import Command, parse
from eaglebot.frontends.chat.words import BY_NAME, HANDLERS, RUN, USAGE, WORDS
from eaglebot.config import AccessConfig

ROOT = Path(__file__).resolve().parents[1]


def test_the_engine_reserves_exactly_the_table_s_words_as_playbook_names():
    assert RESERVED == {w.name for w in WORDS} == set(engine_words.NAMES)
    assert len(WORDS) == len(BY_NAME)   # no word declared twice


def test_the_help_is_the_entries_usage_lines_in_table_order_and_names_every_word():
    assert USAGE == "\n".join(w.usage for w in (RUN, *WORDS) if w.usage)
    lines = USAGE.splitlines()
    for w in WORDS:
        # a word with no line of its own is on its neighbour's: `/eagle playbooks | hosts`
        assert any(ln.startswith(f"/eagle {w.name}") or f"| {w.name} " in ln or ln.endswith(f"| {w.name}")
                   for ln in lines), w.name
    assert USAGE.index("/eagle help") < USAGE.index("/eagle reload") < USAGE.index("/eagle tune")


def test_each_word_dispatches_to_its_entry_s_parser_and_handler():
    assert set(HANDLERS) == {"run", *BY_NAME}
    for w in WORDS:
        assert HANDLERS[w.name] is w.handler
        for text in (w.name, w.name.upper(), f"{w.name} 42", f"{w.name} x y z"):
            words = text.split()
            assert parse(text) == w.parse(w.name, words[1:], text), text
    assert parse("relaunch gpu-01 x=1") == RUN.parse("relaunch", ["gpu-01", "x=1"], "relaunch gpu-01 x=1")


def test_each_word_s_access_class_is_its_entry_s():
    closed = AccessConfig(viewers=[], operators=[], approvers=[])
    for w in WORDS:
        for cmd_args in ((), ("pause", "nightly"), ("42",)):
            cmd = Command(w.name, cmd_args)
            assert command_class(cmd) == w.access_of(cmd_args)
            refused = authorize(closed, cmd, "U1")
            assert (refused is None) == (w.access_of(cmd_args) == "free"), (w.name, cmd_args, refused)
    assert command_class(Command("schedule")) == "view" and command_class(Command("schedule", ("pause", "n"))) == "operate"
    assert command_class(Command("no-such-word")) == "operate"   # closed by default


HANDLER = '''
async def _ping(services, cmd, caller):
    from eaglebot.frontends.chat.reply import listing
    return listing("pong " + " ".join(cmd.args))


'''
ENTRY = '''    Word("ping", "view", "/eagle ping                          answers pong", args.no_args, _ping),
'''


def _stage(tmp: Path) -> Path:
    stage = tmp / "stage"
    shutil.copytree(ROOT / "src" / "eaglebot", stage / "eaglebot", ignore=shutil.ignore_patterns("__pycache__"))
    words = stage / "eaglebot" / "frontends" / "chat" / "words.py"
    text = words.read_text()
    # where a contributor would write them: the handler before the table, the entry last in it
    table = text.index("WORDS: tuple[Word, ...] = (")
    end = text.index("\n)\n", table) + 1
    words.write_text(text[:table] + HANDLER + text[table:end] + ENTRY + text[end:])
    return stage


CHECK = textwrap.dedent('''
    import asyncio
    from eaglebot.config import AccessConfig
    from eaglebot.engine.playbook import RESERVED
    from eaglebot.frontends.chat.access import authorize, command_class
    from eaglebot.frontends.chat.grammar import parse
    from eaglebot.frontends.chat.words import HANDLERS, USAGE
    cmd = parse("ping")
    assert cmd.name == "ping", cmd
    assert parse("ping now").error == "/eagle ping takes no arguments (got 'now')"
    assert command_class(cmd) == "view"
    assert authorize(AccessConfig(viewers=["U1"], operators=[], approvers=[]), cmd, "U1") is None
    assert "/eagle ping                          answers pong" in USAGE.splitlines()
    assert "ping" in RESERVED
    print(asyncio.run(HANDLERS["ping"](None, cmd, None)).text)
''')


def _python(stage: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHECK], cwd=stage, env={"PYTHONPATH": str(stage), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def test_adding_a_word_is_one_entry_plus_its_handler_and_its_name_for_the_engine(tmp_path):
    stage = _stage(tmp_path)
    res = _python(stage)
    # without its name in engine/words.py the table refuses to load, naming the word and both files
    assert res.returncode != 0 and "the /eagle words ['ping'] are in one of" in res.stderr, res.stderr[-2000:]
    names = stage / "eaglebot" / "engine" / "words.py"
    names.write_text(names.read_text().replace('"ack")', '"ack", "ping")'))
    res = _python(stage)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "pong"
