"""N `eagle serve` replicas on one store (issue 23 item 5): one leader by a lease, fires claimed
once, approvals clicked on any replica, dead replicas' runs released, `every:` schedules, and
the HA soak (tests/soak/soak_replicas.py) for about a minute with two leader kills."""
from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from support.slack_harness import approval_message, open_harness, start_foreign_gpu_holder

from eaglebot.config import ScheduleConfig, load_settings
from eaglebot.errors import UsageError
from eaglebot.frontends.cli.main import main
from eaglebot.frontends.cron import fires_between, slot_at, trigger_for
from eaglebot.frontends.service.leader import Leadership
from eaglebot.frontends.replicas_text import LEADER
from eaglebot.frontends.service.scheduler import build_scheduler
from eaglebot.frontends.slack.blocks import APPROVE_ACTION
from eaglebot.store import AsyncStore, Store, parse_iso

sys.path.insert(0, str(Path(__file__).parent / "soak"))
from soak_replicas import soak  # noqa: E402

TICK = {"name": "tick", "description": "t", "steps": [{"skill": "shell", "with": {"command": "echo tick"}}]}


class Duties:
    def __init__(self) -> None:
        self.log: list[tuple[str, float]] = []

    async def start(self) -> None:
        self.log.append(("start", time.time()))

    async def stop(self) -> None:
        self.log.append(("stop", time.time()))

    async def sweep(self) -> None:
        pass


async def _until(pred, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.02)


# -- the leader lease ------------------------------------------------------------------------

async def test_one_replica_leads_and_another_takes_over_when_it_stops(tmp_path):
    stores = [await AsyncStore.open(tmp_path / "eagle.db") for _ in range(3)]
    duties = [Duties() for _ in range(3)]
    leads = [Leadership(s, d, ttl_s=2.0, beat_s=0.1, margin_s=0.5, rid=f"r{i}")
             for i, (s, d) in enumerate(zip(stores, duties))]
    stops = [asyncio.Event() for _ in leads]
    tasks = [asyncio.create_task(lead.run(stop)) for lead, stop in zip(leads, stops)]
    try:
        await _until(lambda: any(lead.leading for lead in leads))
        for _ in range(20):   # never two at once
            assert sum(lead.leading for lead in leads) == 1
            await asyncio.sleep(0.05)
        first = next(i for i, lead in enumerate(leads) if lead.leading)
        stops[first].set()   # a clean stop releases the lease: no waiting for it to expire
        await tasks[first]
        assert [k for k, _ in duties[first].log] == ["start", "stop"]
        await _until(lambda: any(lead.leading for i, lead in enumerate(leads) if i != first))
        second = next(i for i, lead in enumerate(leads) if lead.leading)
        assert (await stores[0].call(lambda s: s.lease_holder(LEADER)))["holder"] == f"r{second}"
        assert {r["id"] for r in await stores[0].call(lambda s: s.replicas())} == {"r0", "r1", "r2"}
    finally:
        for s in stops:
            s.set()
        await asyncio.gather(*tasks)
        for s in stores:
            await s.aclose()
    events = [e["message"] for e in reversed(Store(tmp_path / "eagle.db").events("leader"))]
    assert events[0] == f"r{first} took the leader lease"
    assert events[1] == f"r{first} released the leader lease"
    assert events[2] == f"r{second} took the leader lease"


def test_an_expired_lease_is_taken_over_and_the_change_is_an_event(tmp_path):
    """SQLite's lease is a row with an expiry (PostgreSQL's a session lock: tests/test_store_pg.py)."""
    store = Store(tmp_path / "eagle.db")
    assert store.lease_acquire(LEADER, "r1", -1)               # already expired (ttl in the past)
    assert store.lease_acquire(LEADER, "r2", 30)
    assert store.lease_holder(LEADER)["holder"] == "r2"
    assert not store.lease_acquire(LEADER, "r1", 30)
    took = store.events("leader")[0]
    assert took["actor"] == "r2" and took["message"].startswith("r2 took the leader lease; r1 held it until")
    assert store.audit_verify()["ok"]
    store.close()


