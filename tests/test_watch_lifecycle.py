"""Health that knows the bot's own hands (issue 33), over the real loopback sshd and the SIMULATED
GPU host, whose kernel log the cleanup itself writes to (a killed holder leaves Xid 45 lines, as
the real driver does): the lifecycle windows from the audit trail, application Xids in the bot's
own teardown `expected` (in `eagle fleet --json`), a second probe before any quarantine but the
fatal class, fail closed on a broken driver and not on `[N/A]`, one finding per (host, GPU, Xid,
boot), a recovery event ending it."""
from __future__ import annotations

import asyncio
import json
import time

import pytest
from support.gpu_helpers import Sleepers
from support.helpers import eagle, write_yaml
from test_health_watch import XID79, fleet, open_watch, watch_cfg, xid13

from eaglebot.engine import fleet_health as fh
from eaglebot.engine.health_watch import HealthWatch, findings_of
from eaglebot.engine.lifecycle import window_at, windows
from eaglebot.engine.runner import RunRequest
from eaglebot.facts.gpu import health as hf
from eaglebot.facts.gpu.health_probe import GpuHealthRead
from eaglebot.sim import gpu_state


def _step(run: int, skill: str, status: str, start: str, end: str | None, run_status: str = "succeeded",
          run_end: str | None = "2026-12-01T10:10:00.000Z") -> dict:
    return {"run_id": run, "skill": skill, "status": status, "started_at": f"2026-12-01T10:0{start}.000Z",
            "finished_at": f"2026-12-01T10:0{end}.000Z" if end else None, "run_status": run_status,
            "run_finished_at": run_end}


def _at(mmss: str) -> float:
    from eaglebot.store import parse_iso
    d = parse_iso(f"2026-12-01T10:0{mmss}.000Z")
    assert d is not None
    return d.timestamp()


# -- pure parts --------------------------------------------------------------------------------

def test_the_teardown_window_runs_from_the_kill_to_the_verify_plus_the_grace():
    steps = [_step(1, "server.launch", "changed", "0:00", "0:30"),
             _step(2, "server.stop", "changed", "2:00", "2:05"), _step(2, "gpu.cleanup", "changed", "2:05", "2:10"),
             _step(2, "gpu.verify", "ok", "2:10", "2:20"), _step(2, "server.launch", "changed", "3:00", "3:30")]
    ws = windows(steps, grace_s=30)
    kind = lambda t: window_at(ws, _at(t)).kind     # noqa: E731
    assert [kind(t) for t in ("0:10", "1:30", "2:01", "2:20", "2:49", "2:51", "3:10", "4:10")] == [
        "launch", "steady", "teardown", "teardown", "teardown", "idle", "launch", "steady"]
    assert window_at(ws, _at("2:15")).run_id == 2
    # a cleanup that found nothing to kill is no teardown; one still running is open-ended
    assert window_at(windows([_step(3, "gpu.cleanup", "ok", "5:00", "5:01")], 30), _at("5:02")).kind == "idle"
    running = windows([_step(4, "gpu.cleanup", "running", "6:00", None, run_status="running", run_end=None)], 30)
    assert window_at(running, _at("9:59")).kind == "teardown"


def test_a_fail_waits_for_a_second_probe_unless_its_class_acts_at_once():
    hot = [fh.Finding(1, "fail", "HW thermal slowdown", needs_second=True)]
    d = fh.decide([], hot, told=True, clear_after=3, may_quarantine=True)
    assert [(t.gpu, t.state) for t in d.transitions] == [(1, "suspect")] and d.pending == {1}
    assert fh.UNCONFIRMED in d.transitions[0].reason
    rows = [fh.Row(1, "suspect", 0)]
    d2 = fh.decide(rows, hot, told=True, clear_after=3, may_quarantine=True, pending=d.pending)
    assert [(t.state, t.reason) for t in d2.transitions] == [("quarantined", "HW thermal slowdown (a second probe agreed)")]
    d3 = fh.decide(rows, [], told=True, clear_after=3, may_quarantine=True, pending=d.pending)
    assert d3.transitions == [] and d3.pending == frozenset() and d3.clean == {1: 1}      # transient: dropped
    hung = fh.decide(rows, [fh.Finding(fh.HOST, "warn", "probe hung")], told=False, clear_after=3,
                     may_quarantine=True, pending=d.pending)
    assert hung.pending == {1}                                    # a probe that could not tell confirms nothing
    fatal = [fh.Finding(0, "fail", "Xid 79 (GPU has fallen off the bus)")]
    assert fh.decide([], fatal, told=True, clear_after=3, may_quarantine=True).transitions[0].state == "quarantined"


