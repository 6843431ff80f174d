"""A host's output never drives the terminal (issue 35, LOW): escape sequences a step prints
(OSC 52 writing the clipboard, clearing the screen, colours, a carriage return overwriting
the line, a one-character CSI, a bidirectional override) reach `eagle run -v`, `eagle run`'s
summary, `eagle show` and `eagle chat` as visible escapes, through the real CLI, on `local`
and over a real sshd."""
from __future__ import annotations

import json

import pytest
import yaml

from helpers import eagle
from inproc import eagle_here

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
