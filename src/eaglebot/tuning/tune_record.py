"""The tuning run in the audit trail: a run row of its own (playbook `tune`, no host lock: each
launch and benchmark is an audited run that locks the host itself) whose steps are the tuning's
phases, one per cell measured, so `eagle show RUN` lists every cell with its numbers and the runs
that measured it; and a `sweeps` row of kind `tune` (spec and result) with a point per cell."""
from __future__ import annotations

import time
from typing import Any, Mapping

from eaglebot.engine.runner import Engine
from eaglebot.engine.records import jsonable
from eaglebot.sdk import Metric
from eaglebot.store.rows import NewRun, StepEnd
from eaglebot.tuning.records import MeasurementJson, TuneSpec
from eaglebot.tuning.tune_model import Cell, Measurement, label


def measurement_json(m: Measurement) -> MeasurementJson:
    return {"cell": list(m.cell), "phase": m.phase, "tok_s": {str(b): round(v, 3) for b, v in m.tok_s.items()},
            "samples": {str(b): v for b, v in m.samples.items()}, "accept_length": m.accept_length,
            "histogram": m.histogram, "request_means": m.request_means, "run_ids": m.run_ids,
            "seconds": round(m.seconds, 2)}


def cell_summary(m: Measurement) -> str:
    parts = [f"bs {b} {v:.1f} ±{m.spread(b):.1f}" for b, v in sorted(m.tok_s.items())]
    acc = f", accept length {m.accept_length:.2f}" if m.accept_length else ""
    runs = ", ".join(f"#{r}" for r in m.run_ids)
    return f"{label(m.cell)}: {', '.join(parts)} tok/s{acc} (runs {runs})"


class TuneRecord:
    def __init__(self, engine: Engine, run_id: int, tune_id: int, host: str):
        self.engine, self.run_id, self.tune_id, self.host = engine, run_id, tune_id, host
        self.idx = 0

    @classmethod
    async def open(cls, engine: Engine, *, playbook: str, host: str, spec: TuneSpec, actor: str, origin: str,
                   channel: str | None, schedule: str | None) -> "TuneRecord":
        store = engine.store
        tune_id = await store.call(lambda s: s.create_sweep(kind="tune", playbook=playbook, host=host, spec=dict(spec),
                                                            actor=actor, origin=origin, points=[]))
        run = NewRun(playbook="tune", hosts=[host], inputs=engine.redactor.obj(jsonable({**spec, "tune_id": tune_id})),
                     variables={}, actor=actor, origin=origin, channel=channel, schedule=schedule)
        run_id = await store.call(lambda s: s.create_run(run))
        return cls(engine, run_id, tune_id, host)

    async def step(self, name: str, skill: str, status: str, summary: str, *, data: Mapping[str, object] | None = None,
                   metrics: list[Metric] | None = None, warnings: list[str] | None = None,
                   started: float | None = None) -> None:
        store, red = self.engine.store, self.engine.redactor
        t0 = started if started is not None else time.monotonic()
        idx = self.idx
        sid = await store.call(lambda s: s.step_started(self.run_id, idx, self.host, name, skill, {}))
        self.idx += 1
        end = StepEnd(run_id=self.run_id, host=self.host, status=status, summary=red.text(summary),
                      duration_ms=int(1000 * (time.monotonic() - t0)), attempts=1,
                      data=red.obj(jsonable(data)) if data is not None else None, metrics=metrics,
                      warnings=[red.text(w) for w in warnings or []])
        await store.call(lambda s: s.step_finished(sid, end))

    async def cell(self, m: Measurement | None, cell: Cell, phase: str, run_id: int | None, why: str = "",
                   started: float | None = None) -> None:
        inputs = {"spec_steps": cell[0], "spec_topk": cell[1], "spec_draft_tokens": cell[2], "phase": phase}
        idx = await self.engine.store.call(lambda s: s.add_sweep_point(self.tune_id, inputs))
        name = f"{phase} {label(cell)}"
        if m is None:
            await self.engine.store.call(lambda s: s.sweep_point_done(self.tune_id, idx, "failed", run_id, None, why))
            await self.step(name, "tune.cell", "failed", f"{label(cell)}: {why}", started=started)
            return
        doc = measurement_json(m)
        await self.engine.store.call(lambda s: s.sweep_point_done(self.tune_id, idx, "done", run_id, dict(doc)))
        await self.step(name, "tune.cell", "ok", cell_summary(m), data=doc, started=started)

    async def finish(self, status: str, exit_code: int, result: dict[str, Any] | None, error: str | None = None) -> None:
        await self.engine.store.call(lambda s: s.finish_sweep(
            self.tune_id, "finished" if status == "succeeded" else status, result))
        await self.engine.store.call(lambda s: s.finish_run(self.run_id, status, exit_code=exit_code, error=error))
