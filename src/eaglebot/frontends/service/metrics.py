"""Prometheus `/metrics` for `eagle serve`, on `metrics_port:` (bound to `metrics_host:`,
127.0.0.1 by default), in HTTP and Socket Mode alike.

Why a port of its own and not a bearer token on the Slack events port: that port faces
Slack (often the internet, through a load balancer), the scrape faces Prometheus inside; a
port of its own lets the network decide who scrapes (loopback by default, whatever `--host`
the Slack port binds), needs no further secret to hand Prometheus and rotate, and keeps
scrapes out of the Slack port's connection cap (frontends/service/http_guard.py).

Counters and the histogram are this process's (each replica is its own scrape target); the
open incidents, quarantined GPUs and the latest bench results are the store's, read at
scrape time (three small queries). The bench results are `eagle_bench_result{host, playbook,
metric}` (the newest value of each of BENCH_SERIES, from runs no tune or sweep started) and
`eagle_bench_result_run{...}` (the run that measured it): labels from the inventory, the
playbooks and a fixed list, so the series stay bounded.
Each `Metrics` has its own `CollectorRegistry`, never the global one, so two apps in one
process (tests) do not clash.
"""
from __future__ import annotations

import platform
import time
import weakref
from importlib.metadata import PackageNotFoundError, version
from typing import Iterable, TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from eaglebot.engine.records import Observer, RunOutcome, StepRecord
from eaglebot.frontends.service.http_guard import Listener, listen
from eaglebot.sdk import StepResult

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol import MetricsReads
    from eaglebot.store.rows import LatestMetric

BENCH_SERIES = ("output_throughput", "accept_length", "avg_spec_accept_length", "speedup_vs_reference",
                "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "greedy_match_rate")
STEP_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800, 3600, float("inf"))
_ALL: "weakref.WeakSet[Metrics]" = weakref.WeakSet()
_leader: bool | None = None


def set_leader(is_leader: bool) -> None:
    """The leader module's word: this process is (or is no longer) the leader. Process-wide by
    nature (one process, one lease), so it reaches every Metrics of the process, and the ones
    made later."""
    global _leader
    _leader = is_leader
    for m in list(_ALL):
        m.leader.set(1 if is_leader else 0)


class _StoreGauges(Collector):
    """The store's numbers as of the last `refresh` (the scrape handler awaits it first)."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.bench: list[LatestMetric] = []

    def collect(self) -> Iterable[Metric]:
        for name, doc in (("eagle_open_incidents", "Regression incidents open (all replicas)"),
                          ("eagle_quarantined_gpus", "GPUs the health watch holds in quarantine"),
                          ("eagle_quarantined_hosts", "Hosts the health watch holds in quarantine")):
            if name in self.values:
                yield GaugeMetricFamily(name, doc, value=self.values[name])
        if self.bench:
            value = GaugeMetricFamily("eagle_bench_result", "Latest bench result per host, playbook and metric",
                                      labels=["host", "playbook", "metric"])
            run = GaugeMetricFamily("eagle_bench_result_run", "The run that measured eagle_bench_result",
                                    labels=["host", "playbook", "metric"])
            for b in self.bench:
                value.add_metric([b["host"], b["playbook"], b["name"]], b["value"])
                run.add_metric([b["host"], b["playbook"], b["name"]], b["run_id"])
            yield value
            yield run

    def describe(self) -> Iterable[Metric]:
        return []


class Metrics:
    def __init__(self, store: Door[MetricsReads]):
        self.store = store
        self.registry = CollectorRegistry()
        r = self.registry
        self.runs = Counter("eagle_runs", "Runs finished by this process, by playbook and status",
                            ["playbook", "status"], registry=r)
        self.steps = Histogram("eagle_step_duration_seconds", "Step duration, by skill", ["skill"],
                               buckets=STEP_BUCKETS, registry=r)
        self.slack_errors = Counter("eagle_slack_api_errors", "Slack Web API calls that failed, by error",
                                    ["error"], registry=r)
        self.slack_retries = Counter("eagle_slack_api_retries", "Slack Web API calls retried, by reason",
                                     ["reason"], registry=r)
        self.leader = Gauge("eagle_leader", "1 while this process is the leader (schedules, health watch)",
                            registry=r)
        self.scrape_errors = Counter("eagle_metrics_store_errors", "Scrapes whose store queries failed", registry=r)
        self.http_shed = Counter("eagle_http_shed", "HTTP connections cut or refused (slow, or over the cap), by why",
                                 ["reason"], registry=r)
        try:
            ver = version("eaglebot")
        except PackageNotFoundError:
            ver = "unknown"
        Info("eagle_build", "eaglebot's version", registry=r).info(
            {"version": ver, "python": platform.python_version()})
        self._store_gauges = _StoreGauges()
        r.register(self._store_gauges)
        self.leader.set(1 if _leader else 0)
        _ALL.add(self)

    def observer(self) -> Observer:
        return _RunMetrics(self)

    def slack_retry(self, reason: str) -> None:
        self.slack_retries.labels(reason).inc()

    def slack_error(self, error: str) -> None:
        self.slack_errors.labels(error).inc()

    async def refresh(self) -> None:
        """The store's gauges, now. A failing store leaves them out of this scrape (and counts it)."""
        def read(s: MetricsReads) -> tuple[dict[str, float], list[LatestMetric]]:
            held = [h for h in s.health_states() if h["state"] == "quarantined"]
            return ({"eagle_open_incidents": float(len(s.incidents(status="open", limit=100_000))),
                     "eagle_quarantined_gpus": float(sum(1 for h in held if h["gpu"] >= 0)),
                     "eagle_quarantined_hosts": float(sum(1 for h in held if h["gpu"] < 0))},
                    s.latest_metrics(list(BENCH_SERIES)))
        try:
            self._store_gauges.values, self._store_gauges.bench = await self.store.call(read)
        except Exception:
            self._store_gauges.values, self._store_gauges.bench = {}, []
            self.scrape_errors.inc()

    async def handle(self, request: web.Request) -> web.Response:
        await self.refresh()
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def shed(self, reason: str) -> None:
        self.http_shed.labels(reason).inc()

    async def serve(self, host: str, port: int) -> Listener:
        """`/metrics` on a port of its own (`metrics_port`), behind the same front door."""
        app = web.Application()
        app.router.add_get("/metrics", self.handle)
        return await listen(app, host, port, on_shed=self.shed)


class _RunMetrics(Observer):
    def __init__(self, m: Metrics):
        self.m = m
        self._t0: dict[tuple[int, int, str], float] = {}

    async def step_started(self, run_id: int, rec: StepRecord) -> None:
        self._t0[(run_id, rec.idx, rec.host)] = time.monotonic()

    async def step_finished(self, run_id: int, rec: StepRecord, result: StepResult) -> None:
        t0 = self._t0.pop((run_id, rec.idx, rec.host), None)
        if t0 is None:
            return   # it never started (skipped, or its host was unreachable)
        self.m.steps.labels(rec.skill).observe(rec.duration_ms / 1000 if rec.duration_ms else time.monotonic() - t0)

    async def run_finished(self, outcome: RunOutcome) -> None:
        self.m.runs.labels(outcome.playbook, outcome.status).inc()
        for key in [k for k in self._t0 if k[0] == outcome.run_id]:
            del self._t0[key]
