"""`eagle serve` as a service, as real processes against the fake Slack: reload (SIGHUP and
`/eagle reload`) while a run is under way, one log line per action, and Prometheus /metrics."""
from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from support.slack_harness import PLAYBOOKS, SECRET, command_body, signed_headers
from support.sshd import free_port
from test_serve import start_serve, stop, wait_serving


def write_config(tmp_path, hosts: dict, **extra) -> "tuple":
    pdir = tmp_path / "playbooks"
    pdir.mkdir(exist_ok=True)
    for name in ("hello", "slow"):
        (pdir / f"{name}.yaml").write_text(yaml.safe_dump(PLAYBOOKS[name]))
    data = {"audit_db": "eagle.db", "playbooks_dir": "playbooks", "hosts": hosts,
            "access": {"operators": ["UALICE"], "viewers": ["*"], "approvers": ["UALICE"]}, **extra}
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    return cfg, data


async def slash(port: int, text: str, fake, name: str, user: str = "UALICE") -> None:
    body = command_body(text, user=user, response_url=fake.response_url(name))
    async with aiohttp.ClientSession() as s:
        async with s.post(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                          headers=signed_headers(body)) as r:
            assert r.status == 200, await r.text()


def finished(fake, run_id: int) -> list:
    return [c for c in fake.ok_calls_to("chat.postMessage") if f"#{run_id}" in c.all_text()
            and "finished" in c.all_text()]


def db_rows(tmp_path, sql: str, args=()) -> list[tuple]:
    con = sqlite3.connect(f"file:{tmp_path / 'eagle.db'}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


async def until(pred, timeout: float = 120.0):   # generous: the suite runs on busy machines too
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (got := pred()):
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)
    return got


async def test_sighup_adds_a_host_while_a_run_goes_on_and_a_bad_config_is_refused_with_its_line(tmp_path, fake):
    cfg, data = write_config(tmp_path, {"local": {"transport": "local"}})
    port = free_port()
    proc = await start_serve(cfg, fake, "--http", str(port), SLACK_SIGNING_SECRET=SECRET)
    try:
        await wait_serving(port, proc)
        await slash(port, "slow seconds=4", fake, "slow")
        await until(lambda: db_rows(tmp_path, "select 1 from steps where run_id = 1 and name = 'nap' "
                                              "and status = 'running'"))
        await slash(port, "hello newhost", fake, "before")
        await fake.wait_for(lambda: [c for c in fake.calls if c.args.get("_name") == "before"])
        assert "unknown host" in [c for c in fake.calls if c.args.get("_name") == "before"][0].all_text()

        data["hosts"]["newhost"] = {"transport": "local"}
        cfg.write_text(yaml.safe_dump(data, sort_keys=False))
        proc.send_signal(signal.SIGHUP)
        events = await until(lambda: db_rows(tmp_path, "select message from events where kind = 'reload'"))
        assert "by signal: reloaded: hosts +newhost" in events[0][0]
        assert db_rows(tmp_path, "select status from runs where id = 1") == [("running",)]   # still going

        await slash(port, "hello newhost", fake, "after")
        await fake.wait_for(lambda: finished(fake, 2))
        assert "succeeded" in finished(fake, 2)[0].all_text()
        assert db_rows(tmp_path, "select hosts from runs where id = 2")[0][0] == '["newhost"]'
        await fake.wait_for(lambda: finished(fake, 1), timeout=30)
        assert db_rows(tmp_path, "select status from runs where id = 1") == [("succeeded",)]
        assert db_rows(tmp_path, "select status from steps where run_id = 1 and name = 'after'") == [("changed",)]

        lines = cfg.read_text().splitlines()
        cfg.write_text("\n".join([*lines[:2], "bogus_key: 1", *lines[2:]]) + "\n")   # line 3
        proc.send_signal(signal.SIGHUP)
        events = await until(lambda: db_rows(tmp_path, "select message from events where kind = 'reload' "
                                                       "order by id")[1:])
        assert "reload refused" in events[0][0] and "eagle.yaml:3" in events[0][0] and "bogus_key" in events[0][0]
        await slash(port, "hello newhost", fake, "old-config")
        await fake.wait_for(lambda: finished(fake, 3))
        assert "succeeded" in finished(fake, 3)[0].all_text()

        cfg.write_text("\n".join(lines) + "\n")   # fixed again; now through Slack, by an approver
        await slash(port, "reload", fake, "by-slack")
        answer = await fake.wait_for(lambda: [c for c in fake.calls if c.args.get("_name") == "by-slack"])
        assert "reloaded" in answer[0].all_text()
        assert db_rows(tmp_path, "select message from events where kind = 'reload' order by id desc limit 1"
                       )[0][0].startswith("by UALICE: reloaded")
    finally:
        rc, err = await stop(proc)
    assert rc == 0, err
    audit = [ln for ln in err.splitlines() if " eaglebot.audit: reload " in ln]
    assert len(audit) == 3 and "outcome=refused" in audit[1] and "user=signal" in audit[0], audit


