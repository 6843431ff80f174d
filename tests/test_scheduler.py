"""Schedules through the real engine and APScheduler; misfires from the audit store; trends."""
from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from support.history_seed import seed_run
from support.sched_helpers import finished_jobs, fire_now, scheduled

from eaglebot.frontends.cli.main import main
from eaglebot.config import ScheduleConfig
from eaglebot.errors import UsageError
from eaglebot.engine.runner import Observer
from eaglebot.frontends.cron import fires_between, trigger_for
from eaglebot.frontends.service.scheduler import build_scheduler
from eaglebot.frontends.schedule_view import schedule_rows
from eaglebot.frontends.plot import plot_trend
from eaglebot.store.rows import NewRun

PNG = b"\x89PNG\r\n\x1a\n"

SHELL_PB = {
    "name": "nightly",
    "description": "a scheduled shell run",
    "inputs": {"word": {"type": "str", "default": "hi"}},
    "steps": [{"skill": "shell", "with": {"command": "echo {{ word }}", "changed": False}},
              {"skill": "metric.record", "with": {"name": "output_throughput", "value": 42.0, "unit": "tok/s"}}],
}


class RecordingHooks:
    def __init__(self):
        self.posts: list[tuple[str | None, str]] = []
        self.uploads: list[tuple[str | None, str | None, bytes, str]] = []
        self.observed: list[str] = []

    def observer(self, cfg):
        hooks = self

        class Obs(Observer):
            async def run_started(self, run_id, playbook, hosts, req):
                hooks.observed.append(cfg.name)
                await hooks.store.call(lambda s: s.set_run_thread(run_id, "C-THREAD", "1700000000.000100"))

        return Obs()

    async def post(self, channel, text):
        self.posts.append((channel, text))

    async def upload(self, channel, thread_ts, path, title):
        self.uploads.append((channel, thread_ts, Path(path).read_bytes(), title))


@pytest.fixture
def pbdir(tmp_path):
    d = tmp_path / "playbooks"
    d.mkdir()
    (d / "nightly.yaml").write_text(yaml.safe_dump(SHELL_PB))
    return d


def sched_cfg(**kw) -> dict:
    base = {"name": "nightly-bench", "playbook": "nightly", "hosts": ["local"], "cron": "0 3 * * *",
            "timezone": "UTC", "channel": "C0123", "inputs": {"word": "scheduled"}}
    base.update(kw)
    return base


async def test_scheduler_fires_a_shell_playbook_through_the_engine(services, pbdir):
    svc = await services(playbooks_dir=str(pbdir), schedules=[sched_cfg()])
    hooks = RecordingHooks()
    hooks.store = svc.store
    sched = build_scheduler(svc, hooks)
    finished = finished_jobs(sched)
    sched.start()
    try:
        await asyncio.sleep(0)
        fire_now(sched, "nightly-bench")
        name, run_id = await asyncio.wait_for(finished.get(), 30)
    finally:
        sched.shutdown()
    assert name == "nightly-bench" and run_id is not None
    run = await svc.store.call(lambda s: s.get_run(run_id))
    assert run["status"] == "succeeded"
    assert (run["origin"], run["schedule"], run["actor"]) == ("schedule", "nightly-bench", "schedule:nightly-bench")
    assert json.loads(json.dumps(run["inputs"])) == {"word": "scheduled"}
    steps = await svc.store.call(lambda s: s.steps(run_id))
    assert steps[0]["output"].strip() == "scheduled"
    assert hooks.observed == ["nightly-bench"]
    [(ch, ts, png, title)] = hooks.uploads
    assert (ch, ts) == ("C-THREAD", "1700000000.000100")
    assert png.startswith(PNG) and "output_throughput" in title
    fires = list(svc.store.sync.db.query("select status, run_id from schedule_fires where status != 'registered'"))
    assert fires == [{"status": "succeeded", "run_id": run_id}]


@pytest.mark.parametrize("approve", [False, True])
async def test_schedule_approve_decides_confirm_steps(services, pbdir, approve):
    from eaglebot.sdk import ApprovalRequest

    svc = await services(playbooks_dir=str(pbdir), schedules=[sched_cfg(approve=approve)])
    captured = {}
    orig = svc.engine.start

    async def spy(req, observer=None, approver=None):
        captured["req"], captured["approver"] = req, approver
        return await orig(req, observer, approver)

    svc.engine.start = spy
    assert await build_scheduler(svc).run_schedule(svc.settings.schedules[0]) is not None
    req = captured["req"]
    assert req.assume_yes is approve and captured["approver"] is None and req.origin == "schedule"
    ok, why = await svc.engine._approve(ApprovalRequest(1, "local", "cleanup", "kill 1 process", []), req, None)
    assert ok is approve
    if not approve:
        assert "the schedule does not say approve: true" in why


