"""A host's output never drives the terminal (issue 35, LOW): escape sequences a step prints
(OSC 52 writing the clipboard, clearing the screen, colours, a carriage return overwriting
the line, a one-character CSI, a bidirectional override) reach `eagle run -v`, `eagle run`'s
summary, `eagle show` and `eagle chat` as visible escapes, through the real CLI, on `local`
and over a real sshd."""
from __future__ import annotations

import json

import pytest
import yaml

from support.helpers import eagle
from support.inproc import eagle_here

# printf's escapes: ESC ] 52 (clipboard), ESC [2J (clear), ESC [31m (red), CR, U+009B, U+202E
HOSTILE = r"printf 'x\033]52;c;ZXZpbA==\007\033[2J\033[31mred\rover\302\233\342\200\256txt\n'; exit 3"
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


@pytest.fixture
def cfg(tmp_path, sshd):
    pdir = tmp_path / "playbooks"
    pdir.mkdir()
    (pdir / "hostile.yaml").write_text(yaml.safe_dump({"name": "hostile", "steps": [
        {"name": "prints", "skill": "shell", "with": {"command": HOSTILE}}]}))
    path = tmp_path / "eagle.yaml"
    path.write_text(yaml.safe_dump({"audit_db": "eagle.db", "playbooks_dir": "playbooks",
                                    "hosts": {"box": sshd.host_config()}}))
    return path


def _clean(text: str) -> None:
    assert not [c for c in RAW if c in text], repr(text)


@pytest.mark.parametrize("host", ["local", "box"])
def test_escape_sequences_from_a_host_are_shown_not_obeyed(cfg, host):
    res = eagle("run", "hostile", "-H", host, "-v", config=cfg)
    assert res.returncode == 1, res.stdout + res.stderr
    for text in (res.stdout, res.stderr):
        _clean(text)
    assert "\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J\\x1b[31mred\\x0dover\\x9b\\u202etxt" in res.stderr
    run_id = json.loads(eagle_here("history", "--json", config=cfg).stdout)[0]["run_id"]
    shown = eagle_here("show", str(run_id), config=cfg)
    assert shown.returncode == 0
    _clean(shown.stdout + shown.stderr)
    assert "over\\x9b\\u202etxt" in shown.stdout
    chat = eagle_here("chat", f"show {run_id}", config=cfg)
    _clean(chat.stdout + chat.stderr)
    # the whole output is still there, byte for byte, for whoever asks for it raw
    raw = eagle("show", str(run_id), "--output", config=cfg)
    assert "\x1b]52;c;ZXZpbA==\x07" in raw.stdout


def test_doctor_shows_a_hostile_hosts_answer_escaped_and_bounded(tmp_path):
    """A host whose Python answers with an OSC 52 clipboard write and megabytes (issue 46, LOW):
    `eagle doctor`'s line shows the escapes and stays short."""
    evil = tmp_path / "python"
    evil.write_text("#!/bin/sh\nprintf '3.12\\033]52;c;ZXZpbA==\\007\\033[2J\\n'; "
                    "head -c 4400000 /dev/zero | tr '\\0' A; echo\n")
    evil.chmod(0o755)
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": "eagle.db", "hosts": {
        "box": {"transport": "local", "vars": {"python": str(evil)}}}}))
    res = eagle("doctor", config=cfg)
    _clean(res.stdout + res.stderr)
    [line] = [x for x in res.stdout.splitlines() if "host box python" in x]
    assert "3.12\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J\\n" in line and "more characters cut" in line
    assert len(line) < 800 and len(res.stdout) < 20_000
