"""The fleet health watch on the SIMULATED nvidia-smi over the real loopback sshd: several
hosts, each with its own simulated GPUs and kernel log; probes, the Xid policy, quarantine
with the circuit breaker, clearing after clean probes, the refused relaunch, a hung probe."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.gpu_helpers import PY, playbook
from support.helpers import write_playbook, write_yaml
from support.inproc import eagle_here

from eaglebot.config import HealthWatchConfig
from eaglebot.engine.health_watch import HealthWatch, HostReport
from eaglebot.engine.runner import RunRequest
from eaglebot.errors import UsageError
from eaglebot.facts.gpu import health as hf
from eaglebot.engine import fleet_health as fh
from eaglebot.sim import gpu_state, install_sim_bin

# Kernel log lines in the real format (REFERENCE.md's Xid table; PCI of the sim's GPU 0 / GPU 1).
XID79 = "[ 8123.456789] NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python, GPU has fallen off the bus."


def xid13(ts: float, pci: str = "0000:00:06") -> str:
    return (f"[{ts:12.6f}] NVRM: Xid (PCI:{pci}): 13, pid=2211, name=python, Graphics Exception: "
            f"ESR 0x404490=0x80000001")


def fleet(remote_dir: Path, n: int, sshd, gpus: int = 2) -> tuple[dict, dict[str, Path]]:
    """n hosts on the one sshd, each with its own simulated GPUs (host config, state dir by host)."""
    hosts, states = {}, {}
    for i in range(1, n + 1):
        name = f"gpu-{i:02d}"
        state = remote_dir / name / "state"
        sim = install_sim_bin(remote_dir / name / "bin", state, python=PY)
        gpu_state.init_state(state, gpus)
        hosts[name] = sshd.host_config(vars={"nvidia_smi": sim["nvidia_smi"], "dmesg": sim["dmesg"]})
        states[name] = state
    return hosts, states


def watch_cfg(**kw) -> dict:
    return {"hosts": ["all"], "interval_s": 60, "probe_timeout_s": 10, "clear_after": 3,
            "max_quarantined_pct": 25, **kw}


async def open_watch(services, hosts: dict, **kw) -> tuple[object, HealthWatch, list[HostReport]]:
    svc = await services(hosts, health_watch=watch_cfg(**kw))
    alerts: list[HostReport] = []

    async def notify(r: HostReport) -> None:
        alerts.append(r)
    w = HealthWatch(svc.settings, svc.store, svc.pool, svc.settings.health_watch, notify=notify)
    return svc, w, alerts


def states(rows: list[dict]) -> dict[tuple[str, int], str]:
    return {(r["host"], r["gpu"]): r["state"] for r in rows}


RELAUNCH = """
name: relaunch
steps:
  - skill: shell
    with: {command: "echo relaunched"}
