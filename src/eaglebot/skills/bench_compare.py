"""Compare this run's benchmark numbers with fixed baselines.

Each baseline metric is judged with its direction (throughput: higher is better;
latency: lower is better): worse by more than `tolerance_pct` is a regression (the
run then exits 3), better by more than that is an improvement, anything else passes.
The numbers come from `metrics` or, when that is not given, from the registered
result named by `source`.

```yaml
- skill: bench.compare
  with: {metrics: "{{ bench.metrics }}", baseline: {output_throughput: 90, median_ttft_ms: 120},
         tolerance_pct: 5}
```
Registers `verdicts` (metric -> pass / regression / improvement / missing).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import Plan, Regression, SkillContext, SkillParams, StepResult

from eaglebot.facts.sglang import release

NAME = "bench.compare"


class Params(SkillParams):
    baseline: dict[str, float] = Field(description="reference value per metric, e.g. {output_throughput: 90}")
    metrics: dict[str, float] | None = Field(None, description="this run's numbers (default: from `source`)")
    source: str = Field("bench", description="registered result whose `metrics` to judge when `metrics` is not given")
    tolerance_pct: float = Field(5.0, ge=0, le=1000, description="allowed change in percent before flagging")
    better: dict[str, Literal["higher", "lower"]] = Field(default_factory=dict,
                                                           description="direction per metric, to override the defaults")


Verdict = Literal["pass", "regression", "improvement"]


def judge(name: str, value: float, reference: float, tolerance_pct: float,
          better: str) -> tuple[Verdict, float]:
    """('pass' | 'regression' | 'improvement', delta in percent of the reference)."""
    if reference == 0:
        delta = 0.0 if value == 0 else float("inf") if value > 0 else float("-inf")
    else:
        delta = (value - reference) / abs(reference) * 100.0
    gain = delta if better == "higher" else -delta
    if gain < -tolerance_pct:
        return "regression", delta
    if gain > tolerance_pct:
        return "improvement", delta
    return "pass", delta


async def run(ctx: SkillContext, params: Params) -> StepResult:
    return await ctx.carry_out(Plan(
        [f"compare {', '.join(params.baseline)} with the baseline (tolerance {params.tolerance_pct:g}%)"],
        "nothing was measured to compare", lambda: _compare(ctx, params)))


async def _compare(ctx: SkillContext, params: Params) -> StepResult:
    numbers: dict[str, Any] | None = params.metrics
    if numbers is None:
        reg = ctx.vars.get(params.source)
        numbers = reg.get("metrics") if isinstance(reg, dict) else None
        if numbers is None:
            raise StepFailed(f"no metrics to compare: pass `metrics` or register a benchmark step "
                             f"as {params.source!r}")
    regressions: list[Regression] = []
    verdicts: dict[str, str] = {}
    lines: list[str] = []
    warnings: list[str] = []
    for name, ref in params.baseline.items():
        value = numbers.get(name)
        if not isinstance(value, (int, float)):
            verdicts[name] = "missing"
            warnings.append(f"{name} was not measured; it has a baseline of {ref:g}")
            continue
        better = params.better.get(name) or release.metric_direction(name)
        verdict, delta = judge(name, float(value), float(ref), params.tolerance_pct, better)
        verdicts[name] = verdict
        unit = release.BENCH_METRICS.get(name, ("", ""))[0]
        line = (f"{name}: {float(value):.4g}{' ' + unit if unit else ''} vs baseline {ref:g} "
                f"({delta:+.1f}%, {better} is better, tolerance {params.tolerance_pct:g}%): {verdict}")
        lines.append(line)
        ctx.log(line)
        if verdict != "pass":
            regressions.append(Regression(metric=name, value=float(value), reference=float(ref),
                                          delta_pct=round(delta, 2), reason=line, kind=verdict))
    judged = [v for v in verdicts.values() if v != "missing"]
    if not judged:
        raise StepFailed("none of the baseline metrics were measured: "
                         + ", ".join(params.baseline), warnings=warnings)
    bad = [r for r in regressions if r.kind == "regression"]
    good = [r for r in regressions if r.kind == "improvement"]
    if bad:
        summary = "; ".join(f"{r.metric} {r.value:.4g} vs {r.reference:g} ({r.delta_pct:+.1f}%)" for r in bad)
        summary = f"{len(bad)} regression(s): {summary}"
    else:
        summary = f"{len(judged)} metric(s) within {params.tolerance_pct:g}% of the baseline"
        if good:
            summary += f", {len(good)} improved"
    return StepResult.ok(summary, regressions=regressions, warnings=warnings,
                         data={"verdicts": verdicts}, output="\n".join(lines))