def test_err_and_unknown_error_are_findings_and_na_or_not_supported_are_not():
    fields = ["index", "pci.bus_id", "temperature.gpu", "power.draw", "retired_pages.pending", "gpu_recovery_action"]
    text = ("0, 00000000:00:06.0, ERR!, [Unknown Error], [N/A], None\n"
            "1, 00000000:00:07.0, 33, [Not Supported], [N/A], [N/A]\n"
            "garbage line\n"
            "2, 00000000:00:08.0, " + "9" * 5000 + ", 100.0, No, None\n")
    got = hf.read_health(text, fields)
    assert got.cannot_read()[0] == "cannot read GPU 0: temperature.gpu reads 'ERR!'; power.draw reads '[Unknown Error]'"
    assert 1 not in got.unreadable and got.rows[1]["power.draw"] is None and got.rows[1]["temperature.gpu"] == 33
    assert got.cannot_read()[2].startswith("cannot read GPU 2: temperature.gpu not a number")
    assert "no GPU index" in got.cannot_read()[None]
    found = findings_of("gpu-01", GpuHealthRead(rows=got))
    assert {(f.gpu, f.level, f.needs_second) for f in found} == {(0, "fail", True), (2, "fail", True),
                                                                 (fh.HOST, "fail", True)}
    assert findings_of("gpu-01", GpuHealthRead(rows=hf.read_health(
        "1, 00000000:00:07.0, 33, [Not Supported], [N/A], [N/A]\n", fields))) == []


# -- over sshd -----------------------------------------------------------------------------------

def _states(rows) -> dict[int, str]:
    return {r["gpu"]: r["state"] for r in rows}


async def test_a_single_err_reading_never_quarantines_and_a_second_that_agrees_does(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 1, sshd)
    svc, w, alerts = await open_watch(services, hosts)
    gpu_state.set_health(st["gpu-01"], 1, read_error="ERR!")
    [r] = await w.round()
    assert r.pending == {1} and _states(await svc.store.call(lambda s: s.health_states("gpu-01"))) == {1: "suspect"}
    [row] = await svc.store.call(lambda s: s.health_states("gpu-01"))
    assert row["reason"].startswith("cannot read GPU 1: persistence_mode, pstate, clocks_event_reasons.active and ")
    assert "more read 'ERR!'" in row["reason"] and fh.UNCONFIRMED in row["reason"]
    gpu_state.set_health(st["gpu-01"], 1)                        # transient: the next probe reads it fine
    [r] = await w.round()
    assert r.pending == frozenset() and await svc.store.call(lambda s: s.health_held("gpu-01")) is None
    for _ in range(3):
        await w.round()
    assert _states(await svc.store.call(lambda s: s.health_states("gpu-01"))) == {1: "healthy"}
    gpu_state.set_health(st["gpu-01"], 0, read_error="[Unknown Error]")
    await w.round()
    [r] = await w.round()                                        # still unreadable: the second probe agrees
    assert [(g, to) for g, _, to, _ in r.transitions] == [(0, "quarantined")]
    assert "cannot read GPU 0:" in r.transitions[0][3] and "(a second probe agreed)" in r.transitions[0][3]


async def test_na_and_not_supported_readings_are_not_findings(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 1, sshd)
    svc, w, alerts = await open_watch(services, hosts)
    gpu_state.set_health(st["gpu-01"], 0, read_error="[N/A]")
    gpu_state.set_health(st["gpu-01"], 1, read_error="[Not Supported]")
    for _ in range(2):
        [r] = await w.round()
        assert r.probe.status == "ok" and r.probe.findings == [] and r.transitions == []
    assert await svc.store.call(lambda s: s.health_states("gpu-01")) == [] and alerts == []