"""


# -- pure parts --------------------------------------------------------------------------------

def test_the_xid_policy_defaults_follow_the_catalogue_and_the_file_overrides_them():
    pol = HealthWatchConfig(xid={"13": {"severity": "fail"}, "43": {"severity": "warn", "fail_after": 2}}).xid_policy()
    assert pol[79].severity == "fail" and pol[13].severity == "fail" and pol[43].fail_after == 2
    assert HealthWatchConfig().xid_policy()[13].fail_after == 5
    with pytest.raises(ValueError):
        HealthWatchConfig(xid={"x13": {"severity": "fail"}})


def test_each_xid_is_reported_once_and_a_reboot_starts_the_cursor_over():
    log = hf.parse_xids("\n".join([xid13(100.0), XID79]))
    new, cur = hf.xids_since(log, None)
    assert [x.code for x in new] == [13, 79] and cur == 8123.456789
    assert hf.xids_since(log, cur) == ([], cur)
    after_reboot = hf.parse_xids(xid13(12.5))
    new, cur = hf.xids_since(after_reboot, 8123.456789)
    assert [x.ts for x in new] == [12.5] and cur == 12.5


def test_the_breaker_holds_back_a_quarantine_and_a_hung_probe_clears_nothing():
    assert fh.breaker_limit(16, 25) == 4 and fh.breaker_limit(3, 25) == 1 and fh.breaker_limit(3, 0) == 0
    fail = [fh.Finding(0, "fail", "Xid 79")]
    d = fh.decide([], fail, told=True, clear_after=3, may_quarantine=False)
    assert d.breaker and d.transitions[0].state == "suspect" and "circuit breaker" in d.transitions[0].reason
    rows = [fh.Row(0, "quarantined", 2)]
    assert fh.decide(rows, [fh.Finding(fh.HOST, "warn", "probe hung")], told=False, clear_after=3,
                     may_quarantine=True).clean == {}
    d = fh.decide(rows, [], told=True, clear_after=3, may_quarantine=True)
    assert [(t.gpu, t.state) for t in d.transitions] == [(0, "healthy")]
    resuming = [fh.Row(0, "resuming", 0)]              # back from a drain: on probation
    assert fh.decide(resuming, fail, told=True, clear_after=3, may_quarantine=False).transitions[0].state == "quarantined"
    assert fh.decide(resuming, [], told=True, clear_after=1, may_quarantine=True).transitions[0].state == "healthy"
    assert fh.decide([fh.Row(0, "drained", 5)], [], told=True, clear_after=1, may_quarantine=True).transitions == []


def test_a_repeated_xid_is_never_a_clean_probe_and_quarantines_a_gpu_on_probation():
    again = [fh.Finding(0, "fail", "Xid 79", again=True)]
    held = fh.decide([fh.Row(0, "quarantined", 1)], again, told=True, clear_after=2, may_quarantine=True)
    assert held.transitions == [] and held.clean == {0: 0}
    drained = fh.decide([fh.Row(0, "drained", 1, actor=fh.ACTOR)], again, told=True, clear_after=2, may_quarantine=True)
    assert not drained.resume and drained.clean == {0: 0}
    resuming = fh.decide([fh.Row(0, "resuming", 1)], again, told=True, clear_after=2, may_quarantine=True)
    assert [(t.gpu, t.state) for t in resuming.transitions] == [(0, "quarantined")]
    warn_again = [fh.Finding(0, "warn", "Xid 13", again=True)]
    assert fh.decide([fh.Row(0, "healthy", 0)], warn_again, told=True, clear_after=2, may_quarantine=True).transitions == []
    assert fh.decide([fh.Row(0, "suspect", 1)], warn_again, told=True, clear_after=2, may_quarantine=True).clean == {0: 0}


# -- the watch over sshd -----------------------------------------------------------------------

async def test_an_xid_79_quarantines_the_host_refuses_a_relaunch_and_clears_after_clean_probes(
        services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 4, sshd)
    svc, w, alerts = await open_watch(services, hosts)
    assert all(r.probe.status == "ok" and not r.transitions for r in await w.round())
    gpu_state.set_kernel_log(st["gpu-03"], gpu_state.KERNEL_LOG + [XID79])
    gpu_state.set_exit_code(st["gpu-03"], 15)            # off the bus: nvidia-smi fails as the real one does
    await w.round()
    held = await svc.store.call(lambda s: s.health_held("gpu-03"))
    assert held is not None and held["state"] == "quarantined" and "fallen off the bus" in held["reason"]
    assert [a.host for a in alerts] == ["gpu-03"]
    with pytest.raises(UsageError, match="gpu-03 is quarantined"):
        await svc.engine.run(RunRequest(playbook(RELAUNCH, "relaunch"), hosts=["gpu-03"], actor="alice"))
    assert "quarantined" in (await svc.store.call(lambda s: s.events("rejected")))[0]["reason"]
    gpu_state.set_exit_code(st["gpu-03"], None)
    for _ in range(2):
        await w.round()
        assert await svc.store.call(lambda s: s.health_held("gpu-03")) is not None
    await w.round()                                       # the third clean probe clears it
    assert await svc.store.call(lambda s: s.health_held("gpu-03")) is None
    assert set(states(await svc.store.call(lambda s: s.health_states("gpu-03"))).values()) == {"healthy"}
    out = await svc.engine.run(RunRequest(playbook(RELAUNCH, "relaunch"), hosts=["gpu-03"], actor="alice"))
    assert out.status == "succeeded"
    events = await svc.store.call(lambda s: s.health_events("gpu-03"))
    assert [(e["from_state"], e["to_state"], e["actor"]) for e in events if e["kind"] == "transition"] == [
        ("quarantined", "healthy", "health-watch"), ("healthy", "quarantined", "health-watch")]
    assert "3 clean probes" in events[0]["reason"]
    assert [e["code"] for e in events if e["kind"] == "xid"] == [79]     # read once, not per probe


async def test_faults_on_6_of_16_hosts_quarantine_4_and_alert_all_6(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 16, sshd, gpus=1)
    svc, w, alerts = await open_watch(services, hosts)
    bad = [f"gpu-{i:02d}" for i in (2, 5, 7, 9, 12, 16)]
    for h in bad:
        gpu_state.set_exit_code(st[h], 15)
    await w.round()
    rows = await svc.store.call(lambda s: s.health_states())
    quarantined = sorted({r["host"] for r in rows if r["state"] == "quarantined"})
    suspect = sorted({r["host"] for r in rows if r["state"] == "suspect"})
    assert len(quarantined) == 4 and len(suspect) == 2 and sorted(quarantined + suspect) == bad
    assert sorted(a.host for a in alerts) == bad
    assert sum(a.breaker for a in alerts) == 2


async def test_xid_13_five_times_within_the_window_turns_warn_into_fail(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 1, sshd)
    svc, w, _ = await open_watch(services, hosts, xid={"13": {"severity": "warn", "fail_after": 5, "window_s": 3600}})
    t = gpu_state.uptime_s() - 60                 # a minute ago: the window counts by the Xids' own time
    gpu_state.set_kernel_log(st["gpu-01"], [xid13(t + i) for i in range(4)])
    await w.round()
    assert states(await svc.store.call(lambda s: s.health_states("gpu-01"))) == {("gpu-01", 0): "suspect"}
    gpu_state.set_kernel_log(st["gpu-01"], [xid13(t + i) for i in range(5)])
    [r] = await w.round()
    assert [(g, to) for g, _, to, _ in r.transitions] == [(0, "quarantined")]
    assert "5 times within 3600s" in r.transitions[0][3]


async def test_a_hung_nvidia_smi_is_probe_hung_while_the_others_keep_their_interval(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 3, sshd, gpus=1)
    # Events, not a time window (a busy machine slows the others' probes, never the hung one's
    # timeout): while gpu-02's first probe hangs (up to its 20 s timeout), the others finish three
    # each; then the hung probe ends as a finding.
    svc, w, alerts = await open_watch(services, hosts, interval_s=0.5, probe_timeout_s=20.0)
    gpu_state.set_hang(st["gpu-02"], 120)
    probes: dict[str, int] = {}
    at_three: dict[str, int] = {}
    real = w.probe_once
    others, hung = asyncio.Event(), asyncio.Event()

    async def counted(host: str) -> HostReport:
        r = await real(host)
        probes[host] = probes.get(host, 0) + 1
        if not others.is_set() and min(probes.get("gpu-01", 0), probes.get("gpu-03", 0)) >= 3:
            at_three.update(probes)
            others.set()
        if host == "gpu-02":
            gpu_state.set_hang(st["gpu-02"], None)       # its next probe answers: the stop need not wait 20 s
            hung.set()
        return r
    w.probe_once = counted  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    await asyncio.wait_for(others.wait(), 300)
    await asyncio.wait_for(hung.wait(), 300)
    stop.set()
    await asyncio.wait_for(task, 60)
    assert at_three.get("gpu-02", 0) == 0, at_three          # the others kept their interval meanwhile
    row = (await svc.store.call(lambda s: s.health_states("gpu-02")))[0]
    assert row["state"] == "suspect" and row["reason"].startswith("probe hung")
    assert [a.host for a in alerts] == ["gpu-02"]


def test_eagle_fleet_shows_the_quarantine_and_a_cli_relaunch_exits_2_unless_forced(tmp_path, sshd, remote_dir):
    """Through the real CLI: the watch's state from the store, exit 2 with the reason, --force audited."""
    from eaglebot.config import load_settings
    from eaglebot.store import Store

    hosts, st = fleet(remote_dir, 2, sshd, gpus=1)
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": str(tmp_path / "eagle.db"), "hosts": hosts,
                                               "health_watch": watch_cfg()})
    store = Store(tmp_path / "eagle.db")
    store.health_transition("gpu-02", -1, "quarantined", "Xid 79 (GPU has fallen off the bus)", "health-watch")
    store.close()
    res = eagle_here("fleet", "--json", config=cfg)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [(h["host"], h["state"]) for h in doc["hosts"]] == [("gpu-02", "quarantined"), ("gpu-01", "healthy")]
    assert "quarantined" in eagle_here("fleet", config=cfg).stdout
    chat = eagle_here("chat", "fleet", config=cfg)                 # what `/eagle fleet` answers in Slack
    assert chat.returncode == 0 and "gpu-02" in chat.stdout and "quarantined" in chat.stdout, chat.stderr
    book = write_playbook(tmp_path, "relaunch", RELAUNCH)
    res = eagle_here("run", str(book), "-H", "gpu-02", config=cfg)
    assert res.returncode == 2 and "gpu-02 is quarantined" in res.stderr and "--force" in res.stderr
    res = eagle_here("run", str(book), "-H", "gpu-02", "--force", config=cfg)
    assert res.returncode == 0, res.stderr
    store = Store(tmp_path / "eagle.db")
    assert "with --force: gpu-02 is quarantined" in store.events("forced")[0]["message"]
    store.close()
    assert load_settings(cfg).health_watch is not None


