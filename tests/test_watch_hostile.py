"""A health watch hostile hosts cannot blind or use (issue 35, item 3 and its LOW items), over
the real loopback sshd: a malformed kernel log line is a finding of its own and a later Xid 79
is still seen; an unreadable kernel log (a non-root SSH user, kernel.dmesg_restrict=1) is a
finding shown in `eagle fleet` and alerted once; only the driver's own Xid lines count; a line
is counted once however the log is re-read; every string a host wrote is escaped in Slack, in
`text` and in blocks, on every alert path."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from support.helpers import eagle, write_yaml
from support.sshd import chown_to
from test_health_watch import XID79, fleet, open_watch, watch_cfg, xid13

from eaglebot.engine.health_watch import HealthWatch, HostReport
from eaglebot.facts.gpu import xid as xf
from eaglebot.sim import gpu_state

HUGE = "[  100.000000] NVRM: Xid (PCI:0000:00:06): " + "9" * 5000 + ", x"
AUDIT = ('[  300.000000] audit: type=1400 audit(1733000000.123:42): apparmor="DENIED" operation="exec" '
         'comm="sh" name="NVRM: Xid (PCI:0000:00:06): 79, pid=1, name=python, GPU has fallen off the bus."')
HOSTILE = "<!channel> <https://evil.example|click here> & <@U0BOSS>"


def _xid79(ts: float) -> str:
    return XID79.replace("[ 8123.456789]", f"[{ts:12.6f}]")


async def test_a_malformed_xid_line_is_a_finding_and_never_blinds_the_watch(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 1, sshd)
    svc, w, _ = await open_watch(services, hosts)
    gpu_state.set_kernel_log(st["gpu-01"], gpu_state.KERNEL_LOG + [HUGE])
    [r] = await w.round()
    assert r.probe.status == "ok"
    [row] = await svc.store.call(lambda s: s.health_states("gpu-01"))
    assert row["state"] == "suspect" and row["reason"].startswith("unreadable kernel log line"), row
    assert len(row["reason"]) < 400                          # the line is clipped, not stored whole
    gpu_state.set_kernel_log(st["gpu-01"], gpu_state.KERNEL_LOG + [HUGE, _xid79(200.0)])
    await w.round()
    held = await svc.store.call(lambda s: s.health_held("gpu-01"))
    assert held is not None and held["state"] == "quarantined" and "fallen off the bus" in held["reason"]


def _unreadable_dmesg(bin_dir: Path, sshd) -> str:
    """The test user's real `dmesg` where the kernel says no (kernel.dmesg_restrict=1, Debian's
    default); elsewhere a stand-in that fails exactly as util-linux's does there."""
    real = subprocess.run([*sshd.ssh_argv(), "LC_ALL=C dmesg"], capture_output=True, text=True, timeout=60)
    if real.returncode != 0 and "Operation not permitted" in real.stderr:
        return "dmesg"
    path = bin_dir / "dmesg-restricted"
    path.write_text("#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n")
    os.chmod(path, 0o755)
    return str(path)


async def test_an_unreadable_kernel_log_is_a_finding_in_eagle_fleet_and_alerted_once(
        tmp_path, services, sshd, remote_dir, fake):
    from eaglebot.frontends.slack.client import make_client
    from eaglebot.frontends.slack.health_alerts import HealthAlerts

    hosts, st = fleet(remote_dir, 1, sshd)
    hosts["gpu-01"]["vars"]["dmesg"] = _unreadable_dmesg(remote_dir, sshd)
    svc = await services(hosts, health_watch=watch_cfg(channel="CHEALTH"), slack={"api_url": fake.base_url})
    alerts = HealthAlerts(make_client(svc.settings, "xoxb-test", backoff_s=0.01), svc.store, "CHEALTH", 60)
    w = HealthWatch(svc.settings, svc.store, svc.pool, svc.settings.health_watch, notify=alerts.notify)
    for _ in range(3):
        await w.round()
    [row] = [r for r in await svc.store.call(lambda s: s.health_states("gpu-01")) if r["gpu"] == -1]
    assert row["reason"].startswith("Xids not checked on gpu-01: dmesg: ") and "Operation not permitted" in row["reason"]
    posts = fake.ok_calls_to("chat.postMessage")
    assert len(posts) == 1 and "Xids not checked on gpu-01" in posts[0].args["text"]
    await alerts.aclose()
    cfg = write_yaml(tmp_path / "fleet.yaml", {"audit_db": str(tmp_path / "eagle.db"), "hosts": hosts,
                                               "health_watch": watch_cfg()})
    res = eagle("fleet", config=cfg)
    assert res.returncode == 0 and "Xids not checked on gpu-01: dmesg:" in res.stdout, res.stdout + res.stderr
    doc = json.loads(eagle("fleet", "--json", config=cfg).stdout)
    assert any("Xids not checked" in (h["reason"] or "") for h in doc["hosts"])


