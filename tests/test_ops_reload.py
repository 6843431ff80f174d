"""Reload's parts: the environment file (systemd's syntax), a new bot token through it, who may
reload, `eagle chat reload` on a terminal, and /metrics on `metrics_port` in Socket Mode."""
from __future__ import annotations

import os
import signal

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from support.helpers import eagle
from support.slack_harness import SECRET
from support.sshd import free_port
from test_ops_serve import db_rows, finished, slash, until, write_config
from test_serve import start_serve, stop, wait_serving

from eaglebot.errors import UsageError
from eaglebot.frontends.service.reload import EnvFile, read_env_file


def test_env_file_reads_systemd_syntax(tmp_path):
    f = tmp_path / "env"
    f.write_text("# a comment\n; another\n\nSLACK_BOT_TOKEN=xoxb-1\n  SPACED = two words  \n"
                 "SINGLE='a \"b\" c'\nDOUBLE=\"x \\\"y\\\" \\\\z\"\nLONG=one\\\ntwo\nEMPTY=\n")
    assert read_env_file(f) == {"SLACK_BOT_TOKEN": "xoxb-1", "SPACED": "two words", "SINGLE": 'a "b" c',
                                "DOUBLE": 'x "y" \\z', "LONG": "onetwo", "EMPTY": ""}


@pytest.mark.parametrize("text, line, needle", [
    ("A=1\nnot a pair\n", 2, "expected KEY=VALUE"),
    ("A=1\n\n1BAD=x\n", 3, "expected KEY=VALUE"),
    ("Q='open\n", 1, "unbalanced ' quote"),
])
def test_env_file_errors_name_the_line(tmp_path, text, line, needle):
    f = tmp_path / "env"
    f.write_text(text)
    with pytest.raises(UsageError, match=f"{f}:{line}: {needle}"):
        read_env_file(f)


def test_env_file_overrides_the_environment_and_gives_back_what_it_drops(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_T_KEEP", "process")
    monkeypatch.delenv("EAGLE_T_NEW", raising=False)
    env = EnvFile(tmp_path / "env")
    assert env.apply({"EAGLE_T_KEEP": "file", "EAGLE_T_NEW": "x"}) == {"EAGLE_T_KEEP", "EAGLE_T_NEW"}
    assert os.environ["EAGLE_T_KEEP"] == "file" and os.environ["EAGLE_T_NEW"] == "x"
    assert env.apply({"EAGLE_T_NEW": "x"}) == {"EAGLE_T_KEEP"}          # dropped from the file
    assert os.environ["EAGLE_T_KEEP"] == "process"
    assert env.apply({}) == {"EAGLE_T_NEW"} and "EAGLE_T_NEW" not in os.environ


async def test_a_new_bot_token_in_the_env_file_is_used_after_sighup_and_a_refused_one_is_not(tmp_path, fake):
    cfg, _ = write_config(tmp_path, {"local": {"transport": "local"}}, slack={"channel": "COPS"})
    envf = tmp_path / "eagle.env"
    envf.write_text("SLACK_BOT_TOKEN=xoxb-1111111111-first\n")
    port = free_port()
    proc = await start_serve(cfg, fake, "--http", str(port), "--env-file", str(envf), SLACK_SIGNING_SECRET=SECRET)
    try:
        await wait_serving(port, proc)
        assert fake.calls_to("auth.test")[-1].headers["Authorization"] == "Bearer xoxb-1111111111-first"
        envf.write_text('# rotated\nSLACK_BOT_TOKEN="xoxb-2222222222-second"\n')
        proc.send_signal(signal.SIGHUP)
        events = await until(lambda: db_rows(tmp_path, "select message from events where kind = 'reload'"))
        assert "environment SLACK_BOT_TOKEN" in events[0][0] and "second" not in events[0][0]
        await slash(port, "hello", fake, "c1")
        await fake.wait_for(lambda: finished(fake, 1))
        assert finished(fake, 1)[0].headers["Authorization"] == "Bearer xoxb-2222222222-second"

        fake.fail("auth.test", "invalid_auth")
        envf.write_text("SLACK_BOT_TOKEN=xoxb-3333333333-third\n")
        proc.send_signal(signal.SIGHUP)
        events = await until(lambda: db_rows(tmp_path, "select message from events where kind = 'reload' "
                                                       "order by id")[1:])
        assert "refused" in events[0][0] and "Slack refused the new SLACK_BOT_TOKEN: invalid_auth" in events[0][0]
        # issue 34: a refused SIGHUP reload was an INFO line and posted nowhere; the bot's channel hears it
        [post] = await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.postMessage")
                                              if c.args.get("channel") == "COPS" and "SIGHUP" in c.all_text()])
        assert "SIGHUP: reload refused, the running configuration stays: " in post.all_text()
        assert "Slack refused the new SLACK_BOT_TOKEN: invalid_auth" in post.all_text() and "third" not in post.all_text()
        await slash(port, "hello", fake, "c2")
        await fake.wait_for(lambda: finished(fake, 2))
        assert finished(fake, 2)[0].headers["Authorization"] == "Bearer xoxb-2222222222-second"
    finally:
        rc, err = await stop(proc)
    assert rc == 0, err
    assert "second" not in err and "third" not in err
    [refused] = [ln for ln in err.splitlines() if "outcome=refused" in ln]
    assert " WARNING eaglebot.audit: reload user=signal outcome=refused error=" in refused
    assert all(" INFO " in ln for ln in err.splitlines() if "outcome=ok" in ln)