class _Called(Exception):
    """What a store call asked for: the method's name (raised by `_Peek`)."""


class _Peek:
    def __getattr__(self, name: str):
        def called(*a, **kw):
            raise _Called(name)
        return called


class HangingRenewals:
    """The store's door as a leader sees it when the DB stalls: the first lease call answers, the
    renewals never do."""

    def __init__(self, store: AsyncStore, hang: str):
        self.store, self.hang, self.calls = store, hang, {"replica_beat": 0, "lease_acquire": 0}
        self.db_id = store.db_id

    async def call(self, fn):
        try:
            fn(_Peek())
        except _Called as e:
            name = e.args[0]
        if name in self.calls:
            self.calls[name] += 1
            if name == self.hang and self.calls[name] > 1:
                await asyncio.Event().wait()
        return await self.store.call(fn)


@pytest.mark.parametrize("hang", ["lease_acquire", "replica_beat"])
async def test_a_leader_whose_renewals_hang_steps_down_before_its_lease_can_expire(tmp_path, hang):
    store = await AsyncStore.open(tmp_path / "eagle.db")
    duties, stop = Duties(), asyncio.Event()
    lead = Leadership(HangingRenewals(store, hang), duties, ttl_s=2.0, beat_s=0.2, margin_s=0.6, rid="r1")
    task = asyncio.create_task(lead.run(stop))
    try:
        await _until(lambda: [k for k, _ in duties.log] == ["start", "stop"])
        lease = await store.call(lambda s: s.lease_holder(LEADER))
        stepped_down = duties.log[1][1]
        assert stepped_down < parse_iso(lease["expires_at"]).timestamp()   # before anyone else could take it
        assert not lead.is_leader()
    finally:
        stop.set()
        await task
        await store.aclose()


# -- schedules: every:, and a fire claimed once ----------------------------------------------

def _schedule_yaml(tmp_path, sched: dict) -> Path:
    (tmp_path / "playbooks").mkdir(exist_ok=True)
    (tmp_path / "playbooks" / "tick.yaml").write_text(yaml.safe_dump(TICK))
    p = tmp_path / "eagle.yaml"
    p.write_text(yaml.safe_dump({"audit_db": "eagle.db", "playbooks_dir": "playbooks",
                                 "schedules": [{"name": "t", "playbook": "tick", "hosts": ["local"], **sched}]},
                                sort_keys=False))
    return p


@pytest.mark.parametrize("sched, why", [
    ({"cron": "* * * * *", "every": "5s"}, "exactly one of cron: or every:"),
    ({}, "exactly one of cron: or every:"),
    ({"every": "5 minutes"}, "'5 minutes' is not an interval such as 5s, 10m or 1h"),
    ({"every": "0s"}, "is not an interval"),
])
def test_a_schedule_takes_exactly_one_of_cron_and_every_with_the_files_line(tmp_path, sched, why):
    p = _schedule_yaml(tmp_path, sched)
    with pytest.raises(UsageError, match=why) as e:
        load_settings(p)
    assert str(e.value).startswith(f"{p}:4: schedules.0")


def test_every_fires_on_epoch_aligned_times_whoever_computes_them():
    cfg = ScheduleConfig(name="t", playbook="tick", every="5s")
    assert cfg.every_s == 5 and ScheduleConfig(name="t", playbook="p", every="2h").every_s == 7200
    a, b = trigger_for(cfg), trigger_for(cfg)   # two replicas, built at different moments
    t0 = datetime(2030, 1, 1, 0, 0, 1, 234000, tzinfo=timezone.utc)
    fa = fires_between(a, t0, t0 + timedelta(seconds=20))
    fb = fires_between(b, t0 + timedelta(seconds=5), t0 + timedelta(seconds=20))
    assert [t.second for t in fa] == [5, 10, 15, 20] and fb == fa[1:]
    late = datetime(2030, 1, 1, 0, 0, 17, 900000, tzinfo=timezone.utc)
    assert slot_at(a, late, 30) == datetime(2030, 1, 1, 0, 0, 15, tzinfo=timezone.utc)
    # a new leader's catch-up runs a missed fire now, off the grid: the next fire is back on it
    # (APScheduler's own IntervalTrigger would go on at 17.9 + 5 s, late for the 20 s slot)
    assert a.get_next_fire_time(late, late + timedelta(milliseconds=5)) == datetime(2030, 1, 1, 0, 0, 20,
                                                                                  tzinfo=timezone.utc)
    on_grid = datetime(2030, 1, 1, 0, 0, 20, tzinfo=timezone.utc)
    assert a.get_next_fire_time(on_grid, on_grid) == on_grid + timedelta(seconds=5)


