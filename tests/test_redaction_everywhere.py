"""Secrets never reach the DB, the terminal or Slack, whatever path they take."""
from __future__ import annotations

import json
import sqlite3

import pytest

from support.helpers import eagle, write_playbook, write_yaml
from support.inproc import eagle_here

TOKEN = "hf_" + "Zq9" * 10
SLACK = "xoxb-" + "1234567890-abcdefghij"


@pytest.fixture
def cfg(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    target = tmp_path / "c.json"
    target.write_text(json.dumps({"token": TOKEN, "a": 1}, indent=2))
    write_playbook(books, "envdump", """
        name: envdump
        steps:
          - skill: shell
            with: {command: "env | cut -d= -f1 | sort | tr '\\\\n' ' '"}
    """)
    write_playbook(books, "patch", f"""
        name: patch
        steps:
          - skill: config.patch
            with: {{path: "{target}", set: {{a: 2}}}}
    """)
    return write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "playbooks_dir": "books"})


def _db(cfg):
    conn = sqlite3.connect(cfg.parent / "eagle.db")
    conn.row_factory = sqlite3.Row
    return conn


def test_local_commands_do_not_inherit_the_bots_secrets(cfg):
    env = {"SLACK_BOT_TOKEN": SLACK, "SLACK_SIGNING_SECRET": "sign-secret-123", "SLACK_APP_TOKEN": "xapp-1-abcdefghijkl"}
    res = eagle("run", "envdump", config=cfg, env=env)
    assert res.returncode == 0, res.stderr
    out = _db(cfg).execute("select output, summary from steps").fetchone()
    names = (out["output"] or "") + out["summary"]
    assert "PATH" in names
    for k in env:
        assert k not in names


def test_a_token_in_a_patched_file_never_reaches_the_diff(cfg):
    res = eagle_here("run", "patch", config=cfg)
    assert res.returncode == 0, res.stderr
    db = _db(cfg)
    diff = db.execute("select diff from changes").fetchone()["diff"]
    assert '"a": 2' in diff and TOKEN not in diff
    dump = "\n".join(str(tuple(r)) for t in ("runs", "steps", "changes", "events")
                     for r in db.execute(f"select * from {t}"))
    assert TOKEN not in dump


def test_error_lines_and_rejected_names_are_redacted(cfg):
    res = eagle_here("run", f"pb-{TOKEN}", config=cfg)
    assert res.returncode == 2 and TOKEN not in res.stderr and TOKEN[:12] not in res.stderr
    res = eagle_here("run", "envdump", "-H", f"gpu\n{TOKEN}", config=cfg)
    assert res.returncode == 2 and TOKEN not in res.stderr
    assert not list(_db(cfg).execute("select id from runs"))   # refusals are events, not runs
    rows = [dict(r) for r in _db(cfg).execute("select actor, text, reason, message from events "
                                              "where kind = 'rejected'")]
    assert len(rows) == 2 and TOKEN not in json.dumps(rows) and TOKEN[:12] not in json.dumps(rows)
    assert any("(invalid name)" in r["text"] for r in rows)


async def test_a_refusal_event_is_redacted_before_it_is_cut(services):
    from eaglebot.frontends.chat.access import audit_refusal
    from eaglebot.frontends.chat.grammar import Command
    svc = await services()
    text = "x" * 280 + " " + TOKEN
    await audit_refusal(svc, "U1", Command("run", text=text), "not an operator")
    (event,) = [e for e in svc.store.sync.db.query("select message from events")]
    assert TOKEN[:8] not in event["message"]


def test_a_token_cut_short_by_a_skill_is_still_masked(tmp_path):
    """The shell skill keeps the last 300 characters of a line as its summary: a token that
    straddles the cut must not leak its first characters."""
    books = tmp_path / "books"
    books.mkdir()
    line = "x" * 281 + " " + TOKEN  # the cut at 300 leaves 18 of the token's 33 characters
    write_playbook(books, "cut", f"""
        name: cut
        steps:
          - skill: shell
            with: {{command: "printf '%s\\\\n' '{line}'"}}
    """)
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "playbooks_dir": "books"})
    res = eagle_here("run", "cut", config=cfg)
    assert res.returncode == 0, res.stderr
    summary = _db(cfg).execute("select summary from steps").fetchone()["summary"]
    assert summary.endswith("***") and TOKEN[:10] not in summary and TOKEN[:10] not in res.stdout + res.stderr


def test_a_secret_from_the_environment_cut_short_is_masked():
    from eaglebot.engine.redact import Redactor
    r = Redactor(environ={"MY_API_TOKEN": "s3cr3t-Value-0123456789"})
    assert r.text("token=s3cr3t-Value-01") == "token=***"
    assert r.text("pip install hf_transfer") == "pip install hf_transfer"