async def test_one_slack_message_per_incident_is_updated_in_place_until_resolved(services, sshd, remote_dir, fake):
    from eaglebot.frontends.slack.client import make_client
    from eaglebot.frontends.slack.health_alerts import post_health_alert

    hosts, st = fleet(remote_dir, 2, sshd)
    svc = await services(hosts, health_watch=watch_cfg(clear_after=2, channel="CHEALTH"),
                         slack={"api_url": fake.base_url})
    client = make_client(svc.settings, "xoxb-test", backoff_s=0.01)

    async def notify(r: HostReport) -> None:
        await post_health_alert(client, svc.store, "CHEALTH", r)
    w = HealthWatch(svc.settings, svc.store, svc.pool, svc.settings.health_watch, notify=notify)
    gpu_state.set_kernel_log(st["gpu-02"], [xid13(50.0, "0000:00:07")])        # GPU 1: warn, suspect
    await w.round()
    gpu_state.set_kernel_log(st["gpu-02"], [xid13(50.0, "0000:00:07"),
                                            XID79.replace("00:06", "00:07")])  # then 79: quarantined
    await w.round()
    await w.round()
    posts, updates = fake.ok_calls_to("chat.postMessage"), fake.ok_calls_to("chat.update")
    assert len(posts) == 1 and posts[0].args["channel"] == "CHEALTH"
    assert "gpu-02 GPU 1 is suspect" in posts[0].args["text"]
    assert len(updates) == 1 and "is quarantined: Xid 79" in updates[0].args["text"]
    assert updates[0].args["ts"] == (await svc.store.call(lambda s: s.health_states("gpu-02")))[0]["message_ts"]
    await w.round()                                                          # second clean probe
    updates = fake.ok_calls_to("chat.update")
    assert len(fake.ok_calls_to("chat.postMessage")) == 1 and len(updates) == 2
    assert "resolved: gpu-02 GPU 1 is healthy again" in updates[-1].args["text"]
    assert (await svc.store.call(lambda s: s.health_states("gpu-02")))[0]["message_ts"] is None


