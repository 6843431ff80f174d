"""Take this host's SGLang server out of its router (`sglang-router`) and wait until the requests
it is still serving finish: relaunch runs it before it stops the server, so no client request is
dropped (router.add puts the worker back once the new server is healthy).

The worker is known to the router by `worker_url` (default `http://BIND:PORT`, or
`http://HOST:PORT` for a wildcard bind, HOST the inventory name). The router must keep another
healthy worker: while it has none (another host of the same rolling relaunch is out), the step
waits for one (`peer_timeout_s`), so hosts behind one router go out one at a time and the last
healthy worker is never removed; still none: the step fails, nothing removed. The worker's
in-flight requests are its own count (SGLang's /get_load, else /metrics; a server that does not
answer has none), polled until two reads in a row say 0; still busy after `drain_timeout_s`: the
step fails (the worker stays out; the relaunch stops before anything else, and its router.add puts
the still-serving server back). A worker the router does not list is `ok`, nothing to drain (and
router.add adds it once the relaunch is healthy).

```yaml
- skill: router.drain
  register: router_drain
  with: {router: "http://10.0.0.5:30080", port: 30000, drain_timeout_s: 300}
```
Registers `router`, `worker_url`, `drained` (the worker is out of the router, or was never in),
`removed`, `in_flight` (when it was removed), `drain_s`.
"""
from __future__ import annotations

import asyncio
import time

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.facts.host import ports
from eaglebot.sdk import Plan, SkillContext, StepResult
from eaglebot.skills.lib import router as rt

NAME = "router.drain"
# Only one check-then-remove at a time per router in this process: two hosts of one batch never
# both see the other as the healthy worker that remains.
_LOCKS: dict[str, asyncio.Lock] = {}


class Params(rt.WorkerParams):
    drain_timeout_s: float = Field(300.0, gt=0, le=86400, description="how long the server's in-flight requests "
                                                                     "may take to finish")
    peer_timeout_s: float = Field(2400.0, ge=0, le=86400, description="how long to wait for another healthy worker "
                                                                     "in the router before taking this one out")
    poll_s: float = Field(0.5, gt=0, le=60, description="seconds between reads of the router and the server")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    r, py = params.router, params.python
    url = rt.worker_url(ctx, params.worker_url, params.bind, params.port)
    data = {"router": r, "worker_url": url}
    ws = await rt.workers(ctx, py, r)
    if rt.find(ws, url) is None:
        names = ", ".join(w.url for w in ws) or "none"
        return StepResult.ok(f"{url} is not in router {r} (its workers: {names}): nothing to drain",
                             data={**data, "drained": True, "removed": False})
    base = f"http://{ports.probe_address(params.bind)}:{params.port}"

    async def drain() -> StepResult:
        me, others = await _take_out(ctx, params, url)
        ctx.log(f"removed {url} from router {r}; {len(others)} other healthy worker(s): "
                f"{', '.join(w.url for w in others)}")
        t0 = time.monotonic()
        first, zeros, n = None, 0, None
        while zeros < 2:
            n = await rt.in_flight(ctx, py, base)
            if n is None:
                raise StepFailed(f"{base} says neither /get_load nor /metrics: its in-flight requests cannot be "
                                 f"counted (an SGLang without /get_load: launch it with --enable-metrics); "
                                 f"nothing was stopped",
                                 data={**data, "drained": True, "removed": True})
            first = n if first is None else first
            zeros = zeros + 1 if n == 0 else 0
            if zeros < 2:
                if time.monotonic() - t0 > params.drain_timeout_s:
                    raise StepFailed(f"{url} still had {n} request(s) in flight {params.drain_timeout_s:g}s after "
                                     f"it left router {r} (drain_timeout_s); nothing was stopped",
                                     data={**data, "drained": True, "removed": True, "in_flight": n})
                await asyncio.sleep(params.poll_s)
        drain_s = round(time.monotonic() - t0, 2)
        return StepResult.changed(f"took {url} out of router {r} ({len(others)} other healthy worker(s) serve); "
                                  f"its {first} in-flight request(s) finished in {drain_s:g}s",
                                  data={**data, "drained": True, "removed": True, "in_flight": first,
                                        "drain_s": drain_s})

    return await ctx.carry_out(Plan(
        [f"remove {url} from router {r} (once another of its workers is healthy)",
         f"wait until {base} has no request in flight (at most {params.drain_timeout_s:g}s)"],
        f"would take {url} out of router {r}", drain, data={**data, "drained": True, "removed": False}))


async def _take_out(ctx: SkillContext, params: Params, url: str) -> tuple[rt.Worker, list[rt.Worker]]:
    """Remove the worker once another healthy one remains (waiting up to peer_timeout_s for one);
    read back until the router no longer lists it."""
    r, py = params.router, params.python
    lock = _LOCKS.setdefault(r, asyncio.Lock())
    deadline = time.monotonic() + params.peer_timeout_s
    said = False
    while True:
        async with lock:
            ws = await rt.workers(ctx, py, r)
            me = rt.find(ws, url)
            others = [w for w in ws if w is not me and w.healthy]
            if me is not None and others:
                await rt.remove(ctx, py, r, me)
                # read back under the lock: the router removes in the background (202), and until it
                # lists the worker no more, another host's drain here would count it as healthy
                removed_by = time.monotonic() + 60
                while rt.find(await rt.workers(ctx, py, r), url) is not None:
                    if time.monotonic() > removed_by:
                        raise StepFailed(f"router {r} accepted the removal of {url} but still lists it after 60s")
                    await asyncio.sleep(min(params.poll_s, 0.2))
                return me, others
        if me is None:
            raise StepFailed(f"{url} left router {r} while this step waited (someone else removed it)")
        if time.monotonic() > deadline:
            raise StepFailed(f"router {r} has no other healthy worker: taking {url} out would leave it none; "
                             f"waited {params.peer_timeout_s:g}s (peer_timeout_s) for one; nothing was removed "
                             f"or stopped", data={"router": r, "worker_url": url, "drained": False})
        if not said:
            ctx.log(f"router {r} has no other healthy worker now: waiting for one before taking {url} out")
            said = True
        await asyncio.sleep(params.poll_s)
