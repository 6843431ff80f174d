"""What a relaunch leaves on its port, said last: a failed relaunch after the stop must not leave
a team guessing whether anything serves.

Asks GET /health on the host. The step's sentence becomes the end of the run's last line (its
error): `no server is running on gpu-01:30000; `eagle rollback gpu-01` relaunches run #12's
server`, or that the previous server was relaunched and answers.

```yaml
- name: say what runs now
  skill: server.state
  when: stopped is defined and stopped.changed and (server is not defined or server.failed)
  with: {port: "{{ port }}", python: "{{ python }}", rolled_back: "{{ rolled_back is defined and rolled_back.changed }}",
         previous_run: "{{ previous.run_id | default(none) }}"}
```
Registers `serving` (bool), `previous_run` (the run whose launch `eagle rollback` relaunches, or null).
"""
from __future__ import annotations

from pydantic import Field

from eaglebot.sdk import HOST_PATH, SkillContext, SkillParams, StepResult

from eaglebot.skills.lib import carry, server

NAME = "server.state"
READ_ONLY = True


class Params(SkillParams):
    port: int = Field(30000, ge=1, le=65535, description="the server's port")
    python: str = Field("python3", description="the host's Python (for the HTTP request where curl is missing)",
                        json_schema_extra=HOST_PATH)
    rolled_back: bool = Field(False, description="a rollback ran in this run (the sentence says so)")
    previous_run: int | None = Field(None, description="the run whose launch the rollback relaunched")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    where = f"{ctx.host_name}:{params.port}"
    code, _ = await server.http_get(ctx, params.python, params.port, "/health")
    rec = await carry.last_launch(ctx, params.port)
    data = {"serving": code == 200, "previous_run": rec["run_id"] if rec else None}
    if code == 200:
        how = (f"the previous server (run #{params.previous_run}'s launch) was relaunched (on_failure: rollback) and"
               if params.rolled_back else "a server")
        final = f"{how} answers /health on {where}"
        return StepResult.ok(final, data=data, final=final)
    back = (f"`eagle rollback {ctx.host_name}` relaunches run #{rec['run_id']}'s server" if rec else
            "the audit trail has no earlier launch there to roll back to")
    final = f"no server is running on {where}; {back}"
    return StepResult.ok(final, data=data, final=final)
