"""The fleet health watch: a cheap probe of each watched host every `interval_s`, findings
judged by the Xid policy and `engine.fleet_health`, states and events written to the store.

A probe is `facts.gpu.health_probe.read_gpu_health`, the read gpu.health makes (one health query
with the driver's recovery action too, `nvidia-smi nvlink -s`, the kernel log's Xid lines with
the host's boot id and uptime), and nothing heavier; never DCGM. Whatever a host prints, the
probe ends in findings, never an exception: `cannot read GPU N: ...` (ERR!, [Unknown Error], a
row it cannot read), `cannot read the GPUs: ...` (nvidia-smi failed), `Xids not checked on HOST:
dmesg: ...`, `unreadable kernel log line: ...`. Each probe has its own deadline
(`probe_timeout_s`): past it the probe is the finding "probe hung", and each host has its own
loop, so one wedged host never delays another.

A `fail` outside the fatal class is confirmed by a second probe `confirm_after_s` later (the
host's loop runs it early); only then does it quarantine (fleet_health.py).

Where the host has a `port` var, the probe also reads that server's /server_info: an accept
threshold below 1 (at launch, or changed at runtime through `/set_internal_state`, which
`internal_states` shows) voids losslessness and is a `warn` on the host (suspect, alerted). A
server the bot launched there (its pid file is still in the state folder) that no longer runs is a
`warn` too, with the fatal line of its log (an NGRAM server's illegal memory access after hours,
sglang#24361, leaves a healthy GPU and no server).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, TYPE_CHECKING

from eaglebot.config import HealthWatchConfig, Settings, XidRule
from eaglebot.errors import EagleError
from eaglebot.facts.gpu import health as hf
from eaglebot.facts.gpu import xid as xf
from eaglebot.facts.gpu.health_probe import GpuHealthRead, read_gpu_health
from eaglebot.facts.host import ports
from eaglebot.facts.sglang import release
from eaglebot.facts.spec import live
from eaglebot.engine import fleet_health as fh, procs
from eaglebot.engine.xid_judge import Seen, judge_xids
from eaglebot.sdk import CommandResult, Host, path_for_shell
from eaglebot.skills.lib import server
from eaglebot.transport import TransportPool

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import ServiceState

log = logging.getLogger("eaglebot.health")

# nvidia-smi's exit when a GPU is gone (off the bus): the fatal class, as Xid 79.
_LOST = 15
_NOT_INSTALLED = (126, 127)
# The watch's thresholds: a pending row remap is a GPU to take out until it is reset.
THRESHOLDS = hf.Thresholds(remap_pending="fail")
WATCH_QUERY = hf.health_fact(hf.WATCH_FIELDS)
# The host's newest events read to find whether its drain was noted (Xids read meanwhile are events too).
_NOTE_LOOKBACK = 1000


@dataclass
class Probe:
    """What one probe of one host found (before the policy's window and the state)."""
    host: str
    status: str                                   # ok, hung, failed
    findings: list[fh.Finding] = field(default_factory=list)
    xids: list[tuple[int, xf.Xid]] = field(default_factory=list)   # new Xids, by GPU (HOST: unknown)
    cursor: float | None = None
    duration_s: float = 0.0
    recovered: frozenset[int] = frozenset()        # GPUs whose driver recovery action reads None
    at: float = 0.0                               # wall clock (epoch s) when the host's uptime was read
    boot_id: str | None = None
    uptime_s: float | None = None
    # "" or the step of another run that ran a playbook's code on the host during the probe: a
    # process of it could have written into what the probe read, so it clears nothing.
    beside: str = ""


@dataclass
class HostReport:
    """One host's probe and what it changed: the transitions made (gpu, from, to, reason)."""
    host: str
    probe: Probe
    transitions: list[tuple[int, str, str, str]] = field(default_factory=list)
    breaker: bool = False
    notes: list[tuple[int, str]] = field(default_factory=list)    # said, nothing changed (a drain left alone)
    resume: bool = False                                          # the watch's own drain may be resumed
    pending: frozenset[int] = frozenset()                         # GPUs a second probe will confirm or clear


class _Hung(Exception):
    pass


async def _run(host: Host, cmd: str, deadline: float) -> CommandResult:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Hung()
    res = await host.run(cmd, timeout=left)
    if res.timed_out:
        raise _Hung()
    return res


def findings_of(host: str, got: GpuHealthRead) -> list[fh.Finding]:
    """What one read says, as findings (pure: tested without a host)."""
    out: list[fh.Finding] = []
    if got.failure is not None:
        rc = got.exit_status
        level = "warn" if rc in _NOT_INSTALLED else "fail"
        out.append(fh.Finding(fh.HOST, level, xf.clip(f"cannot read the GPUs: {got.failure}", 300),
                              needs_second=rc != _LOST))
    for i, why in got.rows.cannot_read().items():
        out.append(fh.Finding(fh.HOST if i is None else i, "fail", xf.clip(why, 300), needs_second=True))
    for i, row in sorted(got.rows.rows.items()):
        v = hf.evaluate(row, THRESHOLDS, nvlink=got.nvlink.get(i))
        out += [fh.Finding(i, level, reason, needs_second=level == "fail" and kind not in hf.AT_ONCE_KINDS)
                for level, reason, kind in v.items]
    if got.log_error is not None:
        out.append(fh.Finding(fh.HOST, "warn", xf.clip(f"Xids not checked on {host}: {got.log_error}", 300)))
    return out


async def _read(host: Host, host_vars: Mapping[str, Any], memory: xf.LogMemory, deadline: float,
                state_dir: str | None = None) -> Probe:
    p = Probe(host.name, "ok", at=time.time())
    got = await read_gpu_health(lambda cmd: _run(host, cmd, deadline), host.name, host_vars, WATCH_QUERY,
                                nvlink=hf.NVLINK_STATUS)
    p.findings = findings_of(host.name, got)
    if got.failure is not None:
        p.status = "failed"
    rows = got.rows.rows
    p.recovered = frozenset(i for i, r in rows.items() if r.get("gpu_recovery_action") == hf.RECOVERY_NONE)
    if got.log is not None:
        p.boot_id, p.uptime_s = got.log.boot_id, got.log.uptime_s
        p.at = got.log_at or p.at
        bus = got.bus_ids()
        for x in memory.fresh(got.log):
            gpu = xf.xid_gpu(x, bus)
            p.xids.append((fh.HOST if gpu is None else gpu, x))
        p.findings += [fh.Finding(fh.HOST, "warn", f"unreadable kernel log line: {line}")
                       for line in memory.fresh_lines(got.log.unreadable)]
        p.cursor = memory.newest
    p.findings += await _server(host, host_vars, deadline, state_dir)
    return p


_GONE = "EAGLE-SERVER-GONE"


def gone_command(state_dir: str, port: int) -> str:
    """Prints `_GONE <pid>` and the tail of its newest log when the bot's pid file for `port` names a
    process that no longer runs (gone, or a zombie nobody reaped); nothing otherwise (no pid file: the
    bot stopped it, or never ran one)."""
    d = path_for_shell(state_dir, expand_vars=True)
    return (f'd={d}; f="$d/run/server-{port}.pid"; [ -f "$f" ] || exit 0; p=$(cat "$f"); '
            f'case "$p" in ""|*[!0-9]*) exit 0;; esac; case "$(ps -o stat= -p "$p" 2>/dev/null)" in ""|Z*) ;; '
            f'*) exit 0;; esac; echo "{_GONE} $p"; '
            f'l=$(ls -t "$d"/logs/server-{port}-*.log 2>/dev/null | head -n 1); [ -n "$l" ] && tail -n 200 "$l"; true')


def gone_finding(port: int, stdout: str) -> fh.Finding | None:
    """The `warn` for a launched server that died, naming the fatal line of its log (pure)."""
    lines = stdout.splitlines()
    head = next((ln for ln in lines if ln.startswith(_GONE + " ")), None)
    if head is None:
        return None
    pid = head.split()[1]
    fatal = release.find_fatal("\n".join(lines[lines.index(head) + 1:]))
    why = f"its log ends in: {fatal}" if fatal else "its log names no fatal line"
    return fh.Finding(fh.HOST, "warn", xf.clip(f"the server the bot launched on port {port} (pid {pid}) no longer "
                                               f"runs: {why}; relaunch it", 300))


async def _server(host: Host, host_vars: Mapping[str, Any], deadline: float,
                  state_dir: str | None) -> list[fh.Finding]:
    """The server on the host var `port`: an accept threshold below 1 in /server_info (a runtime
    change through /set_internal_state shows in `internal_states`) is a `warn` on the host; so is a
    server the bot launched (`state_dir`'s pid file) that is gone. No `port`, or a server that does
    not answer but still runs (loading): nothing to say."""
    port = host_vars.get("port")
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if not isinstance(port, int):
        return []
    url = f"http://{ports.probe_address(str(host_vars.get('bind') or '127.0.0.1'))}:{port}/server_info"
    res = await _run(host, server.http_get_script(str(host_vars.get("python") or "python3"), url, 5), deadline)
    code, body = server.parse_http(res.stdout)
    try:
        info = json.loads(body) if code == 200 else None
    except ValueError:
        info = None
    if code != 200 and state_dir:
        found = gone_finding(port, (await _run(host, gone_command(state_dir, port), deadline)).stdout)
        return [found] if found is not None else []
    lossy = live.lossy_running(None, info) if isinstance(info, dict) else []
    return [fh.Finding(fh.HOST, "warn", xf.clip(f"the server on port {port} is not lossless: {'; '.join(lossy)}; "
                                                f"relaunch it or set the threshold back to 1", 300))] if lossy else []


async def probe_host(host: Host, host_vars: Mapping[str, Any], cursor: float | None, timeout_s: float, *,
                     memory: xf.LogMemory | None = None, state_dir: str | None = None) -> Probe:
    """One probe of one host within `timeout_s`; a probe past it is the finding "probe hung",
    a host that cannot be reached "probe failed". `memory`: what was read of its kernel log
    before (else only the lines after `cursor` are new); `state_dir`: the bot's state folder there
    (eagle.yaml's), where a launched server's pid file is."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    mem = memory if memory is not None else xf.LogMemory(floor=cursor)
    try:
        # The backstop: a transport that does not honour its timeout is cut here.
        p = await asyncio.wait_for(_read(host, host_vars, mem, deadline, state_dir), timeout_s + 1.0)
    except (_Hung, asyncio.TimeoutError):
        p = Probe(host.name, "hung", [fh.Finding(fh.HOST, "warn", f"probe hung: no answer within {timeout_s:g}s")])
    except EagleError as e:
        p = Probe(host.name, "failed", [fh.Finding(fh.HOST, "warn", f"probe failed: {e}")])
    except Exception as e:      # whatever a host printed that no parser foresaw: a finding, never a silent host
        log.exception("health probe of %s could not read the answer", host.name)
        p = Probe(host.name, "failed", [fh.Finding(fh.HOST, "warn", xf.clip(
            f"probe failed: cannot read what {host.name} answered ({type(e).__name__}: {e})", 300))])
    p.duration_s = time.monotonic() - t0
    return p


Notify = Callable[[HostReport], Awaitable[None]]


class HealthWatch:
    """Probes the watched hosts and keeps their state in the store."""

    def __init__(self, settings: Settings, store: Door[ServiceState], pool: TransportPool,
                 cfg: HealthWatchConfig, *, notify: Notify | None = None):
        self.settings, self.store, self.pool, self.cfg = settings, store, pool, cfg
        self.hosts = settings.resolve_hosts(cfg.hosts)
        self.policy: dict[int, XidRule] = cfg.xid_policy()
        self.expected = xf.APPLICATION_XIDS if cfg.expected_xids is None else frozenset(cfg.expected_xids)
        self.notify = notify
        self.limit = fh.breaker_limit(len(self.hosts), cfg.max_quarantined_pct)
        # Decisions one at a time: the breaker counts the hosts held at the moment of each.
        self._deciding = asyncio.Lock()
        # Per host (this process's memory; the store keeps the cursor for a restart): what was
        # read of its kernel log, the findings made this boot, the `fail`s a second probe must confirm.
        self._logs: dict[str, xf.LogMemory] = {}
        self._seen: dict[str, Seen] = {}
        self._pending: dict[str, tuple[frozenset[int], float]] = {}

    async def probe_once(self, host: str) -> HostReport:
        """Probe one host and record what changed."""
        mem = self._logs.get(host)
        if mem is None:
            mem = self._logs[host] = xf.LogMemory(floor=await self.store.call(lambda s: s.health_cursor(host)))
        mark, before = await procs.code_beside(self.store, host, 0, None)
        p = await probe_host(self.pool.get(host), self.settings.hosts[host].vars, mem.floor, self.cfg.probe_timeout_s,
                             memory=mem, state_dir=self.settings.state_dir)
        p.beside = before or (await procs.code_beside(self.store, host, 0, mark))[1]
        if p.beside:
            log.info("health probe of %s ran beside %s: it clears nothing", host, p.beside)
        async with self._deciding:
            report = await self._apply(p)
        if self.notify is not None and (report.transitions or report.notes or report.resume):
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
            wait = self.cfg.confirm_after_s if host in self._pending else self.cfg.interval_s
            delay = max(0.0, wait - (time.monotonic() - t0))

    def _still_pending(self, host: str) -> frozenset[int]:
        gpus, since = self._pending.get(host, (frozenset(), 0.0))
        if gpus and time.monotonic() - since > self.cfg.confirm_within_s:   # too late to agree: start over
            self._pending.pop(host, None)
            return frozenset()
        return gpus

    async def _apply(self, p: Probe) -> HostReport:
        seen = self._seen.setdefault(p.host, Seen())
        judged = await judge_xids(self.store, p.host, p.xids, at=p.at, uptime_s=p.uptime_s, boot_id=p.boot_id,
                                  policy=self.policy, expected_codes=self.expected,
                                  grace_s=self.cfg.teardown_grace_s, seen=seen)
        states = await self.store.call(lambda s: s.health_states())
        mine = [fh.Row(r["gpu"], r["state"], r["clean"], r["reason"] or "", r["actor"] or "")
                for r in states if r["host"] == p.host]
        held = {r["host"] for r in states if r["state"] in fh.HELD}
        may = p.host in held or len(held) < self.limit
        pending = self._still_pending(p.host)
        d = fh.decide(mine, p.findings + judged.findings, told=p.status == "ok" and not p.beside,
                      clear_after=self.cfg.clear_after,
                      may_quarantine=may, recovered=p.recovered, pending=pending, expected=judged.expected,
                      recovery=frozenset(judged.recovery))
        if d.pending:
            since = self._pending[p.host][1] if pending and p.host in self._pending else time.monotonic()
            self._pending[p.host] = (d.pending, since)
        else:
            self._pending.pop(p.host, None)
        report = HostReport(p.host, p, breaker=d.breaker, resume=d.resume, pending=d.pending)
        before = {r.gpu: r for r in mine}
        for t in d.transitions:
            if await self.store.call(lambda s: s.health_transition(p.host, t.gpu, t.state, t.reason, fh.ACTOR)):
                was = before[t.gpu].state if t.gpu in before else "healthy"
                report.transitions.append((t.gpu, was, t.state, t.reason))
        for gpu, n in d.clean.items():
            await self.store.call(lambda s: s.health_set_clean(p.host, gpu, n))
        if d.left and not await self._said_left(p.host):
            gpu = d.left[0][0]
            owners = " and ".join(sorted({by for _, by in d.left}))
            note = (f"left {before[gpu].state}: the GPUs read clean for {self.cfg.clear_after} probes, but the drain is "
                    f"{owners}'s, not the watch's; `eagle run resume -H {p.host}` puts it back")
            await self.store.call(lambda s: s.health_note(p.host, gpu, note, fh.ACTOR))
            report.notes.append((gpu, note))
        await self.store.call(lambda s: s.health_set_cursor(p.host, p.cursor, p.status))
        return report

    async def _said_left(self, host: str) -> bool:
        """The watch said it left this host's drain since the drain (or its takeover) began:
        the note is said once per drain, for the host, however many GPU rows or clean streaks."""
        for e in await self.store.call(lambda s: s.health_events(host, limit=_NOTE_LOOKBACK)):
            if e["kind"] == "note" and (e["reason"] or "").startswith("left "):
                return True
            if e["kind"] == "takeover" or (e["kind"] == "transition" and e["to_state"] in fh.DRAINED):
                return False
        return False
