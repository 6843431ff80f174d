"""Fleet operations over the real loopback sshd: rolling runs with a failure budget, hosts that
cannot be reached (`unreachable`, exit 4), connect retries past a bastion's MaxStartups, the
per-host recap, `eagle rerun --failed` and `eagle watch`."""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support.helpers import eagle, write_playbook, write_yaml
from support.inproc import eagle_here
from support.sshd import free_port, start_sshd

from eaglebot.engine.playbook import load_playbook
from eaglebot.engine.runner import RunRequest


def _config(tmp_path: Path, hosts: dict, **extra) -> Path:
    return write_yaml(tmp_path / "eagle.yaml", {"audit_db": str(tmp_path / "eagle.db"), "hosts": hosts, **extra})


def _touch_book(tmp_path: Path, log: Path, bad: str = "h3") -> Path:
    return write_playbook(tmp_path, "roll", f"""
        name: roll
        steps:
          - name: mark
            skill: shell
            with: {{command: "echo {{{{ host }}}} >> {log}"}}
          - name: check
            skill: shell
            with: {{command: "test {{{{ host }}}} != {bad} || {{ echo broken config on {{{{ host }}}}; exit 3; }}"}}
    """)


def _sshd_root(tmp_path: Path) -> Path:
    """A folder sshd reads as the test user (pytest's tmp_path is not open to it)."""
    root = Path(tempfile.mkdtemp(prefix="eagle-bastion-"))
    os.chmod(root, 0o755)
    return root