def test_slash_force_is_parsed_and_only_approvers_may_pass_it():
    from eaglebot.config import AccessConfig
    from eaglebot.frontends.chat.access import authorize
    from eaglebot.frontends.chat.grammar import parse

    cmd = parse("relaunch gpu-03 --force")
    assert (cmd.name, cmd.hosts, cmd.force) == ("run", ("gpu-03",), True)
    assert not parse("relaunch gpu-03").force and parse("fleet").name == "fleet"
    access = AccessConfig(operators=["UOPS", "UBOSS"], approvers=["UBOSS"])
    assert "only approvers can run on a quarantined host" in (authorize(access, cmd, "UOPS") or "")
    assert authorize(access, cmd, "UBOSS") is None and authorize(access, parse("relaunch gpu-03"), "UOPS") is None


async def test_eagle_serve_runs_the_watch_posts_an_xid_79_and_resolves_it(tmp_path, sshd, remote_dir, fake):
    """The real `eagle serve` process: the watch it runs alerts in the fake Slack, then resolves in place."""
    from test_serve import start_serve, stop, wait_serving
    from support.sshd import free_port
    from support.slack_harness import SECRET

    hosts, st = fleet(remote_dir, 3, sshd, gpus=1)
    interval = 1.5
    cfg = write_yaml(tmp_path / "eagle.yaml", {
        "audit_db": str(tmp_path / "eagle.db"), "hosts": hosts, "slack": {"channel": "C0123"},
        "health_watch": watch_cfg(interval_s=interval, probe_timeout_s=5, clear_after=2, channel="CHEALTH")})
    port = free_port()
    proc = await start_serve(cfg, fake, "--http", str(port), SLACK_SIGNING_SECRET=SECRET)
    try:
        await wait_serving(port, proc)
        await asyncio.sleep(interval)                       # a clean round first
        assert not fake.ok_calls_to("chat.postMessage")
        # (a bus id no GPU of the host has: whenever a probe reads the line, it is the host's)
        gpu_state.set_kernel_log(st["gpu-02"], gpu_state.KERNEL_LOG + [XID79.replace("00:06", "00:0a")])
        gpu_state.set_exit_code(st["gpu-02"], 15)
        # the alert comes from the watch's own rounds (no wall-time bound: the suite runs on busy machines;
        # the alert's latency is docs/benchmarks.md's)
        [post] = await fake.wait_for(lambda: fake.ok_calls_to("chat.postMessage"), timeout=120)
        assert post.args["channel"] == "CHEALTH" and "gpu-02 (the host) is quarantined" in post.args["text"]
        gpu_state.set_exit_code(st["gpu-02"], None)
        [upd] = await fake.wait_for(lambda: fake.ok_calls_to("chat.update"), timeout=120)
        assert "resolved: gpu-02" in upd.args["text"] and len(fake.ok_calls_to("chat.postMessage")) == 1
    finally:
        rc, err = await stop(proc)
    assert rc == 0, err


