"""Write a note into the run's audit trail (and the Slack thread).

```yaml
always:
  - skill: audit.note
    with: {message: "relaunch finished on {{ host }}"}
```
"""
from __future__ import annotations

from pydantic import Field

from eaglebot.sdk import Plan, SkillContext, SkillParams, StepResult

NAME = "audit.note"
READ_ONLY = True  # writes only the audit trail, nothing on the host


class Params(SkillParams):
    message: str = Field("run finished", description="the note to record")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    async def note() -> StepResult:
        ctx.log(params.message)
        return StepResult.ok(params.message)

    return await ctx.carry_out(Plan([f"note {params.message!r}"], "no note", note))