def _db(tmp_path: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(tmp_path / "eagle.db") as db:
        return db.execute(sql, args).fetchall()


def test_rolling_run_stops_after_the_batch_that_spent_the_failure_budget(sshd, remote_dir, tmp_path):
    log = remote_dir / "log"
    cfg = _config(tmp_path, {"h[1:8]": sshd.host_config()}, groups={"fleet": ["h[1:8]"]})
    book = _touch_book(tmp_path, log)
    res = eagle_here("run", str(book), "-H", "fleet", "--batch", "2", "--max-fail", "0", "--json", config=cfg)
    assert res.returncode == 1, res.stderr
    doc = json.loads(res.stdout)
    recap = {h["name"]: h for h in doc["hosts"]}
    assert [recap[f"h{i}"]["status"] for i in range(1, 9)] == (
        ["changed", "changed", "failed", "changed"] + ["untouched"] * 4)
    assert recap["h3"]["failure"] == "check: exit status 3: broken config on h3"
    assert (recap["h3"]["changed"], recap["h3"]["failed"]) == (1, 1)
    assert sorted(log.read_text().split()) == ["h1", "h2", "h3", "h4"]  # hosts 5-8 never touched
    assert any("no new batch started; 4 host(s) untouched: h5, h6, h7, h8" in w for w in doc["warnings"])
    assert "the failure budget was spent: 4 host(s) untouched" in res.stderr
    # Nothing of hosts 5-8 is in the store: untouched, not skipped.
    assert _db(tmp_path, "select count(*) from steps where host in ('h5','h6','h7','h8')") == [(0,)]

    # Only the failed host runs again, as a new run that names its origin.
    log.write_text("")
    again = eagle_here("rerun", str(doc["run_id"]), "--failed", "--json", config=cfg)
    assert again.returncode == 1  # h3 is still broken
    rerun = json.loads(again.stdout)
    assert [h["name"] for h in rerun["hosts"]] == ["h3"]
    assert log.read_text().split() == ["h3"]
    assert _db(tmp_path, "select rerun_of, hosts from runs where id = ?", rerun["run_id"]) == [
        (doc["run_id"], '["h3"]')]


def test_the_terminal_recap_lists_every_host_with_counts_and_the_first_failure(sshd, remote_dir, tmp_path):
    cfg = _config(tmp_path, {"h[1:3]": sshd.host_config()})
    res = eagle("run", str(_touch_book(tmp_path, remote_dir / "log", bad="h2")), "-H", "h[1:3]", config=cfg)
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    head = lines.index("recap, 3 hosts: 1 failed, 2 changed:")
    assert lines[head + 1].split() == ["host", "status", "ok", "changed", "failed", "unreachable", "skipped",
                                       "time", "first", "failure"]
    rows = {ln.split()[0]: ln.split() for ln in lines[head + 3:head + 6]}
    assert rows["h1"][1:7] == ["changed", "0", "2", "0", "0", "0"]
    assert rows["h2"][1:7] == ["failed", "0", "1", "1", "0", "0"]
    assert " ".join(rows["h2"][8:]) == "check: exit status 3: broken config on h2"


def test_playbook_batch_and_max_fail_are_defaults_the_command_line_overrides(sshd, remote_dir, tmp_path):
    log = remote_dir / "log"
    book = write_playbook(tmp_path, "roll", f"""
        name: roll
        batch: 50%
        batch_above: 2
        max_fail: 0
        steps:
          - skill: shell
            with: {{command: "echo {{{{ host }}}} >> {log}; test {{{{ host }}}} != h1"}}
    """)
    cfg = _config(tmp_path, {"h[1:4]": sshd.host_config()})
    res = eagle_here("run", str(book), "-H", "all", "--json", config=cfg)
    assert res.returncode == 1
    assert [h["status"] for h in json.loads(res.stdout)["hosts"]] == ["failed", "changed", "untouched", "untouched"]
    log.write_text("")
    res = eagle_here("run", str(book), "-H", "all", "--max-fail", "25%", "--json", config=cfg)  # 1 of 4 may fail
    assert [h["status"] for h in json.loads(res.stdout)["hosts"]] == ["failed", "changed", "changed", "changed"]
    res = eagle_here("run", str(book), "-H", "h[3:4]", "--json", config=cfg)  # 2 hosts: not above batch_above
    assert res.returncode == 0 and len(log.read_text().split()) == 6
    bad = eagle_here("run", str(book), "-H", "all", "--batch", "0", config=cfg)
    assert bad.returncode == 2 and "--batch must be at least 1" in bad.stderr


def test_an_unreachable_host_is_its_own_status_and_exit_4(sshd, remote_dir, tmp_path):
    closed = free_port()  # nothing listens there: connection refused, every try
    cfg = _config(tmp_path, {"up": sshd.host_config(),
                             "down": sshd.host_config(port=closed, connect_retries=1)})
    book = _touch_book(tmp_path, remote_dir / "log", bad="nobody")
    res = eagle_here("run", str(book), "-H", "up,down", "--json", config=cfg)
    assert res.returncode == 4, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "unreachable"
    recap = {h["name"]: h for h in doc["hosts"]}
    assert recap["down"]["status"] == "unreachable" and recap["up"]["status"] == "changed"
    assert recap["down"]["unreachable"] == 1 and recap["down"]["skipped"] == 1
    assert f"is unreachable at 127.0.0.1:{closed} after 2 tries: " in recap["down"]["failure"]
    assert _db(tmp_path, "select status, exit_code from runs") == [("unreachable", 4)]
    assert _db(tmp_path, "select idx, status from steps where host = 'down' order by idx") == [
        (0, "unreachable"), (1, "skipped")]
    assert "1 host(s) unreachable: down" in res.stderr
    # A failed step wins over an unreachable host: exit 1.
    book = _touch_book(tmp_path, remote_dir / "log", bad="up")
    assert eagle_here("run", str(book), "-H", "up,down", config=cfg).returncode == 1
    # rerun --failed takes the unreachable host too.
    again = eagle_here("rerun", str(doc["run_id"]), "--failed", "--json", config=cfg)
    assert again.returncode == 4 and [h["name"] for h in json.loads(again.stdout)["hosts"]] == ["down"]


async def test_connect_retries_get_past_a_bastion_dropping_the_excess(services, tmp_path):
    # sshd as a crowded bastion: over 2 connections not yet logged in, it drops every new one.
    server = start_sshd(_sshd_root(tmp_path), max_startups="2:100:2", max_sessions=10)
    try:
        hosts = {f"n{i:02d}": server.host_config(connect_retries=8) for i in range(16)}
        svc = await services(hosts, max_connecting=16, max_connecting_per_jump=16)
        book = load_playbook(write_playbook(tmp_path, "t", """
            name: t
            steps:
              - skill: shell
                with: {command: "true", changed: false}
        """))
        out = await svc.engine.run(RunRequest(playbook=book, hosts=list(hosts)))
        assert out.status == "succeeded", out.error
        tries = [svc.engine.pool.get(h).connect_tries for h in hosts]
        assert max(tries) > 1  # some were dropped and came back
        # Without retries, the same crowd leaves hosts unreachable (and says so).
        svc2 = await services({f"m{i:02d}": server.host_config(connect_retries=0) for i in range(16)},
                              max_connecting=16, max_connecting_per_jump=16, audit_db=str(tmp_path / "other.db"))
        out2 = await svc2.engine.run(RunRequest(playbook=book, hosts=[f"m{i:02d}" for i in range(16)]))
        assert out2.status == "unreachable" and out2.exit_code == 4
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)