async def test_a_failing_nvidia_smi_is_a_finding_and_exit_15_acts_at_once(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 2, sshd)
    svc, w, _ = await open_watch(services, hosts, max_quarantined_pct=100)
    gpu_state.set_exit_code(st["gpu-01"], 9)                     # the driver is not loaded
    gpu_state.set_exit_code(st["gpu-02"], 15)                    # a GPU fell off the bus
    await w.round()
    rows = {r["host"]: r for r in await svc.store.call(lambda s: s.health_states())}
    assert rows["gpu-01"]["state"] == "suspect" and rows["gpu-02"]["state"] == "quarantined"
    assert rows["gpu-01"]["reason"].startswith("cannot read the GPUs: GPU check failed on gpu-01: the NVIDIA driver "
                                               "is not loaded (nvidia-smi exit 9)")
    await w.round()
    assert (await svc.store.call(lambda s: s.health_held("gpu-01")))["state"] == "quarantined"


async def test_the_loop_runs_the_second_probe_early(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 1, sshd)
    # an hour between regular probes: only the early second probe can quarantine within the wait
    svc, w, _ = await open_watch(services, hosts, interval_s=3600, confirm_after_s=0.2)
    gpu_state.set_health(st["gpu-01"], 0, pcie_width=8)
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    try:
        deadline = time.monotonic() + 60
        while await svc.store.call(lambda s: s.health_held("gpu-01")) is None:
            assert time.monotonic() < deadline, await svc.store.call(lambda s: s.health_states("gpu-01"))
            await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    held = await svc.store.call(lambda s: s.health_held("gpu-01"))
    assert held["gpu"] == 0 and held["reason"] == "PCIe link x8 of x16 (a second probe agreed)"


CLEANUP = "cleanup"


def _holder_host(remote_dir, sshd, n: int = 1):
    # (no chown: the simulated host's state folder is shared; the SSH user's nvidia-smi writes the
    # teardown lines into it as a root-made fixture leaves it)
    return fleet(remote_dir, n, sshd)


