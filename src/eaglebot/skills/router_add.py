"""Put this host's SGLang server (back) into its router, only when it is healthy: relaunch runs it
last (in `always`), after router.drain took the worker out.

`checks` are the statuses of the steps that vouch for the new server (relaunch passes its launch,
probe and benchmark): any `failed` leaves the worker out, and the step fails saying so. A launch
that did not run (the relaunch stopped before it: a drain that timed out, a refused approval)
puts back the server that still answers. Either way the server must answer GET /health 200 from
the host; then the worker is added and the router's own list is read back until it reports it
healthy (`add_timeout_s`; the router checks the worker itself before it routes to it).

```yaml
- skill: router.add
  with: {router: "http://10.0.0.5:30080", port: 30000, checks: {launch: changed, benchmark: ok}}
```
Registers `router`, `worker_url`, `added`, `healthy_workers`.
"""
from __future__ import annotations

import asyncio
import time

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.facts.host import ports
from eaglebot.sdk import Plan, SkillContext, StepResult
from eaglebot.skills.lib import router as rt
from eaglebot.skills.lib import server

NAME = "router.add"


class Params(rt.WorkerParams):
    checks: dict[str, str] = Field(default_factory=dict, description="name -> status of the steps that vouch for "
                                                                     "the server; any `failed` leaves it out")
    add_timeout_s: float = Field(120.0, gt=0, le=3600, description="how long the router may take to report it "
                                                                  "healthy")
    poll_s: float = Field(0.5, gt=0, le=60, description="seconds between reads of the router's worker list")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    r, py = params.router, params.python
    url = rt.worker_url(ctx, params.worker_url, params.bind, params.port)
    data = {"router": r, "worker_url": url, "added": False}
    failed = [name for name, status in params.checks.items() if status == "failed"]
    if failed:
        raise StepFailed(f"left {url} out of router {r}: the relaunch's {' and '.join(failed)} failed; the other "
                         f"workers serve. Relaunch again, or run router-add once it serves", data=data)
    base = f"http://{ports.probe_address(params.bind)}:{params.port}"
    warnings: list[str] = []
    try:
        if rt.find(await rt.workers(ctx, py, r), url) is not None:
            return StepResult.ok(f"{url} is in router {r} already", data=data)
    except StepFailed as e:     # the addition itself will say whether the router answers
        warnings.append(str(e))

    async def add() -> StepResult:
        # asked here, not while planning: a request writes the server's log, which a dry-run leaves as it is
        code, _ = await server.http_get(ctx, py, params.port, "/health", base=base)
        if code != 200:
            raise StepFailed(f"left {url} out of router {r}: the server on port {params.port} does not answer "
                             f"/health ({code or 'no answer'}); the other workers serve", data=data)
        await rt.add(ctx, py, r, url)
        deadline = time.monotonic() + params.add_timeout_s
        while True:
            ws = await rt.workers(ctx, py, r)
            me = rt.find(ws, url)
            if me is not None and me.healthy:
                healthy = sum(w.healthy for w in ws)
                return StepResult.changed(f"put {url} back in router {r} ({healthy} healthy worker(s))",
                                          data={**data, "added": True, "healthy_workers": healthy})
            if time.monotonic() > deadline:
                raise StepFailed(f"router {r} did not report {url} healthy within {params.add_timeout_s:g}s "
                                 f"({'listed, unhealthy' if me else 'not listed'}); the server answers /health "
                                 f"from {ctx.host_name}: can the router reach {url}?", data=data)
            await asyncio.sleep(params.poll_s)

    return await ctx.carry_out(Plan([f"check that {base}/health answers 200", f"add {url} to router {r}"],
                                    f"would put {url} back in router {r}", add, data=data, warnings=warnings))
