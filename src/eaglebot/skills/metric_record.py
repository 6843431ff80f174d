"""Record a metric computed elsewhere (a shell step, a script) with its direction.

Recorded metrics join the run's history: regression checks and trend plots use them
like the benchmark's own numbers.

```yaml
- skill: shell
  register: probe
  with: {command: "python measure.py --print-tok-s", changed: false}
- skill: metric.record
  with: {name: output_throughput, value: "{{ probe.stdout | trim | float }}", unit: tok/s, better: higher}
```
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from eaglebot.sdk import Metric, Plan, SkillContext, SkillParams, StepResult

NAME = "metric.record"


class Params(SkillParams):
    name: str = Field(min_length=1, description="metric name, e.g. output_throughput or median_ttft_ms")
    value: float = Field(description="the measured value")
    unit: str = Field("", description="unit shown with the value, e.g. tok/s or ms")
    better: Literal["higher", "lower"] = Field("higher", description="which direction is an improvement")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    shown = f"{params.name} = {params.value:g}{(' ' + params.unit) if params.unit else ''}"
    async def record() -> StepResult:
        return StepResult.ok(shown, metrics=[Metric(params.name, params.value, params.unit, params.better)])

    return await ctx.carry_out(Plan([f"record {shown}"], f"would record {shown}", record))
