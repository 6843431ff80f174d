"""One tuning point = one audited run of a playbook; its numbers read back from the store."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from eaglebot.engine.playbook import Playbook
from eaglebot.engine.runner import Approver, Engine, Observer, RunRequest

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

    def as_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "status": self.status, "output_throughput": self.throughput,
                "median_ttft_ms": self.ttft_ms, "accept_length": self.accept,
                "throughput_spread": self.spread, "repeats": self.repeats, "error": self.error}


def numbers(metrics: Sequence[Mapping[str, Any]], steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
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


async def run_point(engine: Engine, pb: Playbook, host: str, inputs: dict[str, Any], *, actor: str,
                    origin: str, observer: Observer | None = None, approver: Approver | None = None,
                    assume_yes: bool = False, channel: str | None = None) -> PointResult:
    given = dict(inputs)
    if "carry" in pb.inputs and "carry" not in given:
        given["carry"] = True    # each point changes only its own inputs: the running server's other flags stay
    req = RunRequest(pb, [host], given, actor=actor, origin=origin, assume_yes=assume_yes, channel=channel)
    outcome = await engine.run(req, observer, approver)
    rid = outcome.run_id
    metrics = await engine.store.metrics(rid)
    steps = await engine.store.steps(rid)
    n = numbers(metrics, steps)
    return PointResult(rid, outcome.status, n["throughput"], n["ttft_ms"], n["accept"], n["spread"],
                       n["repeats"], outcome.error)