async def test_a_reloads_catch_up_run_is_the_schedules_own_and_its_missed_fires_are_before_the_reload(
        tmp_path, fake):
    """Issue 34: after `/eagle reload` the new scheduler's catch-up run was logged as the reload
    command's run, and the channel was told the fires were missed "while the bot was down"."""
    from datetime import datetime, timedelta, timezone

    from eaglebot.store import Store

    cfg, data = write_config(tmp_path, {"local": {"transport": "local"}}, slack={"channel": "COPS"})
    store = Store(tmp_path / "eagle.db")      # the schedule ran here before, three hours ago
    hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    ago = (hour - timedelta(hours=3) + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")   # 3 fires since
    store.record_fire("hourly", ago, "registered")
    store.close()
    port = free_port()
    proc = await start_serve(cfg, fake, "--http", str(port), SLACK_SIGNING_SECRET=SECRET)
    try:
        await wait_serving(port, proc)
        data["schedules"] = [{"name": "hourly", "playbook": "hello", "hosts": ["local"], "cron": "0 * * * *"}]
        cfg.write_text(yaml.safe_dump(data, sort_keys=False))
        await slash(port, "reload", fake, "by-slack")
        answer = await fake.wait_for(lambda: [c for c in fake.calls if c.args.get("_name") == "by-slack"])
        assert "reloaded" in answer[0].all_text() and "hourly" in answer[0].all_text()
        [post] = await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.postMessage")
                                              if "schedule hourly" in c.all_text() and "missed" in c.all_text()])
        # 3 fires since the planted one (4 should the hour turn while the test runs)
        assert re.search(r"missed [34] runs before this reload \(", post.all_text()), post.all_text()
        assert "while the bot was down" not in post.all_text() and "running it now" in post.all_text()
        [(rid, status)] = await until(lambda: db_rows(tmp_path, "select id, status from runs where origin = "
                                                               "'schedule' and status != 'running'"))
        assert status == "succeeded"
    finally:
        rc, err = await stop(proc)
    assert rc == 0, err
    audit = [ln.split(" eaglebot.audit: ", 1)[1] for ln in err.splitlines() if " eaglebot.audit: " in ln]
    # the reload is its own line; the catch-up run has its start and end lines, not the reload command's
    assert audit[0] == 'reload user=UALICE outcome=ok changes="schedules +hourly"', audit
    assert not [ln for ln in audit if ln.startswith("command ")], audit
    assert any(ln.startswith(f"run #{rid} started playbook=hello hosts=local by=schedule:hourly origin=schedule")
               for ln in audit), audit
    assert any(ln.startswith(f"run #{rid} finished succeeded") for ln in audit), audit


async def test_one_slash_command_writes_one_info_line_and_nothing_from_libraries(
        tmp_path, fake, sshd):
    cfg, _ = write_config(tmp_path, {"sim": sshd.host_config()})
    port = free_port()
    proc = await start_serve(cfg, fake, "--http", str(port), SLACK_SIGNING_SECRET=SECRET)
    try:
        await wait_serving(port, proc)
        await slash(port, "hello sim", fake, "c1")
        await fake.wait_for(lambda: finished(fake, 1))
    finally:
        rc, err = await stop(proc)
    assert rc == 0, err
    lines = err.splitlines()
    start = next(i for i, ln in enumerate(lines) if "serving Slack requests" in ln)
    end = next(i for i, ln in enumerate(lines) if ln.endswith("eaglebot.serve: stopping"))
    # the election's line (this replica leads: tests/test_replicas.py) is not the command's
    between = [ln for ln in lines[start + 1:end] if " eaglebot.leader: " not in ln]
    assert len(between) == 1, between
    assert re.search(r" INFO eaglebot\.audit: command user=UALICE text=\"hello sim\" run=#1 playbook=hello "
                     r"hosts=sim outcome=succeeded exit_code=0 duration_s=[\d.]+$", between[0]), between
    assert not [ln for ln in lines if "asyncssh" in ln or "will be unused" in ln or "WARNING" in ln], lines


async def test_json_log_lines_parse_and_metrics_count_the_run_and_the_slack_retry(tmp_path, fake):
    mport = free_port()
    cfg, _ = write_config(tmp_path, {"local": {"transport": "local"}}, log_format="json", metrics_port=mport)
    port = free_port()
    proc = await start_serve(cfg, fake, "--http", str(port), SLACK_SIGNING_SECRET=SECRET)
    try:
        await wait_serving(port, proc)
        fake.fail("chat.postMessage", "500", times=1)   # retried by slack_sdk's server-error handler
        await slash(port, "hello", fake, "c1")
        await slash(port, "hello nohost", fake, "c2")
        await fake.wait_for(lambda: finished(fake, 1))
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                assert r.status in (404, 405)   # never on the Slack events port: no credential guards it
            async with s.get(f"http://127.0.0.1:{mport}/metrics") as r:
                assert r.status == 200
                text = await r.text()
    finally:
        rc, err = await stop(proc)
    assert rc == 0, err
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("eagle_runs_total", (("playbook", "hello"), ("status", "succeeded")))] == 1
    assert samples[("eagle_step_duration_seconds_count", (("skill", "shell"),))] == 1
    assert samples[("eagle_slack_api_retries_total", (("reason", "server_error"),))] == 1
    assert samples[("eagle_leader", ())] == 1   # the only replica leads
    assert samples[("eagle_open_incidents", ())] == 0 and samples[("eagle_quarantined_gpus", ())] == 0
    assert ("eagle_build_info", ()) not in samples   # it carries labels: version, python
    assert any(name == "eagle_build_info" for name, _ in samples)

    records = [json.loads(ln) for ln in err.splitlines() if ln.strip()]
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
    audit = [r for r in records if r["logger"] == "eaglebot.audit"]
    assert sorted(r["event"] for r in audit) == ["command", "rejected"], audit
    cmd = next(r for r in audit if r["event"] == "command")
    assert cmd["user"] == "UALICE" and cmd["run"] == 1 and cmd["hosts"] == ["local"] and cmd["text"] == "hello"
    assert cmd["outcome"] == "succeeded" and cmd["exit_code"] == 0, cmd
    assert cmd["msg"].startswith('command user=UALICE text=hello run=#1 playbook=hello hosts=local outcome=succeeded'), cmd
    rej = next(r for r in audit if r["event"] == "rejected")
    assert rej["text"] == "hello nohost" and "unknown host" in rej["why"]
