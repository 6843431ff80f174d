"""Bytes that are not text in an input: invalid UTF-8 (argv and stdin carry it as surrogate
escapes) and NUL, in scalars, lists, dicts and keys, from every front end. Each is an input
error naming the input (exit 2) with a `rejected` event, and nothing reaches a host
(issue 17, "Requests and input"). They used to be "internal error" (the rejection could not
be stored) and "the persistent shell is gone" (the NUL reached the host)."""
from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.helpers import eagle
from support.slack_harness import PLAYBOOKS, open_harness

BOOK = {
    "name": "mark", "description": "touches a marker (to prove nothing ran)",
    "inputs": {"word": {"type": "str", "default": "hi"}, "names": {"type": "list[str]", "required": False},
               "env": {"type": "dict", "required": False}},
    "steps": [{"skill": "shell", "with": {"command": "touch {{ marker }}; echo {{ word }} {{ names | default('') }}"}}],
}


@pytest.fixture
def cfg(tmp_path) -> Path:
    books = tmp_path / "books"
    books.mkdir()
    (books / "mark.yaml").write_text(yaml.safe_dump(BOOK))
    p = tmp_path / "eagle.yaml"
    p.write_text(yaml.safe_dump({"audit_db": "eagle.db", "playbooks_dir": "books",
                                 "hosts": {"local": {"transport": "local",
                                                     "vars": {"marker": str(tmp_path / "ran")}}}}))
    return p


def _db(cfg: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(cfg.parent / "eagle.db")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _refused(cfg: Path, res: subprocess.CompletedProcess, needle: str, events: int = 1) -> None:
    err = res.stderr if isinstance(res.stderr, str) else res.stderr.decode("utf-8", "replace")
    assert res.returncode == 2, err
    assert needle in err and "internal error" not in err and "Traceback" not in err, err
    assert _db(cfg, "select count(*) from runs") == [(0,)]
    rows = _db(cfg, "select reason from events where kind = 'rejected'")
    assert len(rows) == events and needle in rows[-1][0], rows
    assert not (cfg.parent / "ran").exists()


CLI_CASES = {
    "invalid utf-8 in a str": (["word=caf\udce9"], "input word: the value is not valid UTF-8 text (\\xe9"),
    "invalid utf-8 in a list": (["names=a,b\udcff"], "input names: the value is not valid UTF-8 text"),
    "nul in a list (YAML escape)": (['names=["a\\0b"]'], "input names: the value contains a NUL byte"),
    "nul in a list (JSON escape)": (['names=["a\\u0000b"]'], "input names: the value contains a NUL byte"),
    "nul in a dict value": (['env={"K": "a\\u0000"}'], "input env: the value contains a NUL byte"),
    "nul in a dict key": (['env={"K\\u0000": "v"}'], "input env: the value contains a NUL byte"),
    "invalid utf-8 in a dict key": (['env={"K\udcff": "v"}'], "input env: the value is not valid UTF-8 text"),
    "invalid utf-8 in an input name": (["wo\udcffrd=x"], "input 'wo\\xffrd': input names are plain identifiers"),
}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_refuses_bytes_that_are_not_text_naming_the_input(cfg, case):
    values, needle = CLI_CASES[case]
    res = eagle("run", "mark", *[a for v in values for a in ("-e", v)], config=cfg, timeout=60)
    _refused(cfg, res, needle)


def test_eagle_chat_refuses_invalid_utf8_naming_the_input(cfg):
    res = eagle("chat", "mark word=caf\udce9", config=cfg, timeout=60)
    _refused(cfg, res, "input word: the value is not valid UTF-8 text")


def test_eagle_console_refuses_nul_and_invalid_utf8_naming_the_input(cfg):
    lines = b'mark local names=\'["x\\0y"]\'\nmark word=\xff\nmark word="a\x00b"\n'
    res = subprocess.run([sys.executable, "-m", "eaglebot", "console", "--config", str(cfg)], input=lines,
                         capture_output=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "EAGLE_CONFIG"})
    err = res.stderr.decode("utf-8", "replace")
    assert "input names: the value contains a NUL byte" in err
    assert "input word: the value is not valid UTF-8 text" in err
    assert "input word: the value contains a NUL byte" in err
    assert "internal error" not in err and "shell is gone" not in err and "Traceback" not in err
    assert len(_db(cfg, "select 1 from events where kind = 'rejected'")) == 3
    assert _db(cfg, "select count(*) from runs") == [(0,)] and not (cfg.parent / "ran").exists()


def test_schedule_inputs_with_a_nul_are_refused_naming_the_input(cfg):
    data = yaml.safe_load(cfg.read_text())
    data["schedules"] = [{"name": "n", "playbook": "mark", "cron": "0 3 * * *", "inputs": {"names": ["a\x00b"]}}]
    cfg.write_text(yaml.safe_dump(data))
    res = eagle("lint", config=cfg, timeout=60)
    assert res.returncode == 2 and "input names: the value contains a NUL byte" in res.stderr


async def test_slack_text_with_a_nul_is_an_input_error_with_a_rejected_event(tmp_path, fake):
    h = await open_harness(tmp_path, fake, playbooks={**PLAYBOOKS, "mark": BOOK},
                           hosts={"local": {"transport": "local", "vars": {"marker": str(tmp_path / "ran")}}})
    try:
        status, _ = await h.command('mark local names="a\x00b"')
        assert status == 200
        reply = await fake.wait_for(lambda: h.responses())
        assert "input names: the value contains a NUL byte" in reply[0].all_text()
        for _ in range(100):
            rows = await h.services.store.call(lambda s: s.events("rejected"))
            if rows:
                break
            await asyncio.sleep(0.05)
        assert "input names: the value contains a NUL byte" in rows[0]["reason"]
        assert await h.query("select id from runs") == [] and not (tmp_path / "ran").exists()
    finally:
        await h.close()