def test_schedule_list_shows_the_interval(tmp_path, capsys):
    p = _schedule_yaml(tmp_path, {"every": "5m"})
    assert main(["schedule", "list", "--config", str(p)]) == 0
    assert "every 5m" in capsys.readouterr().out
    assert main(["schedule", "list", "--json", "--config", str(p)]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["every"], row["cron"]) == ("5m", None)
    assert main(["chat", "schedule", "--config", str(p)]) == 0   # /eagle schedule: the interval, not None
    out = capsys.readouterr().out
    assert "every 5m" in out and "None" not in out


class Posts:
    text_summaries = False

    def __init__(self) -> None:
        self.posts: list[str] = []

    def observer(self, cfg):
        from eaglebot.engine.runner import Observer
        return Observer()

    async def post(self, channel, text):
        self.posts.append(text)

    async def upload(self, *a):
        pass


async def test_two_replicas_firing_the_same_slot_start_one_run_and_warn_of_no_busy_host(tmp_path):
    cfg_path = _schedule_yaml(tmp_path, {"every": "5s"})
    settings = load_settings(cfg_path)
    from eaglebot.frontends.services import Services

    a, b = await Services.open(settings), await Services.open(settings)
    try:
        hooks_a, hooks_b = Posts(), Posts()
        sa, sb = build_scheduler(a, hooks_a, "A"), build_scheduler(b, hooks_b, "B")
        cfg = settings.schedules[0]
        slot = slot_at(trigger_for(cfg), datetime.now(timezone.utc), cfg.misfire_grace_s)
        got = await asyncio.gather(sa.run_schedule(cfg, slot), sb.run_schedule(cfg, slot))
        assert sorted(x is None for x in got) == [False, True]
        runs = await a.store.call(lambda s: s.history(origin="schedule"))
        assert [r["id"] for r in runs] == [x for x in got if x is not None]
        assert runs[0]["status"] == "succeeded"
        assert not [t for t in hooks_a.posts + hooks_b.posts if "busy" in t]
        fires = await a.store.call(lambda s: s.schedule_fires("t"))
        assert [(f["fire_time"], f["status"]) for f in fires] == [
            (slot.isoformat().replace("+00:00", "Z"), "succeeded")]
    finally:
        await a.close()
        await b.close()


# -- approvals on any replica ----------------------------------------------------------------

async def test_an_approval_clicked_on_another_replica_decides_the_waiting_run(tmp_path, fake, stranger):
    db = str(tmp_path / "eagle.db")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = await open_harness(tmp_path / "a", fake, audit_db=db)
    other = await open_harness(tmp_path / "b", fake, audit_db=db)
    try:
        holder = start_foreign_gpu_holder(tmp_path / "a" / "sim-state")
        await one.command("guarded local")
        _, value = await fake.wait_for(lambda: approval_message(fake))
        assert await other.click(APPROVE_ACTION, value, user="UBOSS") == 200
        run = await one.wait_run(await one.last_run_id())
        assert run["status"] == "succeeded"
        [row] = await one.query("select status, decided_by from approvals")
        assert row == {"status": "approved", "decided_by": "UBOSS"}
        assert holder.wait(10) is not None   # the approved step killed it
        await other.click(APPROVE_ACTION, value, user="UBOSS")   # a second click decides nothing
        late = await fake.wait_for(lambda: [c for c in fake.calls if c.method == "response_url"
                                            and "no longer waiting" in c.all_text()])
        assert late
    finally:
        await one.close()
        await other.close()