async def test_busy_host_is_posted_once_and_does_not_crash(services, pbdir, caplog):
    svc = await services(playbooks_dir=str(pbdir), schedules=[sched_cfg()])
    hooks = RecordingHooks()
    hooks.store = svc.store
    other = await svc.store.call(lambda s: s.create_run(NewRun(playbook="x", hosts=["local"], inputs={}, variables={}, actor="t",
                                       origin="cli")))
    await svc.store.call(lambda s: s.acquire_hosts(other, ["local"]))
    sched = build_scheduler(svc, hooks)
    assert await sched.run_schedule(svc.settings.schedules[0]) is None
    [(ch, text)] = hooks.posts
    assert ch == "C0123" and "did not start" in text and "busy" in text
    # a heartbeat firing again while that run still holds the host (an approval waits): logged, not posted
    with caplog.at_level(logging.INFO, logger="eaglebot.scheduler"):
        assert await sched.run_schedule(svc.settings.schedules[0], datetime.now(timezone.utc)
                                        + timedelta(minutes=1)) is None
    assert len(hooks.posts) == 1
    assert any("did not start" in r.getMessage() and f"run #{other}" in r.getMessage() for r in caplog.records)


async def test_unknown_playbook_is_posted_at_start_and_never_scheduled(services, pbdir):
    svc = await services(playbooks_dir=str(pbdir), schedules=[sched_cfg(playbook="nope")])
    hooks = RecordingHooks()
    sched = build_scheduler(svc, hooks)
    sched.start()
    try:
        for _ in range(200):
            if hooks.posts:
                break
            await asyncio.sleep(0.02)
        assert scheduled(sched) == []
    finally:
        sched.shutdown()
    assert any("unknown playbook 'nope'" in t and "eagle.yaml:" in t and "not scheduled" in t for _, t in hooks.posts)


async def test_missed_fire_while_down_is_reported(services, pbdir):
    svc = await services(playbooks_dir=str(pbdir), schedules=[sched_cfg(misfire_grace_s=60)])
    now = datetime(2030, 1, 10, 12, 0, tzinfo=timezone.utc)
    rid = seed_run(svc.store.sync, "nightly", "local", origin="schedule", schedule="nightly-bench",
                   started_at="2030-01-07T03:00:01.000Z")
    hooks = RecordingHooks()
    sched = build_scheduler(svc, hooks)
    msgs = await sched.check_misfires(now=now)
    assert len(msgs) == 1 and hooks.posts == [("C0123", msgs[0])]
    text = msgs[0]
    assert "schedule nightly-bench" in text and "missed 3 runs while the bot was down" in text
    assert "2030-01-10 03:00 UTC" in text and f"last run #{rid}" in text
    assert "Next run at 2030-01-11 03:00 UTC" in text
    # reported once: the missed fires are now in the audit store
    assert await sched.check_misfires(now=now) == []


async def test_first_start_registers_the_schedule_without_a_report(services, pbdir):
    svc = await services(playbooks_dir=str(pbdir), schedules=[sched_cfg()])
    sched = build_scheduler(svc, RecordingHooks())
    now = datetime(2030, 1, 10, 12, 0, tzinfo=timezone.utc)
    assert await sched.check_misfires(now=now) == []
    later = now + timedelta(days=2)
    [msg] = await sched.check_misfires(now=later)
    assert "missed 2 runs" in msg and "no run recorded yet" in msg


def test_cron_math_and_validation():
    trig = trigger_for(ScheduleConfig(name="n", playbook="p", cron="0 3 * * *"))
    a = datetime(2030, 1, 1, 3, 0, 0, 500000, tzinfo=timezone.utc)
    got = fires_between(trig, a, a + timedelta(days=2))
    assert [t.day for t in got] == [2, 3]
    with pytest.raises(UsageError, match="invalid cron"):
        trigger_for(ScheduleConfig(name="n", playbook="p", cron="0 3 * *"))
    with pytest.raises(UsageError, match="not both"):
        trigger_for(ScheduleConfig(name="n", playbook="p", cron="0 3 1 * 1"))
    with pytest.raises(UsageError, match="unknown timezone"):
        trigger_for(ScheduleConfig(name="n", playbook="p", cron="0 3 * * *", timezone="Mars/Base"))


