"""One tuning point = one audited run of a playbook; its numbers read back from the store."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from eaglebot.engine.playbook import Playbook
from eaglebot.engine.runner import Approver, Engine, Observer, RunRequest
from eaglebot.sdk import Metric
from eaglebot.store.rows import NewRun, StepEnd
from eaglebot.tuning.records import PointJson, PointNumbers

THROUGHPUT, TTFT = "output_throughput", "median_ttft_ms"
ACCEPT = ("accept_length", "avg_spec_accept_length")


@dataclass
class PointResult:
    run_id: int
    status: str
    throughput: float | None
    ttft_ms: float | None
    accept: float | None
    spread: float | None          # max - min of output throughput over the repeats
    repeats: int
    error: str | None = None

    def as_json(self) -> PointJson:
        return {"run_id": self.run_id, "status": self.status, "output_throughput": self.throughput,
                "median_ttft_ms": self.ttft_ms, "accept_length": self.accept,
                "throughput_spread": self.spread, "repeats": self.repeats, "error": self.error}


def numbers(metrics: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]]) -> PointNumbers:
    by = {m["name"]: float(m["value"]) for m in metrics}
    accept = next((by[k] for k in ACCEPT if k in by), None)
    runs: list[dict[str, Any]] = []
    for s in steps:
        if s["skill"] == "bench.serving" and s.get("data"):
            try:
                runs = list(json.loads(s["data"]).get("runs") or [])
            except (TypeError, ValueError):
                runs = []
    tput = [float(r["output_throughput"]) for r in runs if isinstance(r, dict) and "output_throughput" in r]
    return {"throughput": by.get(THROUGHPUT), "ttft_ms": by.get(TTFT), "accept": accept,
            "spread": (max(tput) - min(tput)) if len(tput) > 1 else 0.0 if tput else None,
            "repeats": len(tput) or (1 if THROUGHPUT in by else 0),
            "samples": tput}


@dataclass
class ParentRun:
    """The audited run a sweep or a bisect is: the runs it starts are its children, so `eagle
    history` shows one row for it (with a count), and it ends with one step that says what it
    found (the best point's throughput as its metric: a sweep is known by its final result)."""

    engine: Engine
    run_id: int
    host: str
    started: float

    @classmethod
    async def open(cls, engine: Engine, kind: str, host: str, inputs: dict[str, Any], *, actor: str, origin: str,
                   channel: str | None) -> ParentRun:
        run = NewRun(playbook=kind, hosts=[host], inputs=inputs, variables={}, actor=actor, origin=origin,
                     channel=channel)
        rid = await engine.store.call(lambda s: s.create_run(run))
        return cls(engine, rid, host, time.monotonic())

    async def close(self, skill: str, ok: bool, summary: str, *, error: str | None = None,
                    metrics: list[Metric] | None = None) -> None:
        store = self.engine.store
        sid = await store.call(lambda s: s.step_started(self.run_id, 0, self.host, "result", skill, {}))
        end = StepEnd(run_id=self.run_id, host=self.host, status="ok" if ok else "failed",
                      summary=self.engine.redactor.text(summary), attempts=1,
                      duration_ms=int(1000 * (time.monotonic() - self.started)), metrics=metrics)
        await store.call(lambda s: s.step_finished(sid, end))
        why = None if ok else self.engine.redactor.text(error or summary)
        await store.call(lambda s: s.finish_run(self.run_id, "succeeded" if ok else "failed", exit_code=0 if ok else 1,
                                                error=why))


async def run_point(engine: Engine, pb: Playbook, host: str, inputs: dict[str, Any], *, actor: str,
                    origin: str, observer: Observer | None = None, approver: Approver | None = None,
                    assume_yes: bool = False, channel: str | None = None,
                    parent_run_id: int | None = None) -> PointResult:
    given = dict(inputs)
    if "carry" in pb.inputs and "carry" not in given:
        given["carry"] = True    # each point changes only its own inputs: the running server's other flags stay
    req = RunRequest(pb, [host], given, actor=actor, origin=origin, assume_yes=assume_yes, channel=channel,
                     parent_run_id=parent_run_id)
    outcome = await engine.run(req, observer, approver)
    rid = outcome.run_id
    metrics = await engine.store.call(lambda s: s.metrics(rid))
    steps = await engine.store.call(lambda s: s.steps(rid))
    n = numbers(metrics, steps)
    return PointResult(rid, outcome.status, n["throughput"], n["ttft_ms"], n["accept"], n["spread"],
                       n["repeats"], outcome.error)

