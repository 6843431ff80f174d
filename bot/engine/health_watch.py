"""The fleet health watch: a cheap probe of each watched host every `interval_s`, findings
judged by the Xid policy and `engine.fleet_health`, states and events written to the store.

A probe is the `gpu.health` facts and nothing heavier: one health query with the driver's
recovery action too (a field an older driver does not know is dropped, as the skill does), `nvidia-smi nvlink -s`, and the kernel
log's Xid lines after the host's cursor (so each Xid is reported once); never DCGM. Each
probe has its own deadline (`probe_timeout_s`): past it the probe is the finding "probe hung",
and each host has its own loop, so one wedged host never delays another.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Mapping

from eaglebot.config import HealthWatchConfig, Settings, XidRule
from eaglebot.errors import EagleError
from eaglebot.facts import health as hf
from eaglebot.facts import nvsmi
from eaglebot.engine import fleet_health as fh
from eaglebot.sdk import Host
from eaglebot.store.protocol_async import AsyncStoreProtocol
from eaglebot.transport import TransportPool

log = logging.getLogger("eaglebot.health")

# nvidia-smi's exits that mean the GPU or driver is gone (driver not loaded, InfoROM, off the bus).
_FATAL_EXITS = (9, 14, 15)


@dataclass
class Probe:
    """What one probe of one host found (before the policy's window and the state)."""
    host: str
    status: str                                   # ok, hung, failed
    findings: list[fh.Finding] = field(default_factory=list)
    xids: list[tuple[int, hf.Xid]] = field(default_factory=list)   # new Xids, by GPU (HOST: unknown)
    cursor: float | None = None
    duration_s: float = 0.0
    recovered: frozenset[int] = frozenset()        # GPUs whose driver recovery action reads None


@dataclass
class HostReport:
    """One host's probe and what it changed: the transitions made (gpu, from, to, reason)."""
    host: str
    probe: Probe
    transitions: list[tuple[int, str, str, str]] = field(default_factory=list)
    breaker: bool = False


class _Hung(Exception):
    pass


async def _run(host: Host, cmd: str, deadline: float) -> Any:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Hung()
    res = await host.run(cmd, timeout=left)
    if res.timed_out:
        raise _Hung()
    return res


async def _read(host: Host, host_vars: Mapping[str, Any], cursor: float | None, deadline: float) -> Probe:
    res, fact, _ = await hf.ask_health(lambda cmd: _run(host, cmd, deadline), host_vars, hf.health_fact(hf.WATCH_FIELDS))
    p = Probe(host.name, "ok")
    gpus: dict[int, dict[str, Any]] = {}
    if res.exit_status != 0:
        why = nvsmi.explain_exit(host.name, nvsmi.nvsmi_path(host_vars), res.exit_status, res.stdout, res.stderr)
        p.findings.append(fh.Finding(fh.HOST, "fail" if res.exit_status in _FATAL_EXITS else "warn", why))
        p.status = "failed"
    else:
        try:
            gpus = fact.parse(res.stdout)
        except nvsmi.ParseError as e:
            p.findings.append(fh.Finding(fh.HOST, "warn", f"nvidia-smi printed what the probe cannot read: {e}"))
            p.status = "failed"
    if gpus:
        p.recovered = frozenset(i for i, r in gpus.items() if r.get("gpu_recovery_action") == hf.RECOVERY_NONE)
        links = await _run(host, hf.NVLINK_STATUS.command(host_vars), deadline)
        nvlink = hf.NVLINK_STATUS.parse(links.stdout) if links.exit_status == 0 else {}
        for i, row in sorted(gpus.items()):
            v = hf.evaluate(row, hf.Thresholds(), nvlink=nvlink.get(i))
            if v.verdict != "ok":
                p.findings.append(fh.Finding(i, v.verdict, "; ".join(v.reasons)))
    # The kernel log even when nvidia-smi failed: its Xids say why (79: the GPU fell off the bus).
    klog = await _run(host, hf.kernel_log_command(str(host_vars.get("dmesg") or "dmesg")), deadline)
    if klog.exit_status == 0:
        new, p.cursor = hf.xids_since(hf.parse_xids(klog.stdout), cursor)
        bus = {i: str(r.get("pci.bus_id") or "") for i, r in gpus.items()}
        for x in new:
            gpu = hf.xid_gpu(x, bus)
            p.xids.append((fh.HOST if gpu is None else gpu, x))
    return p


async def probe_host(host: Host, host_vars: Mapping[str, Any], cursor: float | None,
                     timeout_s: float) -> Probe:
    """One probe of one host within `timeout_s`; a probe past it is the finding "probe hung",
    a host that cannot be reached "probe failed"."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    try:
        # The backstop: a transport that does not honour its timeout is cut here.
        p = await asyncio.wait_for(_read(host, host_vars, cursor, deadline), timeout_s + 1.0)
    except (_Hung, asyncio.TimeoutError):
        p = Probe(host.name, "hung", [fh.Finding(fh.HOST, "warn", f"probe hung: no answer within {timeout_s:g}s")])
    except EagleError as e:
        p = Probe(host.name, "failed", [fh.Finding(fh.HOST, "warn", f"probe failed: {e}")])
    p.duration_s = time.monotonic() - t0
    return p


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


Notify = Callable[[HostReport], Awaitable[None]]


class HealthWatch:
    """Probes the watched hosts and keeps their state in the store."""

    def __init__(self, settings: Settings, store: AsyncStoreProtocol, pool: TransportPool,
                 cfg: HealthWatchConfig, *, notify: Notify | None = None):
        self.settings, self.store, self.pool, self.cfg = settings, store, pool, cfg
        self.hosts = settings.resolve_hosts(cfg.hosts)
        self.policy: dict[int, XidRule] = cfg.xid_policy()
        self.notify = notify
        self.limit = fh.breaker_limit(len(self.hosts), cfg.max_quarantined_pct)
        # Decisions one at a time: the breaker counts the hosts held at the moment of each.
        self._deciding = asyncio.Lock()

    async def probe_once(self, host: str) -> HostReport:
        """Probe one host and record what changed."""
        cursor = await self.store.health_cursor(host)
        p = await probe_host(self.pool.get(host), self.settings.hosts[host].vars, cursor, self.cfg.probe_timeout_s)
        async with self._deciding:
            report = await self._apply(p)
        if self.notify is not None and report.transitions:
            await self.notify(report)
        return report

    async def round(self) -> list[HostReport]:
        """One probe of every watched host, all at once."""
        return list(await asyncio.gather(*(self.probe_once(h) for h in self.hosts)))

    async def run(self, stop: asyncio.Event) -> None:
        """Each host on its own interval until `stop` is set (a hung host delays only itself)."""
        await asyncio.gather(*(self._loop(h, i, stop) for i, h in enumerate(self.hosts)))

    async def _loop(self, host: str, i: int, stop: asyncio.Event) -> None:
        # Spread the hosts over the interval so 256 probes do not start in one instant.
        delay = self.cfg.interval_s * i / max(1, len(self.hosts))
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), delay)
                return
            except asyncio.TimeoutError:
                pass
            t0 = time.monotonic()
            try:
                await self.probe_once(host)
            except asyncio.CancelledError:
                raise
            except Exception:   # one host's surprise (a store hiccup, odd output) never stops the watch
                log.exception("health probe of %s failed; next try in %gs", host, self.cfg.interval_s)
            delay = max(0.0, self.cfg.interval_s - (time.monotonic() - t0))

    async def _xid_findings(self, p: Probe) -> list[fh.Finding]:
        out = []
        now = datetime.now(timezone.utc)
        for gpu, x in p.xids:
            await self.store.health_record_xid(p.host, gpu, x.code, x.line())
            rule = self.policy.get(x.code)
            level = rule.severity if rule else "warn"
            reason = x.line()
            if rule is not None and level == "warn" and rule.fail_after:
                n = await self.store.health_xid_count(p.host, gpu, x.code,
                                                      _iso(now - timedelta(seconds=rule.window_s)))
                if n >= rule.fail_after:
                    level, reason = "fail", f"{x.line()}: {n} times within {rule.window_s:g}s"
            out.append(fh.Finding(gpu, level, reason))
        return out

    async def _apply(self, p: Probe) -> HostReport:
        findings = p.findings + await self._xid_findings(p)
        states = await self.store.health_states()
        mine = [fh.Row(r["gpu"], r["state"], r["clean"], r["reason"] or "") for r in states if r["host"] == p.host]
        held = {r["host"] for r in states if r["state"] in fh.HELD}
        may = p.host in held or len(held) < self.limit
        d = fh.decide(mine, findings, told=p.status == "ok", clear_after=self.cfg.clear_after, may_quarantine=may,
                      recovered=p.recovered)
        report = HostReport(p.host, p, breaker=d.breaker)
        before = {r.gpu: r.state for r in mine}
        for t in d.transitions:
            if await self.store.health_transition(p.host, t.gpu, t.state, t.reason, fh.ACTOR):
                report.transitions.append((t.gpu, before.get(t.gpu, "healthy"), t.state, t.reason))
        for gpu, n in d.clean.items():
            await self.store.health_set_clean(p.host, gpu, n)
        await self.store.health_set_cursor(p.host, p.cursor, p.status)
        return report
