"""Schedules checked at load (lint, doctor, schedule list name the file and line), and
`/eagle schedule pause|resume NAME`: operators only, persisted, shown, audited, honoured."""
from __future__ import annotations

import asyncio
import json
import sqlite3
import textwrap

import pytest

from support.helpers import eagle
from support.inproc import eagle_here
from support.sched_helpers import finished_jobs, fire_now

from eaglebot.frontends.service.scheduler import build_scheduler
from eaglebot.testing.chat import ChatBot

BROKEN = """\
audit_db: eagle.db
playbooks_dir: books
hosts:
  local: {transport: local}
schedules:
  - {name: good, playbook: ok, cron: "0 3 * * *"}
  - name: misspelt
    playbook: bnech
    cron: "0 4 * * *"
  - name: bad-input
    playbook: ok
    cron: "0 5 * * *"
    inputs: {wrod: x}
  - name: bad-host
    playbook: ok
    hosts: [gpu-9]
    cron: "0 6 * * *"
"""

OK_BOOK = """\
name: ok
inputs:
  word: {type: str, default: hi}
steps:
  - skill: shell
    with: {command: "echo {{ word }}"}
"""


@pytest.fixture
def broken(tmp_path):
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "ok.yaml").write_text(OK_BOOK)
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(BROKEN)
    return cfg


def test_lint_doctor_and_schedule_list_name_the_file_and_line_of_a_broken_schedule(broken):
    lint = eagle_here("lint", config=broken)
    assert lint.returncode == 2
    assert f"{broken}:7: schedule 'misspelt': unknown playbook 'bnech'" in lint.stderr
    assert f"{broken}:10: schedule 'bad-input': playbook 'ok' has no input 'wrod'" in lint.stderr
    assert f"{broken}:14: schedule 'bad-host': unknown host 'gpu-9'" in lint.stderr
    assert "'good'" not in lint.stderr
    listed = eagle_here("schedule", "list", config=broken)
    assert listed.returncode == 2 and f"{broken}:7: schedule 'misspelt'" in listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[2:]}
    assert "INVALID" in rows["misspelt"] and "active" in rows["good"]
    doctor = eagle("doctor", config=broken, env={"PATH": "/usr/bin:/bin"})
    assert doctor.returncode == 1
    assert f"FAIL  schedule misspelt: {broken}:7: unknown playbook 'bnech'" in doctor.stdout


def test_config_errors_carry_the_line_number(tmp_path):
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(textwrap.dedent("""\
        audit_db: eagle.db
        hosts:
          gpu-01:
            address: 10.0.0.7
            prot: 22
        """))
    res = eagle_here("hosts", config=cfg)
    assert res.returncode == 2 and f"{cfg}:5: hosts.gpu-01.prot: unknown key" in res.stderr


async def test_pause_and_resume_from_slack_are_for_operators_persisted_shown_audited_and_honoured(tmp_path):
    pb = {"name": "nightly", "steps": [{"skill": "shell", "with": {"command": "echo nightly"}}]}
    bot = await ChatBot.open(tmp_path, playbooks={"nightly": pb},
                             schedules=[{"name": "nightly-bench", "playbook": "nightly", "cron": "0 3 * * *"}])
    try:
        refused = await bot.say("schedule pause nightly-bench", user="UEVE")
        assert "only operators can pause schedules" in refused.ack
        said = await bot.say("schedule pause nightly-bench", user="UALICE")
        assert "schedule nightly-bench paused by UALICE" in said.text
        assert "paused by UALICE" in (await bot.say("schedule", user="UEVE")).text
        sched = build_scheduler(bot.services)
        finished = finished_jobs(sched)
        sched.start()
        try:
            fire_now(sched, "nightly-bench")
            name, run_id = await asyncio.wait_for(finished.get(), 30)
        finally:
            sched.shutdown()
        assert run_id is None and await bot.runs() == [] and bot.host("gpu-01").calls == []
        fires = await bot.services.store.call(lambda s: list(s.db.query(
            "select status from schedule_fires where schedule = 'nightly-bench'")))
        assert {"status": "paused"} in fires
        await bot.say("schedule resume nightly-bench", user="UALICE")
        events = await bot.services.store.call(lambda s: [e["kind"] for e in s.db.query("select kind from events order by id")])
        assert events == ["access_denied", "schedule_paused", "schedule_resumed"]
        assert (await bot.services.store.call(lambda s: s.schedule_states()))["nightly-bench"]["paused"] == 0
    finally:
        await bot.close()


def test_pause_and_resume_from_the_terminal_write_the_row_the_bot_reads(tmp_path):
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "ok.yaml").write_text(OK_BOOK)
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text("audit_db: eagle.db\nplaybooks_dir: books\nhosts:\n  local: {transport: local}\n"
                   "schedules:\n  - {name: nightly, playbook: ok, cron: \"0 3 * * *\"}\n")
    paused = eagle("schedule", "pause", "nightly", config=cfg, env={"USER": "alice"})
    assert paused.returncode == 0, paused.stderr
    assert "schedule nightly paused by" in paused.stdout and "eagle schedule resume nightly" in paused.stdout
    again = eagle_here("schedule", "pause", "nightly", config=cfg)
    assert again.returncode == 2 and "schedule 'nightly' is already paused" in again.stderr
    unknown = eagle_here("schedule", "resume", "nigthly", config=cfg)
    assert unknown.returncode == 2 and "unknown schedule 'nigthly'; did you mean 'nightly'?" in unknown.stderr
    listed = eagle_here("schedule", "list", "--json", config=cfg)
    row = json.loads(listed.stdout)[0]
    assert row["paused"] is True and row["paused_by"]
    assert eagle_here("schedule", "resume", "nightly", config=cfg).returncode == 0
    assert json.loads(eagle_here("schedule", "list", "--json", config=cfg).stdout)[0]["paused"] is False
    db = sqlite3.connect(tmp_path / "eagle.db")
    kinds = [k for (k,) in db.execute("select kind from events order by id")]
    assert kinds == ["schedule_paused", "schedule_resumed"]
    assert db.execute("select count(*) from runs").fetchone()[0] == 0