async def test_only_the_drivers_own_xid_lines_count_an_audit_line_quoting_one_does_not(services, sshd, remote_dir):
    hosts, st = fleet(remote_dir, 1, sshd)
    svc, w, alerts = await open_watch(services, hosts)
    gpu_state.set_kernel_log(st["gpu-01"], gpu_state.KERNEL_LOG + [AUDIT])
    [r] = await w.round()
    assert r.probe.status == "ok" and r.transitions == [] and alerts == []
    assert await svc.store.call(lambda s: s.health_states("gpu-01")) == []
    assert [e for e in await svc.store.call(lambda s: s.health_events("gpu-01")) if e["kind"].startswith("xid")] == []


async def test_a_line_is_counted_once_however_the_log_is_reread(services, sshd, remote_dir):
    """Alternating what the log shows (and a line printed twice) never counts a line again: 6
    re-reads of 2 distinct Xid 13 lines are 2 occurrences, not the 5 that would quarantine."""
    hosts, st = fleet(remote_dir, 1, sshd)
    svc, w, _ = await open_watch(services, hosts, xid={"13": {"severity": "warn", "fail_after": 5, "window_s": 3600}})
    late, early = xid13(200.0), xid13(50.0)
    for lines in ([late, late], [early], [late], [early], [late, early], [early]):
        gpu_state.set_kernel_log(st["gpu-01"], gpu_state.KERNEL_LOG + lines)
        await w.round()
    xids = [e for e in await svc.store.call(lambda s: s.health_events("gpu-01")) if e["kind"].startswith("xid")]
    assert len(xids) == 2, xids
    assert await svc.store.call(lambda s: s.health_held("gpu-01")) is None


BOOT_A, BOOT_B = "6b1c2b0e-1d4e-4f44-9a5a-2f0b7c1e9d01", "0d9e8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b"


def _log(boot: str, uptime: float, *lines: str) -> xf.KernelLog:
    return xf.parse_kernel_log("\n".join([*lines, f"eagle-boot {boot} {uptime:.2f}"]))


def test_the_kernel_log_is_read_totally_and_each_line_counted_once_per_boot():
    log = _log(BOOT_A, 500.0, xid13(100.0), xid13(100.0), HUGE, AUDIT, "[ 200.0] NVRM: Xid (PCI:0000:00:06): 13",
               "NVRM: Xid (0000:00:07): 31, pid=1, name=python, Ch 00000008")
    assert (log.boot_id, log.uptime_s) == (BOOT_A, 500.0)
    assert [(x.code, x.bus_id, x.ts) for x in log.xids] == [(13, "0000:00:06", 100.0), (13, "0000:00:06", 100.0),
                                                            (13, "0000:00:06", 200.0), (31, "0000:00:07", None)]
    assert log.unreadable == [xf.clip(HUGE)] and len(log.unreadable[0]) <= xf.LINE_LIMIT
    mem = xf.LogMemory()
    assert [x.ts for x in mem.fresh(log)] == [100.0, 200.0, None]          # the repeated line once
    assert mem.fresh(log) == [] and mem.fresh(_log(BOOT_A, 501.0, xid13(50.0))) != []
    assert mem.fresh(_log(BOOT_A, 502.0, xid13(100.0), xid13(50.0))) == []  # alternating: nothing again
    assert [x.ts for x in mem.fresh(_log(BOOT_B, 20.0, xid13(10.0)))] == [10.0]   # a new boot starts over
    assert mem.newest == 10.0
    restarted = xf.LogMemory(floor=200.0)                                   # the store's cursor after a restart
    assert [x.ts for x in restarted.fresh(_log(BOOT_A, 600.0, xid13(100.0), xid13(300.0)))] == [300.0]
    rebooted = xf.LogMemory(floor=200.0)                                    # no boot known, the clock went back
    assert [x.ts for x in rebooted.fresh(xf.KernelLog(xids=xf.parse_xids(xid13(12.0))))] == [12.0]
    assert xf.unreadable_log("dmesg", "dmesg: read kernel buffer failed: Operation not permitted\n"
                             f"eagle-boot {BOOT_A} 1.00\n", 3) == ("dmesg: read kernel buffer failed: "
                                                                    "Operation not permitted")


