"""Soak of N=2 `eagle serve` replicas on one store with a leader that keeps dying (a script,
not collected by pytest; tests/test_replicas.py runs its core for about a minute).

Two real `eagle serve --http` processes share one audit store (an SQLite file by default, or
`--store postgresql://...`), answer the fake Slack Web API of tests/fakes, and run the
playbooks on host `sim` (local transport, the simulated nvidia-smi). A schedule fires every
`--every` (e.g. 5s) or on `--cron` (default: every minute). The soak SIGKILLs the leader
`--kills` times at random moments, the first while a scheduled run is running and the second
while an approval waits, and restarts it each time; between kills it starts runs that need
an approval on one replica and clicks Approve on the other. Then it checks:

  - every fire time (slot) of the schedule has exactly one run: none twice; a slot without a
    run only inside a failover gap, where APScheduler's coalescing folds the missed fires
    into the one the new leader runs (the latest, within `misfire_grace_s`), or while that
    late catch-up run still runs (`max_instances=1`: with `every: 5s` and 2 s runs a catch-up
    can overlap the next fire; with a minute's 15 s runs it cannot);
  - no ":warning: ... did not start: host sim is busy" was posted;
  - approvals clicked on the other replica were approved and their runs succeeded; the one
    left waiting when its leader was killed was expired and killed nothing;
  - `eagle audit verify` exits 0;
  - failover (the kill -> the new leader's lease acquired_at) <= 15 s each time,
    and prints their distribution.

    .venv/bin/python tests/soak/soak_replicas.py [--duration 600] [--cron "* * * * *" | --every 5s]
        [--kills 5] [--store PATH_OR_URL | --pg] [--seed N] [--keep DIR]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

import aiohttp  # noqa: E402
import yaml  # noqa: E402

from support.fakes.slack_api import FakeSlackAPI  # noqa: E402
from support.slack_harness import (CHANNEL, PLAYBOOKS, SECRET, TOKEN, action_body, command_body,  # noqa: E402
                           signed_headers, start_foreign_gpu_holder)

from eaglebot.config import ScheduleConfig, load_settings  # noqa: E402
from eaglebot.frontends.cron import fires_between, trigger_for  # noqa: E402
from eaglebot.frontends.replicas_text import LEADER  # noqa: E402
from eaglebot.frontends.services import Services  # noqa: E402
from eaglebot.frontends.slack.blocks import APPROVE_ACTION  # noqa: E402
from eaglebot.sim import gpu_state, install_sim_bin  # noqa: E402
from eaglebot.store import parse_iso  # noqa: E402

FAILOVER_MAX_S = 15.0
SCHEDULE = "tick"
TICK = {"name": "tick", "description": "a scheduled run that takes a while",
        "inputs": {"seconds": {"type": "float", "default": 2}},
        "steps": [{"name": "work", "skill": "shell", "with": {"command": "sleep {{ seconds }}; echo tick"}}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Replica:
    name: str
    port: int
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0


@dataclass
class Kill:
    at: float                  # wall clock (time.time()) of the SIGKILL
    replica: str
    holder: str                # the lease holder killed
    during: str                # "scheduled run", "approval", "random"
    new_holder: str = ""
    failover_s: float = -1.0   # kill -> the new leader's acquired_at
    taken_at: float = 0.0


@dataclass
class Approval:
    run_id: int
    started_on: str
    clicked_on: str | None     # None: left waiting while its replica was killed
    approval_id: int = 0


@dataclass
class Report:
    kills: list[Kill] = field(default_factory=list)
    approvals: list[Approval] = field(default_factory=list)
    slots: dict[str, list[int]] = field(default_factory=dict)
    coalesced: list[str] = field(default_factory=list)
    overlapped: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    twice: list[str] = field(default_factory=list)
    busy_posts: list[str] = field(default_factory=list)
    approval_failures: list[str] = field(default_factory=list)
    verify_rc: int = -1
    verify_out: str = ""

    @property
    def failovers(self) -> list[float]:
        return [k.failover_s for k in self.kills]

    def problems(self) -> list[str]:
        out = [f"slot {s} ran twice: runs {self.slots[s]}" for s in self.twice]
        out += [f"slot {s} has no run (outside any failover gap)" for s in self.missed]
        out += [f"busy warning posted: {t}" for t in self.busy_posts]
        out += self.approval_failures
        out += [f"failover after killing {k.replica} took {k.failover_s:.1f}s (> {FAILOVER_MAX_S:g}s)"
                for k in self.kills if not 0 <= k.failover_s <= FAILOVER_MAX_S]
        if self.verify_rc != 0:
            out.append(f"eagle audit verify exited {self.verify_rc}: {self.verify_out.strip()[-500:]}")
        return out

    def summary(self) -> str:
        f = sorted(self.failovers)
        lines = [f"slots: {len(self.slots)} with one run, {len(self.coalesced)} coalesced into a failover's "
                 f"catch-up run, {len(self.overlapped)} skipped while that catch-up run still ran, "
                 f"{len(self.missed)} missed, {len(self.twice)} twice",
                 f"kills: {len(self.kills)} ({', '.join(k.during for k in self.kills)})",
                 f"approvals: {sum(1 for a in self.approvals if a.clicked_on)} clicked on the other replica, "
                 f"{sum(1 for a in self.approvals if not a.clicked_on)} left waiting at a kill",
                 f"audit verify: exit {self.verify_rc}"]
        if f:
            lines.append(f"failover s: min {f[0]:.1f}, median {statistics.median(f):.1f}, max {f[-1]:.1f}; "
                         f"all: {', '.join(f'{x:.1f}' for x in self.failovers)}")
        return "\n".join(lines)


class Soak:
    def __init__(self, work: Path, store_url: str | None, every: str | None, cron: str | None,
                 run_s: float, rng: random.Random):
        self.work, self.rng = work, rng
        self.fake = FakeSlackAPI()
        self.replicas = [Replica("A", free_port()), Replica("B", free_port())]
        self.cfg_path = work / "eagle.yaml"
        self.store_url = store_url or str(work / "eagle.db")
        self.every, self.cron, self.run_s = every, cron, run_s
        self.report = Report()
        self.n = 0
        self.services: Services | None = None
        self.sim_state = work / "sim-state"
        self.foreign: subprocess.Popen[bytes] | None = None   # the GPU holder of the approval left waiting

    # -- setup ------------------------------------------------------------------------------
    def write_config(self) -> None:
        sim = install_sim_bin(self.work / "sim-bin", self.sim_state)
        gpu_state.init_state(self.sim_state, 1)
        pdir = self.work / "playbooks"
        pdir.mkdir(exist_ok=True)
        for name, pb in {"tick": TICK, "guarded": PLAYBOOKS["guarded"]}.items():
            (pdir / f"{name}.yaml").write_text(yaml.safe_dump(pb, sort_keys=False))
        when: dict[str, Any] = {"every": self.every} if self.every else {"cron": self.cron}
        interval = self.interval_s()
        self.cfg_path.write_text(yaml.safe_dump({
            "audit_db": self.store_url, "playbooks_dir": str(pdir),
            "slack": {"channel": CHANNEL, "progress_interval_s": 1.0},
            "access": {"operators": ["UALICE"], "approvers": ["UBOSS"], "viewers": ["*"],
                       "approval_timeout_s": 300},
            # `sim` runs the schedule; approvals are asked on `sim2`, so they never find it busy.
            "hosts": {h: {"transport": "local", "vars": {"nvidia_smi": sim["nvidia_smi"]}} for h in ("sim", "sim2")},
            "schedules": [{"name": SCHEDULE, "playbook": "tick", "hosts": ["sim"], "channel": CHANNEL,
                           "inputs": {"seconds": self.run_s}, "misfire_grace_s": int(max(30, 2 * interval)),
                           **when}],
        }))

    def sched_cfg(self) -> ScheduleConfig:
        return load_settings(self.cfg_path).schedules[0]

    def interval_s(self) -> float:
        cfg = ScheduleConfig(name="x", playbook="x", every=self.every, cron=self.cron)
        t0 = datetime(2030, 1, 1, tzinfo=timezone.utc)
        a, b = fires_between(trigger_for(cfg), t0, t0 + timedelta(hours=2), cap=2)
        return (b - a).total_seconds()

    def start(self, r: Replica) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
        env.update(SLACK_BOT_TOKEN=TOKEN, SLACK_SIGNING_SECRET=SECRET, SLACK_API_URL=self.fake.base_url)
        r.starts += 1
        log = open(self.work / f"replica-{r.name}-{r.starts}.log", "wb")
        r.proc = subprocess.Popen([sys.executable, "-m", "eaglebot", "serve", "--config", str(self.cfg_path),
                                   "--http", str(r.port)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)

    async def wait_serving(self, r: Replica, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", r.port), timeout=0.2).close()
                return
            except OSError:
                assert r.proc is not None and r.proc.poll() is None, f"replica {r.name} exited"
                assert time.monotonic() < deadline, f"replica {r.name} did not start"
                await asyncio.sleep(0.1)

    @property
    def store(self) -> Any:
        assert self.services is not None
        return self.services.store

    # -- reading the store ------------------------------------------------------------------
    async def leader(self) -> tuple[str, Replica] | None:
        lease = await self.store.call(lambda s: s.lease_holder(LEADER))
        if lease is None or (parse_iso(lease["expires_at"]) or datetime.min.replace(tzinfo=timezone.utc)) \
                <= datetime.now(timezone.utc):
            return None
        pid = int(lease["holder"].split(":")[1])
        for r in self.replicas:
            if r.proc is not None and r.proc.pid == pid and r.proc.poll() is None:
                return lease["holder"], r
        return None

    async def wait_leader(self, timeout: float = 30) -> tuple[str, Replica]:
        deadline = time.monotonic() + timeout
        while (got := await self.leader()) is None:
            assert time.monotonic() < deadline, "no replica became the leader"
            await asyncio.sleep(0.1)
        return got

    # -- Slack ------------------------------------------------------------------------------
    async def post(self, r: Replica, body: str) -> int:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"http://127.0.0.1:{r.port}/slack/events", data=body.encode(),
                              headers=signed_headers(body)) as resp:
                return resp.status

    async def command(self, r: Replica, text: str) -> None:
        self.n += 1
        assert await self.post(r, command_body(text, response_url=self.fake.response_url(f"c{self.n}"))) == 200

    async def click(self, r: Replica, value: str) -> None:
        self.n += 1
        body = action_body(APPROVE_ACTION, value, user="UBOSS", response_url=self.fake.response_url(f"c{self.n}"))
        assert await self.post(r, body) == 200

    def button_value(self, approval_id: int) -> str | None:
        for c in self.fake.ok_calls_to("chat.postMessage"):
            for b in c.blocks():
                if b.get("type") == "actions":
                    v = str(b["elements"][0]["value"])
                    if v.endswith(f".{approval_id}"):
                        return v
        return None

    async def pending_approval(self, known: set[int], timeout: float = 30) -> tuple[int, int]:
        """A new run waiting for approval: (run id, approval id), once its card is posted."""
        deadline = time.monotonic() + timeout
        while True:
            for run in await self.store.call(lambda s: s.running_runs()):
                if run["playbook"] == "guarded" and run["id"] not in known:
                    row = await self.store.call(lambda s: s.pending_approval(run["id"], 0, "sim2"))
                    if row is not None and self.button_value(row["id"]):
                        return run["id"], row["id"]
            assert time.monotonic() < deadline, "no approval was asked for"
            await asyncio.sleep(0.1)

    async def approval_across(self, start_on: Replica, click_on: Replica) -> None:
        """A run that needs approval started on one replica, approved on the other."""
        holder = start_foreign_gpu_holder(self.sim_state)
        known = {a.run_id for a in self.report.approvals}
        await self.command(start_on, "guarded sim2")
        run_id, aid = await self.pending_approval(known)
        value = self.button_value(aid)
        assert value is not None
        await self.click(click_on, value)
        self.report.approvals.append(Approval(run_id, start_on.name, click_on.name, aid))
        deadline = time.monotonic() + 60
        while (run := await self.store.call(lambda s: s.get_run(run_id)))["status"] == "running" and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        row = await self.store.call(lambda s: s.get_approval(aid))
        if run["status"] != "succeeded" or row is None or row["status"] != "approved" or row["decided_by"] != "UBOSS":
            self.report.approval_failures.append(
                f"run #{run_id} started on {start_on.name}, approved on {click_on.name}: run {run['status']}, "
                f"approval {row and row['status']} by {row and row['decided_by']}")
        holder.kill()
        holder.wait()

    # -- kills ------------------------------------------------------------------------------
    async def kill_leader(self, during: str) -> None:
        holder, victim = await self.wait_leader()
        if during == "scheduled run":   # wait until the leader runs a scheduled run, then kill
            deadline = time.monotonic() + 3 * self.interval_s() + 30
            while not any(r["origin"] == "schedule" and r["pid"] == victim.proc.pid  # type: ignore[union-attr]
                          for r in await self.store.call(lambda s: s.running_runs())):
                assert time.monotonic() < deadline, "no scheduled run started on the leader"
                await asyncio.sleep(0.05)
            await asyncio.sleep(self.rng.uniform(0, self.run_s / 2))
        left_waiting = None
        if during == "approval":
            self.foreign = start_foreign_gpu_holder(self.sim_state)
            known = {a.run_id for a in self.report.approvals}
            await self.command(victim, "guarded sim2")
            run_id, aid = await self.pending_approval(known)
            left_waiting = Approval(run_id, victim.name, None, aid)
            self.report.approvals.append(left_waiting)
        assert victim.proc is not None
        kill = Kill(time.time(), victim.name, holder, during)
        os.killpg(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait()
        self.report.kills.append(kill)
        deadline = time.monotonic() + 60
        while True:
            lease = await self.store.call(lambda s: s.lease_holder(LEADER))
            if lease is not None and lease["holder"] != holder:
                taken = parse_iso(lease["acquired_at"])
                assert taken is not None
                kill.new_holder, kill.taken_at = lease["holder"], taken.timestamp()
                kill.failover_s = kill.taken_at - kill.at
                break
            assert time.monotonic() < deadline, "nobody took over the lease"
            await asyncio.sleep(0.05)
        print(f"  killed {victim.name} ({during}): {kill.new_holder} leads after {kill.failover_s:.1f}s", flush=True)
        self.start(victim)
        await self.wait_serving(victim)
        if left_waiting is not None:
            await self.check_expired(left_waiting)

    async def check_expired(self, a: Approval) -> None:
        """The approval its dead replica waited on: expired by the new leader's sweep, nothing killed."""
        deadline = time.monotonic() + 30
        while (row := await self.store.call(lambda s: s.get_approval(a.approval_id)))["status"] == "pending":
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        run = await self.store.call(lambda s: s.get_run(a.run_id))
        assert self.foreign is not None
        alive = self.foreign.poll() is None
        if row["status"] != "expired" or run["status"] != "interrupted" or not alive:
            self.report.approval_failures.append(
                f"approval #{a.approval_id} left waiting by killed replica {a.started_on}: {row['status']}, "
                f"run {run['status']}, foreign process {'alive' if alive else 'KILLED'}")
        self.foreign.kill()
        self.foreign.wait()

    # -- the soak ---------------------------------------------------------------------------
    async def run(self, duration_s: float, kills: int) -> Report:
        await self.fake.start()
        self.write_config()
        for r in self.replicas:
            self.start(r)
        try:
            for r in self.replicas:
                await self.wait_serving(r)
            self.services = await Services.open(load_settings(self.cfg_path))
            t_start = time.time()
            await self.wait_leader()
            kinds = ["scheduled run", "approval"] + ["random"] * max(0, kills - 2)
            kinds = kinds[:kills]
            # Kill moments spread over the soak (the last well before its end), each at a random
            # point of its share of the time.
            share = (duration_s - 15) / max(1, kills)
            for i, kind in enumerate(kinds):
                a, b = self.replicas if i % 2 == 0 else self.replicas[::-1]
                await self.approval_across(a, b)
                due = t_start + share * i + self.rng.uniform(0, share * 0.5)
                await asyncio.sleep(max(0.0, due - time.time()))
                await self.kill_leader(kind)
            await self.approval_across(self.replicas[1], self.replicas[0])
            await asyncio.sleep(max(0.0, t_start + duration_s - time.time()))
            t_end = time.time()
            await self.stop_all()
            fires = await self.store.call(lambda s: s.schedule_fires(SCHEDULE, "", 100000))
            runs = await self.store.call(lambda s: s.history(origin="schedule", limit=100000))
            self.check_slots(list(fires), list(runs), t_start, t_end)
            self.report.busy_posts = [c.all_text()[:200] for c in self.fake.ok_calls_to("chat.postMessage")
                                      if "did not start" in c.all_text() and "busy" in c.all_text()]
            await self.verify()
        finally:
            await self.stop_all()
            if self.services is not None:
                await self.services.close()
            await self.fake.stop()
        return self.report

    async def stop_all(self) -> None:
        for r in self.replicas:
            if r.proc is not None and r.proc.poll() is None:
                r.proc.send_signal(signal.SIGTERM)
        for r in self.replicas:
            if r.proc is not None:
                try:
                    await asyncio.to_thread(r.proc.wait, 90)
                except subprocess.TimeoutExpired:
                    os.killpg(r.proc.pid, signal.SIGKILL)
                    r.proc.wait()

    def check_slots(self, fires: list[dict[str, Any]], runs: list[dict[str, Any]],
                         t_start: float, t_end: float) -> None:
        trig = trigger_for(self.sched_cfg())
        start = datetime.fromtimestamp(t_start, timezone.utc)
        end = datetime.fromtimestamp(t_end - self.run_s - 5, timezone.utc)   # the last slots may still run
        expected = fires_between(trig, start, end, cap=100000)
        claimed: dict[str, list[int]] = {}
        for f in fires:
            if f["status"] in ("missed", "registered", "alarm", "paused"):
                continue
            claimed.setdefault(f["fire_time"], [])
            if f["run_id"] is not None:
                claimed[f["fire_time"]].append(f["run_id"])
        mapped = {rid for ids in claimed.values() for rid in ids}
        for run in runs:   # a run whose fire row did not learn its id (killed in between)
            if run["id"] not in mapped:
                before = [s for s in claimed if s <= (run["started_at"] or "")]
                if before:
                    claimed[max(before)].append(run["id"])
        gaps = [(k.at, k.taken_at) for k in self.report.kills]
        for t in expected:
            key = t.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
            ids = claimed.get(key, [])
            if len(ids) > 1 or sum(1 for f in fires if f["fire_time"] == key and f["status"] not in
                                   ("missed", "registered", "alarm", "paused")) > 1:
                self.report.twice.append(key)
            if ids:
                self.report.slots[key] = ids
            elif any(a - 1 <= t.timestamp() <= b + 1 for a, b in gaps):
                self.report.coalesced.append(key)
            elif any(b <= t.timestamp() <= b + self.run_s + 2 for _, b in gaps):
                # APScheduler's max_instances=1: the new leader's late catch-up run of the slot
                # before was still going at this fire time (the host is that run's, too)
                self.report.overlapped.append(key)
            else:
                self.report.missed.append(key)
        for a, b in gaps:   # the misfire rules: the latest fire of a gap is run late by the new leader
            in_gap = [t for t in expected if a - 1 <= t.timestamp() <= b]
            key = in_gap[-1].isoformat(timespec="seconds").replace("+00:00", "Z") if in_gap else None
            if key is not None and key not in self.report.slots:
                self.report.missed.append(key)

    async def verify(self) -> None:
        res = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "eaglebot", "audit", "verify",
                                                       "--config", str(self.cfg_path)],
                                      capture_output=True, text=True, timeout=120)
        self.report.verify_rc, self.report.verify_out = res.returncode, res.stdout + res.stderr