def test_eagle_chat_reload_checks_the_config_and_names_a_bad_playbook_line(tmp_path):
    cfg, _ = write_config(tmp_path, {"local": {"transport": "local"}})
    r = eagle("chat", "reload", config=cfg)
    assert r.returncode == 0 and "check out" in r.stdout and "SIGHUP" in r.stdout, r.stderr
    (tmp_path / "playbooks" / "broken.yaml").write_text("name: broken\nsteps:\n  - skill: no.such.skill\n")
    r = eagle("chat", "reload", config=cfg)
    assert r.returncode == 2 and "broken.yaml:3" in (r.stdout + r.stderr), (r.stdout, r.stderr)


async def test_socket_mode_serves_metrics_on_metrics_port(tmp_path, fake):
    mport = free_port()
    cfg, _ = write_config(tmp_path, {"local": {"transport": "local"}}, metrics_port=mport)
    proc = await start_serve(cfg, fake, SLACK_APP_TOKEN="xapp-1-metrics-test")
    try:
        await wait_serving(mport, proc)
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{mport}/metrics") as r:
                assert r.status == 200
                names = {f.name for f in text_string_to_metric_families(await r.text())}
    finally:
        rc, err = await stop(proc)
    assert rc == 0, err
    assert {"eagle_runs", "eagle_leader", "eagle_open_incidents", "eagle_quarantined_gpus",
            "eagle_build_info"} <= names, names


async def test_a_reloaded_scheduler_lets_its_running_scheduled_run_finish_and_logs_its_start(
        services, tmp_path, caplog):
    import asyncio
    import logging

    from support.sched_helpers import finished_jobs, fire_now
    from support.slack_harness import PLAYBOOKS

    from eaglebot.frontends.oplog import RunLog
    from eaglebot.frontends.service.scheduler import build_scheduler

    pdir = tmp_path / "playbooks"
    pdir.mkdir()
    (pdir / "slow.yaml").write_text(yaml.safe_dump(PLAYBOOKS["slow"]))
    svc = await services(playbooks_dir=str(pdir), schedules=[
        {"name": "nap", "playbook": "slow", "hosts": ["local"], "cron": "0 3 * * *", "inputs": {"seconds": 2}}])
    svc.engine.watchers.append(RunLog(svc.redactor.text))
    sched = build_scheduler(svc)
    done = finished_jobs(sched)
    caplog.set_level(logging.INFO, logger="eaglebot.audit")
    sched.start()
    try:
        await asyncio.sleep(0)
        fire_now(sched, "nap")
        await until(lambda: svc.engine.busy)
        await asyncio.wait_for(sched.retire(), 30)     # returns once the job is over, not before
        assert done.qsize() == 1
        name, run_id = done.get_nowait()
    finally:
        sched.shutdown()
    assert (await svc.store.call(lambda s: s.get_run(run_id)))["status"] == "succeeded"
    audit = [r.getMessage() for r in caplog.records if r.name == "eaglebot.audit"]
    assert audit[0].startswith(f"run #{run_id} started playbook=slow hosts=local by=schedule:nap origin=schedule")
    assert audit[1].startswith(f"run #{run_id} finished succeeded") and len(audit) == 2


