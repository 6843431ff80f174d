"""The missing-run alarm: a schedule whose due run did not start within its grace is named once
in its channel with its last run and why; `eagle schedule list` shows it OVERDUE."""
from __future__ import annotations

from datetime import datetime, timezone

from support.history_seed import seed_run
from test_scheduler import RecordingHooks, pbdir, sched_cfg  # noqa: F401  (pbdir is a fixture)

from eaglebot.frontends.service.scheduler import build_scheduler
from eaglebot.frontends.schedule_view import schedule_rows, schedule_state

NOW = datetime(2030, 1, 8, 5, 0, tzinfo=timezone.utc)          # the 03:00 fire was 2 h ago; grace 1 h


async def _sched(services, pbdir):  # noqa: F811
    svc = await services(playbooks_dir=str(pbdir), schedules=[sched_cfg(misfire_grace_s=3600)])
    rid = seed_run(svc.store.sync, "nightly", "local", origin="schedule", schedule="nightly-bench",
                   started_at="2030-01-07T03:00:01.000Z")
    hooks = RecordingHooks()
    hooks.store = svc.store
    return svc, rid, hooks, build_scheduler(svc, hooks)


async def test_a_paused_schedule_past_its_grace_posts_one_alarm_naming_the_last_run_and_why(services, pbdir):  # noqa: F811
    svc, rid, hooks, sched = await _sched(services, pbdir)
    await svc.store.call(lambda s: s.record_fire("nightly-bench", "2030-01-08T03:00:00.042Z", "paused"))
    await svc.store.call(lambda s: s.set_schedule_paused("nightly-bench", True, "UALICE"))
    early = datetime(2030, 1, 8, 3, 30, tzinfo=timezone.utc)
    assert await sched.check_alarms(now=early) == []                  # within the grace: not yet
    [text] = await sched.check_alarms(now=NOW)
    assert hooks.posts == [("C0123", text)]
    assert f"has not run since run #{rid} (succeeded) at 2030-01-07 03:00 UTC" in text
    assert "due at 2030-01-08 03:00 UTC did not start (the schedule is paused (by UALICE))" in text
    assert await sched.check_alarms(now=NOW) == []                    # once
    [row] = schedule_rows(svc.settings, svc.store.sync, NOW)
    assert row["overdue"] == {"due": "2030-01-08T03:00:00Z", "why": "the schedule is paused (by UALICE)"}
    assert schedule_state(row).startswith("OVERDUE since 2030-01-08 03:00")


async def test_every_host_quarantined_is_the_reason_given(services, pbdir):  # noqa: F811
    svc, rid, hooks, sched = await _sched(services, pbdir)
    await svc.store.call(lambda s: s.record_fire("nightly-bench", "2030-01-08T03:00:00.042Z", "quarantined"))
    [text] = await sched.check_alarms(now=NOW)
    assert "every host of it is quarantined by the health watch" in text


async def test_a_nightly_missed_while_the_bot_was_down_is_reported_once_not_twice(services, pbdir):  # noqa: F811
    svc, rid, hooks, sched = await _sched(services, pbdir)
    [missed] = await sched.check_misfires(now=NOW)                    # the bot starts after the grace
    assert "missed 1 run while the bot was down" in missed
    assert await sched.check_alarms(now=NOW) == []
    assert len(hooks.posts) == 1
    [row] = schedule_rows(svc.settings, svc.store.sync, NOW)
    assert row["overdue"]["why"] == "the bot was not running at its fire time"


async def test_a_schedule_that_ran_on_time_raises_nothing(services, pbdir):  # noqa: F811
    svc, rid, hooks, sched = await _sched(services, pbdir)
    seed_run(svc.store.sync, "nightly", "local", origin="schedule", schedule="nightly-bench",
             started_at="2030-01-08T03:00:01.000Z")
    assert await sched.check_alarms(now=NOW) == [] and hooks.posts == []
    assert schedule_rows(svc.settings, svc.store.sync, NOW)[0]["overdue"] is None