async def test_more_than_10_incidents_at_once_are_one_summary_message(services, sshd, remote_dir, fake):
    from eaglebot.frontends.slack.client import make_client
    from eaglebot.frontends.slack.health_alerts import HealthAlerts

    hosts, st = fleet(remote_dir, 14, sshd, gpus=1)
    svc = await services(hosts, health_watch=watch_cfg(max_quarantined_pct=100), slack={"api_url": fake.base_url})
    # the window gathers what one round finds: wide enough that a loaded machine's 14 probes land in it
    alerts = HealthAlerts(make_client(svc.settings, "xoxb-test", backoff_s=0.01), svc.store, "CHEALTH", 60,
                          window_s=2.0)
    w = HealthWatch(svc.settings, svc.store, svc.pool, svc.settings.health_watch, notify=alerts.notify)
    for h in st:
        gpu_state.set_exit_code(st[h], 15)
    await w.round()
    # the summary is the last post (after its window): wait for it, not for a time
    await fake.wait_for(lambda: [p for p in fake.ok_calls_to("chat.postMessage")
                                 if "more incidents opened at once" in p.args["text"]])
    posts = fake.ok_calls_to("chat.postMessage")
    assert len(posts) == 11                                   # 10 incidents alone, then one summary of 4
    summary = [p for p in posts if "more incidents opened at once" in p.args["text"]]
    assert len(summary) == 1 and summary[0].args["text"].count("• gpu-") == 4
    await alerts.aclose()


def test_an_unknown_host_in_health_watch_is_a_config_error_with_its_line(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": str(tmp_path / "eagle.db"),
                                               "hosts": {"gpu-01": {"address": "10.0.0.1"}},
                                               "health_watch": {"hosts": ["gpu-09"]}})
    res = eagle_here("fleet", config=cfg)
    assert res.returncode == 2 and "health_watch.hosts: unknown host 'gpu-09'" in res.stderr, res.stderr


def test_the_recovery_action_of_the_real_capture_parses_and_only_none_is_healthy():
    fixtures = Path(__file__).parent / "fixtures" / "nvidia-smi" / "health"
    rows = hf.parse_health((fixtures / "h200-query-recovery-action.csv.txt").read_text())
    assert rows[0]["gpu_recovery_action"] == "None"
    rows = hf.parse_health((fixtures / "h200-query-recovery-action-nounits.csv.txt").read_text(),
                           ["index", "gpu_recovery_action"])
    assert hf.evaluate(rows[0], hf.Thresholds()).verdict == "ok"
    v = hf.evaluate({"index": 0, "gpu_recovery_action": "Reset"}, hf.Thresholds())
    assert (v.verdict, v.reasons) == ("fail", ["driver recovery action: Reset"])
    assert hf.parse_health("0, [N/A]\n", ["index", "gpu_recovery_action"])[0]["gpu_recovery_action"] is None


async def test_a_gpu_held_for_the_drivers_recovery_action_is_cleared_when_it_reads_none(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 1, sshd)
    svc, w, _ = await open_watch(services, hosts, clear_after=5)
    gpu_state.set_health(st["gpu-01"], 1, recovery_action="Reset")
    await w.round()
    [row] = await svc.store.call(lambda s: s.health_states("gpu-01"))
    assert (row["gpu"], row["state"], row["reason"]) == (1, "quarantined", "driver recovery action: Reset")
    gpu_state.set_health(st["gpu-01"], 1)                    # reset done: the driver reads None again
    [r] = await w.round()
    assert r.transitions == [(1, "quarantined", "healthy", "the driver's recovery action reads None")]