async def test_a_run_of_a_swapped_out_config_is_still_cancellable_and_its_transports_close_after_it(
        services, tmp_path):
    from support.slack_harness import PLAYBOOKS

    from eaglebot.config import load_settings
    from eaglebot.engine.runner import RunRequest
    from eaglebot.frontends.services import Snapshot

    pdir = tmp_path / "playbooks"
    pdir.mkdir()
    (pdir / "slow.yaml").write_text(yaml.safe_dump(PLAYBOOKS["slow"]))
    svc = await services(playbooks_dir=str(pdir))
    old = svc.current
    run_id, task = await svc.engine.start(RunRequest("slow", ["local"], {"seconds": 30}))
    await until(lambda: db_rows(tmp_path, "select 1 from steps where run_id = ? and status = 'running'", (run_id,)))
    svc.swap(Snapshot.build(load_settings(tmp_path / "eagle.yaml"), svc.store))
    assert svc.engine is not old.engine and await svc.close_idle() == 1   # the old one still runs
    assert svc.cancel(run_id)
    outcome = await task
    assert outcome.status == "cancelled"
    assert [s.name for s in outcome.steps if s.status != "skipped"] == ["nap", "cleanup note"]
    assert await svc.close_idle() == 0


async def test_the_slack_client_counts_its_retries_and_its_failed_calls(fake, make_settings):
    from slack_sdk.errors import SlackApiError

    from eaglebot.frontends.slack.client import make_client

    class Counts:
        def __init__(self):
            self.retries, self.errors = [], []

        def slack_retry(self, reason):
            self.retries.append(reason)

        def slack_error(self, error):
            self.errors.append(error)

    counts = Counts()
    client = make_client(make_settings(slack={"api_url": fake.base_url}), "xoxb-0000000000-count",
                         backoff_s=0.01, counters=counts)
    fake.fail("chat.postMessage", "429", times=1)
    await client.chat_postMessage(channel="C1", text="retried once, then posted")
    assert counts.retries == ["ratelimited"] and counts.errors == []
    fake.fail("chat.postMessage", "channel_not_found")
    with pytest.raises(SlackApiError):
        await client.chat_postMessage(channel="C2", text="refused")
    fake.fail("chat.postMessage", "503", times=3)
    with pytest.raises(SlackApiError):
        await client.chat_postMessage(channel="C3", text="down")
    assert counts.retries == ["ratelimited", "server_error", "server_error"]
    assert counts.errors == ["channel_not_found", "http_503"]


async def test_reload_takes_new_skill_code_and_playbooks_and_says_what_changed(services, tmp_path):
    from test_plugins import skill_source

    from eaglebot.engine.runner import RunRequest
    from eaglebot.frontends.service.reload import Reloader

    team, pdir = tmp_path / "team_skills", tmp_path / "playbooks"
    team.mkdir()
    pdir.mkdir()
    (team / "say.py").write_text(skill_source("team.say", "return StepResult.ok('first version')"))
    (pdir / "say.yaml").write_text("name: say\nsteps:\n  - skill: team.say\n")
    svc = await services(playbooks_dir=str(pdir), skill_paths=["team_skills"])
    reloader = Reloader(svc, config=tmp_path / "eagle.yaml")
    first = await svc.engine.run(RunRequest("say", ["local"]))
    assert first.steps[0].summary == "first version"

    (team / "say.py").write_text(skill_source("team.say", "return StepResult.ok('the second version')"))
    (team / "more.py").write_text(skill_source("team.more"))
    (pdir / "more.yaml").write_text("name: more\nsteps:\n  - skill: team.more\n")
    done, msg = await reloader.reload("U1")
    assert done and "playbooks +more" in msg and "skills +team.more" in msg, msg
    second = await svc.engine.run(RunRequest("say", ["local"]))
    assert second.steps[0].summary == "the second version"
    assert (await svc.engine.run(RunRequest("more", ["local"]))).status == "succeeded"

    (pdir / "bad.yaml").write_text("name: bad\nsteps:\n  - skill: team.say\n    with: {nope: 1}\n")
    done, msg = await reloader.reload("U1")
    assert not done and "bad.yaml:4" in msg, msg
    assert "team.more" in svc.registry and svc.settings.playbooks_path == pdir   # the last good config stays