async def test_connections_through_a_jump_host_are_opened_a_few_at_a_time(services, tmp_path):
    # (sshd counts a connection as starting until its child reports the login, a little after
    # the client sees it: 4 leaves room for that lag over the cap of 2)
    server = start_sshd(_sshd_root(tmp_path), max_startups="4:100:4", max_sessions=10)
    try:
        hosts = {"bastion": server.host_config(connect_retries=0)}
        hosts.update({f"n{i:02d}": server.host_config(jump="bastion", connect_retries=0) for i in range(12)})
        svc = await services(hosts, max_connecting=64, max_connecting_per_jump=2)
        book = load_playbook(write_playbook(tmp_path, "t", """
            name: t
            steps:
              - skill: shell
                with: {command: "true", changed: false}
        """))
        # No retries at all: the cap per jump host alone keeps the bastion under its MaxStartups.
        out = await svc.engine.run(RunRequest(playbook=book, hosts=["all"]))
        assert out.status == "succeeded", out.error
        assert sorted(out.hosts) == [f"n{i:02d}" for i in range(12)]  # `all` leaves the bastion out
        # Without the cap, the same crowd through the same bastion loses hosts.
        svc2 = await services(hosts, max_connecting=64, max_connecting_per_jump=64,
                              audit_db=str(tmp_path / "other.db"))
        out2 = await svc2.engine.run(RunRequest(playbook=book, hosts=["all"]))
        assert out2.status == "unreachable" and out2.exit_code == 4
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)


async def test_watch_follows_a_run_started_by_eagle_serve_and_exits_with_its_code(sshd, remote_dir, tmp_path, fake):
    from support.slack_harness import SECRET, command_body, signed_headers
    from test_serve import start_serve, stop, wait_serving

    import aiohttp

    flag = remote_dir / "go"
    (tmp_path / "playbooks").mkdir()
    write_playbook(tmp_path / "playbooks", "slow", f"""
        name: slow
        steps:
          - name: wait
            skill: shell
            with: {{command: "for i in $(seq 300); do test -e {flag} && break; sleep 0.1; done"}}
          - name: fail
            skill: shell
            with: {{command: "echo nope; exit 1"}}
    """)
    cfg = _config(tmp_path, {"h[1:2]": sshd.host_config()}, playbooks_dir="playbooks",
                  access={"operators": ["UALICE"], "viewers": ["*"], "approvers": ["UALICE"]})
    port = free_port()
    proc = await start_serve(cfg, fake, "--http", str(port), SLACK_SIGNING_SECRET=SECRET)
    try:
        await wait_serving(port, proc)
        body = command_body("slow h1,h2", response_url=fake.response_url("x"))
        async with aiohttp.ClientSession() as s:
            async with s.post(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                              headers=signed_headers(body)) as r:
                assert r.status == 200
        deadline = time.monotonic() + 30
        while not (tmp_path / "eagle.db").exists() or not _db(tmp_path, "select count(*) from steps")[0][0]:
            assert time.monotonic() < deadline, "the run did not start"
            await asyncio.sleep(0.1)
        run_id = _db(tmp_path, "select id from runs")[0][0]
        watch = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "eaglebot", "watch", str(run_id), "--config", str(cfg),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        await asyncio.sleep(0.5)
        flag.write_text("")
        out_b, err_b = await asyncio.wait_for(watch.communicate(), 60)
        out, errs = out_b.decode(), err_b.decode()
    finally:
        await stop(proc)
    assert watch.returncode == 1, errs
    assert _db(tmp_path, "select origin, exit_code from runs") == [("slack", 1)]
    assert f"run #{run_id}: slow on h1, h2, started by UALICE via slack" in errs  # the lines `eagle run` prints
    assert "[h1] 1/2 wait: changed" in errs and "[h2] 2/2 fail: failed" in errs
    assert re.search(r"eagle: h[12]: fail: exit status 1: nope", errs)  # the error, as `eagle run` ends
    assert f"run #{run_id} slow on h1, h2: failed" in out and "recap, 2 hosts: 2 failed:" in out