async def _wait_for(pred, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        got = await pred()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def test_the_bots_own_cleanup_under_a_running_watch_is_expected_never_quarantined(
        tmp_path, services, sshd, remote_dir):
    hosts, st = _holder_host(remote_dir, sshd)
    svc, w, alerts = await open_watch(services, hosts, interval_s=0.3)
    s = Sleepers(st["gpu-01"])
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    try:
        s.hold(0, 19592, user=sshd.user)
        s.hold(1, 19592, user=sshd.user)
        out = await svc.engine.run(RunRequest(playbook=CLEANUP, hosts=["gpu-01"], assume_yes=True))
        assert out.status == "succeeded", [(x.name, x.status, x.summary) for x in out.steps]

        async def expected():
            ev = [e for e in await svc.store.call(lambda s: s.health_events("gpu-01")) if e["kind"] == "xid_expected"]
            return ev if {e["gpu"] for e in ev} == {0, 1} and len(ev) >= 16 else None
        ev = await _wait_for(expected, "the teardown's Xid 45 lines read as expected")
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        s.stop_all()
    assert {(e["code"], e["from_state"]) for e in ev} == {(45, "teardown")}
    assert _states(await svc.store.call(lambda s: s.health_states("gpu-01"))) == {0: "expected", 1: "expected"}
    assert alerts == [] or all(to == "expected" for a in alerts for _, _, to, _ in a.transitions)
    assert [e for e in await svc.store.call(lambda s: s.health_events("gpu-01")) if e["kind"] == "xid"] == []
    row = (await svc.store.call(lambda s: s.health_states("gpu-01")))[0]
    assert row["reason"] == f"Xid 45 x8 during the bot's own teardown (run #{out.run_id}): expected"
    cfg = write_yaml(tmp_path / "fleet.yaml", {"audit_db": str(tmp_path / "eagle.db"), "hosts": hosts,
                                               "health_watch": watch_cfg()})
    doc = json.loads(eagle("fleet", "--json", config=cfg).stdout)
    assert {(h["gpu"], h["state"]) for h in doc["hosts"]} == {(0, "expected"), (1, "expected")}
    assert {(x["code"], x["window"], x["verdict"]) for x in doc["xids"]} == {(45, "teardown", "expected")}
    assert "expected" in eagle("fleet", config=cfg).stdout


async def test_the_same_burst_outside_the_bots_teardown_is_judged(services, sshd, remote_dir):
    """A holder killed by someone else (here the test) leaves the same lines: not the bot's
    teardown, so Xid 45 is judged as always (a warning: suspect)."""
    hosts, st = _holder_host(remote_dir, sshd)
    svc, w, _ = await open_watch(services, hosts)
    s = Sleepers(st["gpu-01"])
    try:
        pid = s.hold(0, 19592, user=sshd.user)
        await w.round()
        s.stop_all()
        await _wait_for(lambda: asyncio.sleep(0, not Sleepers.alive(pid)), "the holder to die")
        [r] = await w.round()
    finally:
        s.stop_all()
    assert [(g, to) for g, _, to, _ in r.transitions] == [(0, "suspect")]
    xids = [e for e in await svc.store.call(lambda s: s.health_events("gpu-01")) if e["kind"].startswith("xid")]
    assert {(e["kind"], e["code"], e["from_state"]) for e in xids} == {("xid", 45, "idle")}


async def test_a_fatal_xid_inside_the_bots_teardown_still_quarantines_at_once(services, sshd, remote_dir):
    hosts, st = _holder_host(remote_dir, sshd)
    svc, w, _ = await open_watch(services, hosts)
    s = Sleepers(st["gpu-01"])
    try:
        s.hold(0, 19592, user=sshd.user)
        out = await svc.engine.run(RunRequest(playbook=CLEANUP, hosts=["gpu-01"], assume_yes=True))
        assert out.status == "succeeded"
    finally:
        s.stop_all()
    log = gpu_state.load_state(st["gpu-01"])["kernel_log"]
    burst = [line for line in log if ": 45, " in line]
    assert len(burst) == 8, log
    ts = float(burst[-1][1:burst[-1].index("]")])
    gpu_state.set_kernel_log(st["gpu-01"], log + [XID79.replace("[ 8123.456789]", f"[{ts:12.6f}]")])
    [r] = await w.round()
    assert _states(await svc.store.call(lambda s: s.health_states("gpu-01"))) == {0: "quarantined"}
    assert "fallen off the bus" in r.transitions[0][3]


XID74 = "[{ts:12.6f}] NVRM: Xid (PCI:0000:00:06): 74, pid=2211, name=python, NVLink: fatal error detected on link 4"
RECOVERED = ("[{ts:12.6f}] NVRM: Xid (PCI:0000:00:06): 154, GPU recovery action changed from 0x1 (GPU Reset "
             "Required) to 0x0 (None)")


async def test_one_finding_per_gpu_xid_and_boot_until_a_recovery_event_ends_it(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 1, sshd)
    svc, w, _ = await open_watch(services, hosts, clear_after=1)
    log = list(gpu_state.KERNEL_LOG)

    async def probe_with(*lines: str):
        log.extend(lines)
        gpu_state.set_kernel_log(st["gpu-01"], log)
        [r] = await w.round()
        return r
    r = await probe_with(xid13(100.0))
    assert [(g, to) for g, _, to, _ in r.transitions] == [(0, "suspect")]
    await w.round()                                              # clean: healthy again
    assert _states(await svc.store.call(lambda s: s.health_states("gpu-01"))) == {0: "healthy"}
    r = await probe_with(xid13(200.0))                           # the same Xid, same GPU, same boot: no new finding
    assert r.transitions == [] and r.probe.findings == []
    r = await probe_with(XID74.format(ts=210.0))                 # another Xid is another finding (a second probe decides)
    assert [(g, to) for g, _, to, _ in r.transitions] == [(0, "suspect")] and r.pending == {0}
    r = await probe_with(RECOVERED.format(ts=220.0))             # a recovery event ends the finding at once
    assert r.transitions == [(0, "suspect", "healthy", "recovery event: the driver's recovery action reads None")]
    r = await probe_with(xid13(300.0))                           # and after it, the Xid is new again
    assert [(g, to) for g, _, to, _ in r.transitions] == [(0, "suspect")]
    codes = [e["code"] for e in await svc.store.call(lambda s: s.health_events("gpu-01")) if e["kind"] == "xid"]
    assert sorted(codes) == [13, 13, 13, 74, 154]                # every line an event, each once


@pytest.mark.parametrize("knob,value", [("ecc_uncorrected", 2), ("remap_failure", True),
                                        ("recovery_action", "Reset")])
async def test_the_fatal_readings_act_at_once(services, sshd, remote_dir, knob, value):
    hosts, st = fleet(remote_dir, 1, sshd)
    svc, w, _ = await open_watch(services, hosts)
    gpu_state.set_health(st["gpu-01"], 1, **{knob: value})
    [r] = await w.round()
    assert [(g, to) for g, _, to, _ in r.transitions] == [(1, "quarantined")]