def _hostile_nvsmi(bin_dir: Path) -> str:
    """An nvidia-smi whose error a hostile host controls (stderr, exit 3)."""
    path = bin_dir / "nvidia-smi-hostile"
    path.write_text(f"#!/bin/sh\necho '{HOSTILE}' >&2\nexit 3\n")
    os.chmod(path, 0o755)
    return str(path)


def _raw_in(call) -> list[str]:
    """Every place a call carries the hostile text unescaped."""
    texts = call.all_text().split("\n")
    return [t for t in texts if "<!channel>" in t or "<https://evil.example" in t or "<@U0BOSS>" in t]


async def test_host_text_is_escaped_in_text_and_blocks_on_every_alert_path(services, sshd, remote_dir, fake):
    from eaglebot.frontends.slack.client import make_client
    from eaglebot.frontends.slack.health_alerts import HealthAlerts, silence_incident

    hosts, st = fleet(remote_dir, 13, sshd, gpus=1)
    bad = _hostile_nvsmi(remote_dir)
    for h in hosts.values():
        h["vars"]["nvidia_smi"] = bad
    gpu_state.set_kernel_log(st["gpu-13"], gpu_state.KERNEL_LOG + [
        "[  400.000000] NVRM: Xid (PCI:0000:00:06): 13" + HOSTILE])          # an unreadable line, hostile
    chown_to(remote_dir)
    svc = await services(hosts, health_watch=watch_cfg(max_quarantined_pct=100, channel="CHEALTH"),
                         slack={"api_url": fake.base_url})
    client = make_client(svc.settings, "xoxb-test", backoff_s=0.01)
    alerts = HealthAlerts(client, svc.store, "CHEALTH", 60, window_s=0.2)
    seen: list[HostReport] = []

    async def notify(r: HostReport) -> None:
        seen.append(r)
        await alerts.notify(r)
    w = HealthWatch(svc.settings, svc.store, svc.pool, svc.settings.health_watch, notify=notify)
    await w.round()                                          # 13 incidents open: 10 alone, a summary of 3
    await w.round()                                          # and each evolves: updated in place
    await alerts.aclose()
    row = next(r for r in await svc.store.call(lambda s: s.health_states("gpu-01")) if r["message_ts"])
    await silence_incident(client, svc.store, True, "UALICE", f"gpu-01 {row['gpu']}", row["channel"],
                           row["message_ts"])
    calls = [c for c in fake.ok_calls_to("chat.postMessage") + fake.ok_calls_to("chat.update")]
    summaries = [c for c in calls if "more incidents opened at once" in c.all_text()]
    assert summaries and all(c.blocks() for c in summaries), "the summary has blocks too"
    assert fake.ok_calls_to("chat.update"), "an incident that evolved was updated"
    assert any("silenced by" in c.all_text() for c in calls)
    assert any("&lt;!channel&gt;" in c.args["text"] for c in calls)
    assert any("&lt;!channel&gt;" in c.all_text() and c.blocks() for c in calls)
    leaks = {c.method + ": " + t for c in calls for t in _raw_in(c)}
    assert not leaks, leaks
    assert any(HOSTILE in (r["reason"] or "") for r in await svc.store.call(lambda s: s.health_states()))   # the store keeps it as read


async def test_a_parser_that_raises_is_a_finding_not_a_silent_host(services, sshd, remote_dir, monkeypatch):
    from eaglebot.facts.gpu import health_probe

    def broken(text, fields=None):
        raise ValueError("a parser did not foresee this")
    hosts, st = fleet(remote_dir, 1, sshd)
    svc, w, alerts = await open_watch(services, hosts)
    monkeypatch.setattr(health_probe.hf, "read_health", broken)
    [r] = await w.round()
    assert r.probe.status == "failed"
    [row] = await svc.store.call(lambda s: s.health_states("gpu-01"))
    assert (row["gpu"], row["state"]) == (-1, "suspect")
    assert row["reason"] == ("probe failed: cannot read what gpu-01 answered (ValueError: a parser did not "
                             "foresee this)")