async def test_an_older_driver_without_the_recovery_field_is_probed_without_it(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 1, sshd)
    svc, w, _ = await open_watch(services, hosts)
    gpu_state.set_unknown_fields(st["gpu-01"], ["gpu_recovery_action"])
    [r] = await w.round()
    assert r.probe.status == "ok" and r.probe.findings == [] and r.probe.recovered == frozenset()


async def test_a_probe_that_raises_does_not_stop_the_watch_of_the_other_hosts(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 2, sshd, gpus=1)
    svc, w, _ = await open_watch(services, hosts, interval_s=0.5)
    probes: dict[str, int] = {}
    real = w.probe_once
    enough = asyncio.Event()

    async def flaky(host: str) -> HostReport:
        probes[host] = probes.get(host, 0) + 1
        if min(probes.get("gpu-01", 0), probes.get("gpu-02", 0)) >= 3:
            enough.set()
        if host == "gpu-01":
            raise RuntimeError("surprise")
        return await real(host)
    w.probe_once = flaky  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    # wait for the event (both hosts probed three times), not for a time: a loaded machine is slow
    await asyncio.wait_for(enough.wait(), 120)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert probes["gpu-01"] >= 3 and probes["gpu-02"] >= 3, probes


async def test_an_accept_threshold_lowered_at_runtime_is_caught_by_the_next_probe(services, sshd, remote_dir, tmp_path):
    import urllib.request

    from test_sglang_sim import Sim, free_port, wait_status
    hosts, _ = fleet(remote_dir, 1, sshd)
    port = free_port()
    hosts["gpu-01"]["vars"]["port"] = port
    sim = Sim(tmp_path, "0.5.23")
    p = sim.spec_server(port, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                        "--speculative-num-draft-tokens", "4")
    try:
        wait_status(port, "/health", 200, p)
        svc, w, alerts = await open_watch(services, hosts)
        assert not (await w.round())[0].probe.findings            # a lossless server: nothing to say
        req = urllib.request.Request(f"http://127.0.0.1:{port}/set_internal_state", json.dumps(
            {"server_args": {"speculative_accept_threshold_single": 0.5}}).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read()) == [True]
        [report] = await w.round()
    finally:
        sim.stop_all()
    assert [a.host for a in alerts] == ["gpu-01"]
    assert report.transitions == [(fh.HOST, "healthy", "suspect", (
        f"the server on port {port} is not lossless: internal_states[0].speculative_accept_threshold_single=0.5, "
        f"changed at runtime (POST /set_internal_state; below 1: accepts drafts the target rejected); relaunch it "
        f"or set the threshold back to 1"))]


async def test_a_probe_beside_a_step_that_runs_a_playbooks_code_clears_nothing(services, sshd, remote_dir):
    """Issue 46, item 1c: a step's live child can write into what the watch reads (`/proc/PID/fd/1`),
    so a probe while another run's `shell` step runs on the host is never a clean one."""
    from eaglebot.store.rows import NewRun, StepEnd

    hosts, _ = fleet(remote_dir, 1, sshd, gpus=1)
    svc, w, _ = await open_watch(services, hosts, clear_after=1)
    store = svc.store.sync
    store.health_transition("gpu-01", 0, "quarantined", "Xid 79 (GPU has fallen off the bus)", "health-watch")
    rid = store.create_run(NewRun(playbook="t", hosts=["gpu-01"], inputs={}, variables={}, actor="me", origin="cli"))
    store.acquire_hosts(rid, ["gpu-01"])
    sid = store.step_started(rid, 0, "gpu-01", "holds", "shell", {})
    beside = await w.probe_once("gpu-01")
    assert beside.probe.status == "ok" and beside.transitions == []
    assert beside.probe.beside == f"step `holds` of run #{rid} (shell)"
    store.step_finished(sid, StepEnd(run_id=rid, host="gpu-01", status="ok", summary="", duration_ms=1, attempts=1))
    store.release_hosts(rid)
    clean = await w.probe_once("gpu-01")
    assert clean.probe.beside == "" and [(g, to) for g, _, to, _ in clean.transitions] == [(0, "healthy")]