@pytest.mark.parametrize("text,expected", [
    ("rerun 12 failed", ("rerun", ("failed", "12"))),
    ("rerun #12", ("rerun", ("12",))),
])
def test_slash_rerun_takes_failed(text, expected):
    from eaglebot.frontends.chat.grammar import parse

    cmd = parse(text)
    assert (cmd.name, cmd.args) == expected and cmd.run_id == 12


async def test_the_shipped_relaunch_goes_a_quarter_at_a_time_above_four_hosts(services):
    svc = await services({"g[1:8]": {"transport": "local"}},
                         host_defaults={"vars": {"model": "/m", "draft": "/d", "python": "python3"}})
    big = svc.engine.prepare(RunRequest(playbook="relaunch", hosts=["g[1:8]"]))
    assert (big.batch, big.max_fail) == ("25%", "0")
    small = svc.engine.prepare(RunRequest(playbook="relaunch", hosts=["g[1:4]"]))
    assert (small.batch, small.max_fail) == (None, "0")
    own = svc.engine.prepare(RunRequest(playbook="relaunch", hosts=["g[1:8]"], batch="4", max_fail="50%"))
    assert (own.batch, own.max_fail) == ("4", "50%")


def test_slash_rerun_failed_runs_only_the_unreachable_host(sshd, remote_dir, tmp_path):
    (tmp_path / "books").mkdir()
    cfg = _config(tmp_path, {"up": sshd.host_config(), "down": sshd.host_config(port=free_port(), connect_retries=0)},
                  playbooks_dir="books")
    book = _touch_book(tmp_path / "books", remote_dir / "log", bad="nobody")
    first = eagle_here("run", str(book), "-H", "up,down", "--json", config=cfg)
    rid = json.loads(first.stdout)["run_id"]
    assert first.returncode == 4
    again = eagle_here("chat", f"rerun {rid} failed", config=cfg)
    assert _db(tmp_path, "select rerun_of, hosts, status from runs where id > ?", rid) == [
        (rid, '["down"]', "unreachable")]
    assert "down" in again.stdout


def test_slash_batch_and_max_fail_make_a_rolling_run(sshd, remote_dir, tmp_path):
    (tmp_path / "books").mkdir()
    log = remote_dir / "log"
    _touch_book(tmp_path / "books", log, bad="h2")
    cfg = _config(tmp_path, {"h[1:4]": sshd.host_config()}, groups={"fleet": ["h[1:4]"]}, playbooks_dir="books")
    res = eagle_here("chat", "roll fleet batch=2 max_fail=0", config=cfg)
    assert res.returncode == 1, res.stderr
    assert sorted(log.read_text().split()) == ["h1", "h2"]
    assert _db(tmp_path, "select inputs from runs") == [("{}",)]  # options, not inputs
    assert "no new batch started; 2 host(s) untouched: h3, h4" in res.stdout + res.stderr
