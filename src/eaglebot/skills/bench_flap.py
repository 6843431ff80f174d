"""Does the running server's adaptive speculative steps flap? Replay a phase-changing load and count.

Each phase of `trace` ([concurrency, seconds], default 1 -> 64 -> 4) keeps that many requests
running (long generations, aborted at the phase's end); `/server_info`'s `speculative_num_steps`
is read every `poll_s`, and the server log's `Adaptive spec params updated` lines are counted
between the byte offsets the load recorded (a real SGLang 0.5.23 reports the launch's steps in
/server_info, not the tier in use: the log is its record). A switch after the phase's first
`settle_s` is a switch in a steady phase; more than one per 10 s (one at most in a shorter window)
is flapping, and the step fails naming the phase, the switches and the tiers it swung between.

```yaml
- skill: bench.flap
  with: {python: "{{ python }}", port: "{{ port }}", trace: ["1:20", "64:20", "4:20"], settle_s: 5}
```
Registers `phases` (concurrency, steady_s, switches, source, tiers, completed) and `flapping`; no
metrics (each flap test is of another candidate: not a history to judge).
"""
from __future__ import annotations

import json
import shlex

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, Plan, SkillContext, SkillParams, StepResult, path_for_shell

from eaglebot.facts.spec import probe
from eaglebot.skills.lib import server

NAME = "bench.flap"


class Params(SkillParams):
    python: str = Field("python3", description="the host's Python (host var `python`); it runs the load",
                        json_schema_extra=HOST_PATH)
    port: int = Field(30000, ge=1, le=65535, description="port of the running server")
    trace: list[str] = Field(default_factory=lambda: ["1:20", "64:20", "4:20"], min_length=1, max_length=12,
                             description="phases as CONCURRENCY:SECONDS, in order")
    settle_s: float = Field(5.0, ge=0, description="seconds at the start of each phase not counted (the switch "
                                                   "a new concurrency should cause happens there)")
    poll_s: float = Field(0.1, gt=0, le=5, description="seconds between /server_info reads")
    max_new_tokens: int = Field(4096, ge=1, description="tokens each request asks for (a long generation)")
    log_path: str | None = Field(None, description="the server's log (default: the last launch's on this host)",
                                 json_schema_extra=HOST_PATH)


async def _log_path(ctx: SkillContext, params: Params) -> str | None:
    if params.log_path:
        return params.log_path
    launched = await ctx.audit.last_step_data(ctx.host_name, "server.launch", "log_path") if ctx.audit else None
    return str(launched["log_path"]) if launched and launched.get("log_path") else None


async def run(ctx: SkillContext, params: Params) -> StepResult:
    trace: list[tuple[int, float]] = []
    for ph in params.trace:
        conc, _, secs = ph.partition(":")
        try:
            c, t = int(conc), float(secs)
        except ValueError:
            c, t = 0, 0.0
        if c < 1 or c > 4096 or t <= params.settle_s or t > 3600:
            raise StepFailed(f"each phase is CONCURRENCY:SECONDS (1-4096 requests, more seconds than settle_s "
                             f"{params.settle_s:g}); got {ph[:40]!r}", usage=True)
        trace.append((c, t))
    plan = " -> ".join(f"{c} for {s:g}s" for c, s in trace)
    return await ctx.carry_out(Plan([f"replay concurrency {plan} against port {params.port}"], "no load sent",
                                    lambda: _replay(ctx, params, trace, plan)))


async def _replay(ctx: SkillContext, params: Params, trace: list[tuple[int, float]], plan: str) -> StepResult:
    code, _ = await server.http_get(ctx, params.python, params.port, "/health")
    if code != 200:
        raise StepFailed(f"no ready server on port {params.port} (GET /health -> {code or 'no answer'})")
    log = await _log_path(ctx, params) or ""
    argv = [params.python, "-c", probe.FLAP_PY, str(params.port), json.dumps(trace), str(params.settle_s),
            str(params.poll_s), str(params.max_new_tokens), log]
    ctx.log(f"replaying concurrency {plan} (settle {params.settle_s:g}s); server log {log or 'unknown'}")
    total = sum(s for _, s in trace)
    res = await ctx.host.run(shlex.join(argv), timeout=total + 120)
    log_text = ""
    if log:
        got = await ctx.host.run(f"cat {path_for_shell(log)} 2>/dev/null; true", timeout=60)
        log_text = got.stdout
    try:
        phases = probe.flap_phases(res.stdout, params.settle_s, log_text)
    except ValueError as e:
        raise StepFailed(f"{e} (exit status {res.exit_status}): "
                         f"{(res.stderr.strip().splitlines() or ['no output'])[-1][:300]}") from None
    data = {"phases": [vars(p) for p in phases], "flapping": any(p.flaps for p in phases)}
    for p in phases:
        ctx.log(f"concurrency {p.concurrency}: {p.switches} switch(es) in {p.steady_s:g}s steady "
                f"(tiers {p.tiers or '?'}, from {p.source}), {p.completed} requests completed")
    bad = [p for p in phases if p.flaps]
    if bad:
        p = bad[0]
        raise StepFailed(f"flapping: {p.switches} tier switches in {p.steady_s:g}s of steady load at concurrency "
                         f"{p.concurrency} (between steps {', '.join(map(str, p.tiers)) or '?'}; more than once per "
                         f"10 s)", data=data)
    counts = ", ".join(f"{p.switches} at concurrency {p.concurrency}" for p in phases)
    return StepResult.ok(f"no flapping: tier switches in steady phases: {counts}", data=data)