def test_schedule_rows_and_list_json(make_settings, capsys, tmp_path, pbdir):
    settings = make_settings(playbooks_dir=str(pbdir),
                             schedules=[sched_cfg(), sched_cfg(name="tz", cron="30 1 * * 1", timezone="Europe/Berlin")])
    from eaglebot.store import Store

    store = Store(settings.db_path)
    rid = seed_run(store, "nightly", "local", origin="schedule", schedule="nightly-bench")
    rows = schedule_rows(settings, store, now=datetime(2030, 1, 10, 12, 0, tzinfo=timezone.utc))
    # the run was seeded today and "now" is 2030: the missing-run alarm says so
    assert rows[0].pop("overdue")["why"] == "the bot was not running at its fire time"
    assert rows[0] == {"name": "nightly-bench", "playbook": "nightly", "hosts": ["local"], "cron": "0 3 * * *",
                       "every": None, "timezone": "UTC", "next_fire": "2030-01-11T03:00:00Z", "last_run_id": rid,
                       "last_status": "succeeded", "paused": False, "paused_by": None, "errors": []}
    assert rows[1]["next_fire"] == "2030-01-14T00:30:00Z"  # Monday 01:30 in Berlin (CET)
    assert rows[1]["last_run_id"] is None
    capsys.readouterr()
    assert main(["schedule", "list", "--json", "--config", str(tmp_path / "eagle.yaml")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in doc] == ["nightly-bench", "tz"]
    assert main(["schedule", "list", "--config", str(tmp_path / "eagle.yaml")]) == 0
    assert "nightly-bench" in capsys.readouterr().out


def test_trend_plot_writes_a_png_and_refuses_without_data(tmp_path, capsys):
    from eaglebot.store import Store

    store = Store(tmp_path / "e.db")
    ids = [seed_run(store, "bench", "gpu-01", metrics={"output_throughput": v})
           for v in (90, 91, 89, 90.5, 89.5, 90, 54.8)]
    store.set_baseline(ids[1], "t")
    out = plot_trend(store, "bench", "gpu-01", "output_throughput", tmp_path / "t.png")
    assert out.read_bytes().startswith(PNG)
    with pytest.raises(UsageError, match="no median_ttft_ms values for playbook 'bench' on host 'gpu-01'"):
        plot_trend(store, "bench", "gpu-01", "median_ttft_ms", tmp_path / "u.png")
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": "e.db"}))
    capsys.readouterr()
    assert main(["trend", "bench", "gpu-01", "output_throughput", "--out", str(tmp_path / "c.png"),
                 "--config", str(cfg)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "c.png")
    assert main(["trend", "bench", "nope", "output_throughput", "--config", str(cfg)]) == 2


def test_crontab_day_of_week_numbers_mean_what_cron_means():
    from eaglebot.frontends.cron import crontab_dow

    assert crontab_dow("*") == "*"
    assert crontab_dow("mon-fri") == "mon-fri"
    assert crontab_dow("1") == "mon"
    assert crontab_dow("0") == crontab_dow("7") == "sun"
    assert crontab_dow("1-5") == "mon,tue,wed,thu,fri"
    assert crontab_dow("*/2") == "sun,tue,thu,sat"
    assert crontab_dow("5-7") == "sun,fri,sat"
    assert crontab_dow("1,3") == "mon,wed"


async def test_latest_missed_fire_within_grace_is_run_at_start(services, pbdir):
    svc = await services(playbooks_dir=str(pbdir), schedules=[sched_cfg(misfire_grace_s=3 * 86400)])
    old = (datetime.now(timezone.utc) - timedelta(days=2)).isoformat(timespec="milliseconds")
    before = seed_run(svc.store.sync, "nightly", "local", origin="schedule", schedule="nightly-bench",
                      started_at=old.replace("+00:00", "Z"))
    hooks = RecordingHooks()
    hooks.store = svc.store
    sched = build_scheduler(svc, hooks)
    finished = finished_jobs(sched)
    sched.start()  # checks misfires in a task, then APScheduler runs the job
    try:
        name, run_id = await asyncio.wait_for(finished.get(), 30)
    finally:
        sched.shutdown()
    assert run_id is not None and run_id > before
    misfire = [t for _, t in hooks.posts if "missed" in t]
    assert len(misfire) == 1 and "running it now" in misfire[0]


async def test_a_scheduled_run_skips_a_quarantined_host_and_says_so(services, pbdir):
    svc = await services(playbooks_dir=str(pbdir), schedules=[sched_cfg(hosts=["h1", "h2"])],
                         hosts={"h1": {"transport": "local"}, "h2": {"transport": "local"}})
    hooks = RecordingHooks()
    hooks.store = svc.store
    await svc.store.call(lambda s: s.health_transition("h2", 0, "quarantined", "Xid 79 (GPU has fallen off the bus)", "health-watch"))
    sched = build_scheduler(svc, hooks)
    run_id = await sched.run_schedule(svc.settings.schedules[0])
    assert run_id is not None and (await svc.store.call(lambda s: s.get_run(run_id)))["hosts"] == ["h1"]
    [skip] = await svc.store.call(lambda s: s.events("quarantine_skip"))
    assert "schedule nightly-bench skipped h2 is quarantined" in skip["message"] and "Xid 79" in skip["message"]
    await svc.store.call(lambda s: s.health_transition("h1", -1, "quarantined", "probe said nvidia-smi exit 15", "health-watch"))
    assert await sched.run_schedule(svc.settings.schedules[0]) is None
    assert (await svc.store.call(lambda s: s.last_fire("nightly-bench")))["status"] == "quarantined"
    assert "did not start" in hooks.posts[-1][1] and "quarantined" in hooks.posts[-1][1]