# -- dead replicas ---------------------------------------------------------------------------

def test_runs_of_a_replica_on_another_machine_that_stopped_beating_are_interrupted(tmp_path):
    store = Store(tmp_path / "eagle.db")
    ids = {}
    for name in ("dead", "alive", "cli"):
        ids[name] = store.start_run([f"gpu-{name}"], {"playbook": "p", "hosts": [f"gpu-{name}"], "inputs": {},
                                                      "variables": {}, "actor": "a", "origin": "slack"})
    with store._tx():
        for i, name in enumerate(("dead", "alive", "cli")):
            store.db.execute("update runs set hostname = $1, pid = $2, proc_start = '7' where id = $3",
                             [f"far-{name}", 4000 + i, ids[name]])
            store.db.execute("update locks set hostname = $1, pid = $2, proc_start = '7' where run_id = $3",
                             [f"far-{name}", 4000 + i, ids[name]])
    store.replica_beat("far-dead:4000:aa", hostname="far-dead", pid=4000, proc_start="7", version="x")
    store.replica_beat("far-alive:4001:bb", hostname="far-alive", pid=4001, proc_start="7", version="x")
    long_ago = (datetime.now(timezone.utc) - timedelta(minutes=1)).isoformat(timespec="milliseconds")
    with store._tx():
        store.db.execute("update replicas set seen_at = $1 where id = 'far-dead:4000:aa'",
                         [long_ago.replace("+00:00", "Z")])
    assert store.recover() == [ids["dead"]]
    assert store.get_run(ids["dead"])["status"] == "interrupted"
    assert [store.get_run(ids[n])["status"] for n in ("alive", "cli")] == ["running", "running"]
    assert sorted(lk["host"] for lk in store.locks()) == ["gpu-alive", "gpu-cli"]
    store.close()


def test_eagle_status_names_the_replicas_and_the_leader(tmp_path, capsys):
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": "eagle.db"}))
    store = Store(tmp_path / "eagle.db")
    store.replica_beat("h1:10:aa", hostname="h1", pid=10, proc_start=None, version="0.1.0")
    store.replica_beat("h2:20:bb", hostname="h2", pid=20, proc_start=None, version="0.1.0")
    assert store.lease_acquire(LEADER, "h2:20:bb", 30)
    store.close()
    assert main(["status", "--json", "--config", str(cfg)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["leader"]["id"] == "h2:20:bb"
    assert [(r["id"], r["alive"], r["leader"]) for r in sorted(out["replicas"], key=lambda r: r["id"])] == [
        ("h1:10:aa", True, False), ("h2:20:bb", True, True)]
    assert out["running"] == [] and out["locks"] == []
    assert main(["status", "--config", str(cfg)]) == 0
    text = capsys.readouterr().out
    assert "leader: h2:20:bb since" in text and "replicas (2): " in text


# -- the soak ---------------------------------------------------------------------------------

@pytest.mark.e2e  # a soak: a minute a backend
@pytest.mark.ha
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_ha_soak_two_replicas_every_5s_survive_two_leader_kills(tmp_path, request, backend):
    """Two real `eagle serve --http` replicas on one store (an SQLite file; a real PostgreSQL),
    a schedule every 5 s for about a minute, the leader SIGKILLed during a scheduled run and
    while an approval waits."""
    url = request.getfixturevalue("pg_server").fresh_db() if backend == "postgresql" else None
    report = await soak(tmp_path, duration_s=50, kills=2, every="5s", run_s=2.0, seed=23, store_url=url)
    assert report.problems() == [], report.summary()
    assert [k.during for k in report.kills] == ["scheduled run", "approval"]
    assert len(report.slots) >= 5 and sum(1 for a in report.approvals if a.clicked_on) == 3
    print(report.summary())
