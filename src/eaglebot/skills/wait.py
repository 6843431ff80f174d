"""Pause the playbook for a while (cancellable).

```yaml
- skill: wait
  with: {seconds: 5}
```
"""
from __future__ import annotations

import asyncio

from pydantic import Field

from eaglebot.sdk import Plan, SkillContext, SkillParams, StepResult

NAME = "wait"


class Params(SkillParams):
    seconds: float = Field(ge=0, le=86400, description="how long to wait")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    async def wait() -> StepResult:
        await asyncio.sleep(params.seconds)
        return StepResult.ok(f"waited {params.seconds:g}s")

    return await ctx.carry_out(Plan([f"wait {params.seconds:g}s"], f"would wait {params.seconds:g}s", wait))