async def soak(work: Path, *, duration_s: float, kills: int, every: str | None = None, cron: str | None = None,
               store_url: str | None = None, run_s: float = 2.0, seed: int | None = None) -> Report:
    """The soak's core: two replicas, `kills` leader kills over `duration_s`; the report."""
    s = Soak(work, store_url, every, cron, run_s, random.Random(seed))
    return await s.run(duration_s, kills)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--cron", default=None, help='the schedule\'s cron (default "* * * * *")')
    g.add_argument("--every", default=None, help="the schedule's interval instead, e.g. 5s")
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--run-s", type=float, default=None, help="how long each scheduled run takes")
    p.add_argument("--store", default=None, help="audit_db: an SQLite path (default: a new file) or postgresql://...")
    p.add_argument("--pg", action="store_true", help="start a throwaway PostgreSQL (tests/support/pg.py) and use it")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep", default=None, help="work folder to keep (logs of each replica), default a temp one")
    a = p.parse_args()
    cron = a.cron or (None if a.every else "* * * * *")
    run_s = a.run_s if a.run_s is not None else (2.0 if a.every else 15.0)
    server = None
    if a.pg:
        from support.pg import start_pg

        server = start_pg()
        with server.admin() as c:
            c.execute('create database "soak"')
        a.store = server.url("soak")
    try:
        with tempfile.TemporaryDirectory(prefix="eagle-soak-") as tmp:
            work = Path(a.keep or tmp)
            work.mkdir(parents=True, exist_ok=True)
            print(f"store: {a.store or work / 'eagle.db'}", flush=True)
            report = asyncio.run(soak(work, duration_s=a.duration, kills=a.kills, every=a.every, cron=cron,
                                      store_url=a.store, run_s=run_s, seed=a.seed))
    finally:
        if server is not None:
            server.stop()
    print(report.summary())
    print(json.dumps({"failover_s": report.failovers, "problems": report.problems()}, indent=2))
    return 1 if report.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
