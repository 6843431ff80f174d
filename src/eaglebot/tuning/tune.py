"""`eagle tune PLAYBOOK -H HOST --batch-sizes 1,8,32`: from a profile to a deployed, batch-size-aware
speculative config that does not flap.

Each cell (steps, topk, draft tokens) the search picks is one audited run of PLAYBOOK (a relaunch
with those inputs, its own benchmark off) and one of `tune-measure` (bench_serving at every batch
size, median and MAD over the repeats; the profile's launches also read the acceptance by draft
position). The running server is measured first, without a launch: the current config. The search
(`tune_search`) profiles, predicts every chain, verifies the best, and measures trees; the report
(`tune_report`) chooses per batch size and decides what to deploy: static flags, or SGLang's adaptive
steps (`tune_adaptive`) when they beat the best static config, which must then pass the flap test
(`tune-flap`: 1 -> 64 -> 4 by default) on a launch of its own. A new best that beats the current
config beyond the noise is a proposal; nothing is changed without an approval record (`--apply`
asks for one, then relaunches PLAYBOOK with the result; `eagle tune apply RUN` does it later).
"""
from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, cast

from eaglebot.engine.playbook import Playbook, find_playbook
from eaglebot.engine.runner import Approver, Engine, Observer, RunRequest
from eaglebot.errors import UsageError
from eaglebot.sdk import Metric
from eaglebot.tuning import tune_adaptive
from eaglebot.tuning.tune_apply import Who, apply, apply_past, restore
from eaglebot.tuning.records import BenchBatches, TuneSpec
from eaglebot.tuning.tune_model import Cell, Measurement, grid, label, valid
from eaglebot.tuning.tune_record import TuneRecord, measurement_json
from eaglebot.tuning.tune_report import Deploy, best_chains, efficiency, rel_noise, report, static_best
from eaglebot.tuning.tune_search import Plan, SearchResult, search

MEASURE, FLAP = "tune-measure", "tune-flap"
TUNED = ("spec_steps", "spec_topk", "spec_draft_tokens")
DEFAULT_STEPS, DEFAULT_TOPK, DEFAULT_DRAFT = list(range(1, 9)), [1, 2, 4, 8], [4, 8, 16, 32]
SPEC_MAX_RUNNING = 48   # SGLang's max_running_requests with speculative decoding when unset
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|min)?\s*$")


def parse_duration(text: str) -> float:
    """`90s`, `30m`, `2h`, or seconds."""
    m = _DURATION.match(text or "")
    if not m or float(m[1]) <= 0:
        raise UsageError(f"--budget expects a duration such as 30m, 2h or 900s (got {text[:40]!r})")
    return float(m[1]) * {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600}[m[2]]


def default_launches(cells: int, sizes: int) -> int:
    """A fifth of the grid, but never too few to profile (3), verify a chain per batch size and run
    the flap test; never more than the grid and the flap test."""
    return min(cells + 1, max(cells // 5, 3 + sizes + 1))


def parse_seconds(text: str, what: str, hi: float = 600.0) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 <= v <= hi:
        raise UsageError(f"{what} is seconds from 0 to {hi:g} (got {str(text)[:40]!r})")
    return v


def parse_ints(text: str, what: str, lo: int = 1, hi: int = 4096) -> list[int]:
    """`1,8,32`, or ranges `1-8` (also mixed: `1-4,8`)."""
    values: list[int] = []
    try:
        for part in (p for p in str(text).replace(" ", "").split(",") if p):
            a, sep, b = part.partition("-")
            values += list(range(int(a), int(b) + 1)) if sep and a else [int(part)]
    except ValueError:
        raise UsageError(f"{what} are whole numbers separated by commas or a range, e.g. 1,8,32 or 1-8 "
                         f"(got {str(text)[:40]!r})") from None
    if not values or any(not lo <= v <= hi for v in values):
        raise UsageError(f"{what} must be from {lo} to {hi} (got {str(text)[:40]!r})")
    if len(set(values)) != len(values):
        raise UsageError(f"{what}: a value is listed twice in {str(text)[:40]!r}")
    return sorted(values)


@dataclass
class TuneRequest:
    playbook: str
    host: str
    batch_sizes: list[int]
    budget_s: float | None = None
    repeats: int = 3
    apply: bool = False
    fixed: dict[str, str] = field(default_factory=dict)
    steps: list[int] = field(default_factory=lambda: list(DEFAULT_STEPS))
    topk: list[int] = field(default_factory=lambda: list(DEFAULT_TOPK))
    draft_tokens: list[int] = field(default_factory=lambda: list(DEFAULT_DRAFT))
    max_launches: int | None = None
    flap_trace: list[str] = field(default_factory=lambda: ["1:20", "64:20", "4:20"])
    flap_settle_s: float = 5.0
    num_prompts: int = 16
    input_len: int = 1024
    output_len: int = 256

    def spec(self) -> TuneSpec:
        return TuneSpec(playbook=self.playbook, host=self.host, batch_sizes=list(self.batch_sizes),
                        budget_s=self.budget_s, repeats=self.repeats, apply=self.apply, steps=list(self.steps),
                        topk=list(self.topk), draft_tokens=list(self.draft_tokens), max_launches=self.max_launches,
                        flap_trace=list(self.flap_trace), flap_settle_s=self.flap_settle_s,
                        num_prompts=self.num_prompts, input_len=self.input_len, output_len=self.output_len,
                        fixed=dict(self.fixed))


@dataclass
class Ctx:
    engine: Engine
    req: TuneRequest
    pb: Playbook
    rec: TuneRecord
    actor: str
    origin: str
    observer: Observer | None
    approver: Approver | None
    assume_yes: bool
    channel: str | None
    launches: int = 0
    simulated: bool = False


def check(engine: Engine, req: TuneRequest) -> tuple[Playbook, list[Cell]]:
    """Everything that can be refused before a launch; UsageError names what to change."""
    pb = find_playbook(req.playbook, engine.settings.playbooks_path, engine.registry)
    missing = [k for k in TUNED if k not in pb.inputs]
    if missing:
        raise UsageError(f"playbook {pb.name} has no input {missing[0]}: eagle tune sets spec_steps, spec_topk and "
                         f"spec_draft_tokens (e.g. eagle tune relaunch -H HOST --batch-sizes 1,8,32)")
    if tuned := [k for k in req.fixed if k in (*TUNED, "spec_adaptive")]:
        raise UsageError(f"{tuned[0]} is what eagle tune chooses; give the candidates with --steps, --topk, "
                         f"--draft-tokens instead")
    hosts = engine.settings.resolve_hosts([req.host])
    if len(hosts) != 1:
        raise UsageError(f"eagle tune tunes one host at a time; {req.host!r} names {len(hosts)}")
    if not 1 <= req.repeats <= 20:
        raise UsageError(f"--repeats must be from 1 to 20 (got {req.repeats})")
    if len(req.batch_sizes) > 16:
        raise UsageError(f"at most 16 batch sizes (got {len(req.batch_sizes)})")
    cells = grid(req.steps, req.topk, req.draft_tokens)
    if not any(c[1] == 1 for c in cells):
        raise UsageError("the candidates need topk 1 (the profile is a chain): add 1 to --topk")
    for c in cells:   # the playbook's own input limits, for every cell
        engine.prepare(RunRequest(pb, [req.host], {**req.fixed, **dict(zip(TUNED, map(str, c)))}))
    engine.prepare(RunRequest(find_playbook(MEASURE, None, engine.registry), [req.host], _measure_inputs(req, False)))
    return pb, cells


def _measure_inputs(req: TuneRequest, acceptance: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"batch_sizes": req.batch_sizes, "repeats": req.repeats, "num_prompts": req.num_prompts,
                           "input_len": req.input_len, "output_len": req.output_len, "acceptance": acceptance}
    if "port" in req.fixed:
        out["port"] = req.fixed["port"]
    return out


def _launch_inputs(c: Ctx, cell: Cell, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    pb, req = c.pb, c.req
    inputs: dict[str, Any] = {**req.fixed, **dict(zip(TUNED, cell)), **(extra or {})}
    if "bench_prompts" in pb.inputs and "bench_prompts" not in req.fixed:
        inputs["bench_prompts"] = 0          # tune-measure benchmarks it, at every batch size
    if "carry" in pb.inputs and "carry" not in req.fixed:
        inputs["carry"] = True               # the running server's tp, memory and extra flags: only the cell changes
    need = max([*req.batch_sizes, *(int(p.split(":")[0]) for p in req.flap_trace)])
    if need > SPEC_MAX_RUNNING and "extra_args" in pb.inputs:
        typed = c.engine.prepare(RunRequest(pb, [req.host], dict(req.fixed))).inputs
        args = list(typed.get("extra_args") or [])
        if "--max-running-requests" not in args:   # else SGLang caps a speculative batch at 48
            inputs["extra_args"] = [*args, "--max-running-requests", str(need)]
    return inputs


async def _run(c: Ctx, pb: Playbook | str, inputs: dict[str, Any]) -> tuple[int, str, list[dict[str, Any]]]:
    req = RunRequest(pb, [c.req.host], inputs, actor=c.actor, origin=c.origin, assume_yes=c.assume_yes,
                     channel=c.channel, parent_run_id=c.rec.run_id)
    out = await c.engine.run(req, c.observer, c.approver)
    steps = [dict(s) for s in await c.engine.store.call(lambda s: s.steps(out.run_id))]
    why = out.error or next((f"{s['name']}: {s['summary']}" for s in steps if s["status"] == "failed"), out.status)
    return out.run_id, ("" if out.status == "succeeded" else why), steps


def _data(steps: list[dict[str, Any]], skill: str) -> dict[str, Any]:
    for s in steps:
        if s["skill"] == skill and s.get("data"):
            d = s["data"]
            return json.loads(d) if isinstance(d, str) else dict(d)
    return {}


def _bench(steps: list[dict[str, Any]]) -> BenchBatches:
    """What the measuring run's `bench.batches` step registered."""
    return cast(BenchBatches, _data(steps, "bench.batches"))   # (its step's JSON, as src/eaglebot/skills/bench_batches.py writes it)


def _measurement(cell: Cell, data: BenchBatches, run_ids: list[int], seconds: float) -> Measurement:
    per = data.get("batch_sizes") or {}
    return Measurement(cell, {int(b): float(v["tok_s"]) for b, v in per.items()},
                       {int(b): [float(x) for x in v.get("samples") or []] for b, v in per.items()},
                       data.get("accept_length"), data.get("histogram") or None, list(data.get("request_means") or []),
                       run_ids, seconds)


async def _measure(c: Ctx, cell: Cell, phase: str) -> Measurement | str:
    t0 = time.monotonic()
    rid, why, launched = await _run(c, c.pb, _launch_inputs(c, cell))
    c.launches += 1
    c.simulated = c.simulated or any("SIMULATED" in (s.get("summary") or "") for s in launched
                                     if s["skill"] == "server.launch")
    if why:
        await c.rec.cell(None, cell, phase, rid, f"the launch failed (run #{rid}): {why}", t0)
        return f"the launch failed (run #{rid}): {why}"
    mid, why, steps = await _run(c, find_playbook(MEASURE, None, c.engine.registry), _measure_inputs(c.req, phase == "profile"))
    if why:
        await c.rec.cell(None, cell, phase, mid, f"the benchmark failed (run #{mid}): {why}", t0)
        return f"the benchmark failed (run #{mid}): {why}"
    m = _measurement(cell, _bench(steps), [rid, mid], time.monotonic() - t0)
    m.phase = phase
    await c.rec.cell(m, cell, phase, mid, started=t0)
    return m


async def _current(c: Ctx) -> Measurement | None:
    """The running server, measured as it is (no launch): the config to beat."""
    t0 = time.monotonic()
    mid, why, steps = await _run(c, find_playbook(MEASURE, None, c.engine.registry), _measure_inputs(c.req, False))
    data = _bench(steps)
    eff = data.get("effective") or {}
    steps_, topk, draft = (eff.get("speculative_num_steps"), eff.get("speculative_eagle_topk"),
                           eff.get("speculative_num_draft_tokens"))
    if why or not (isinstance(steps_, int) and isinstance(topk, int) and isinstance(draft, int)):
        note = (f"no running server measured (run #{mid}: {why})" if why else
                f"the running server is not speculative (run #{mid}): nothing to compare a cell with")
        await c.rec.step("current config", "tune.current", "skipped", note, started=t0)
        return None
    m = _measurement((steps_, topk, draft), data, [mid], time.monotonic() - t0)
    m.phase = "current"
    adaptive = " (adaptive steps)" if data.get("adaptive") else ""
    await c.rec.step("current config", "tune.current", "ok", f"current {label(m.cell)}{adaptive}: " + ", ".join(
        f"bs {b} {v:.1f}" for b, v in sorted(m.tok_s.items())) + f" tok/s (run #{mid})", data=measurement_json(m),
        started=t0)
    return m


def _adaptive_candidate(res: SearchResult, sizes: list[int], static: Measurement | None) -> tuple[Deploy | None, str]:
    if len(sizes) < 2 or res.chains is None:
        return None, "one batch size: static flags"
    tops = best_chains(res, sizes)
    if len({c[0] for c in tops.values()}) < 2:
        return None, "the same chain is best at every batch size: static flags"
    expected = {b: (res.measured[c].tok_s[b] if c in res.measured else res.predicted[c][b]) for b, c in tops.items()}
    eff_a = efficiency(res, sizes, expected)
    eff_s = efficiency(res, sizes, static.tok_s) if static else 0.0
    margin = max(0.01, 2 * rel_noise(res))
    if eff_a <= eff_s + margin:
        return None, (f"adaptive steps ({100 * eff_a:.1f}% of each batch size's best on average) do not beat the "
                      f"best static config ({100 * eff_s:.1f}%) by more than {100 * margin:.1f}%: static flags")
    depths = sorted({c[0] for c in res.predicted})
    plan = tune_adaptive.build(res.chains, {b: c[0] for b, c in tops.items()}, depths)
    for s in plan.slots:   # SGLang's own rule on drawn counts first: a slot that switches keeps one tier
        switched, _ = tune_adaptive.replay(plan, res.chains, s.batch)
        if switched and s.fallback is not None:
            s.fallback, s.why = None, f"one tier: {switched} switches in an offline replay"
            plan.config[str(s.key)]["candidate_steps"] = [s.top]
    cell = (plan.initial_steps, 1, plan.initial_steps + 1)
    return Deploy("adaptive", cell, plan.config, expected, f"adaptive steps {plan.summary()}: "
                  f"{100 * eff_a:.1f}% of each batch size's best on average, static {100 * eff_s:.1f}%",
                  slots={s.batch: s.key for s in plan.slots}), ""


async def _flap(c: Ctx, d: Deploy) -> str | None:
    """Launch the adaptive candidate and replay the trace; None when it holds, else why it was rejected."""
    t0 = time.monotonic()
    rid, why, _ = await _run(c, c.pb, _launch_inputs(c, d.cell, {"spec_adaptive": d.adaptive_config}))
    c.launches += 1
    if why:
        await c.rec.step("flap test", "tune.flap", "failed", f"the adaptive launch failed (run #{rid}): {why}", started=t0)
        return f"the adaptive launch failed (run #{rid}): {why}"
    inputs: dict[str, Any] = {"trace": c.req.flap_trace, "settle_s": c.req.flap_settle_s}
    if "port" in c.req.fixed:
        inputs["port"] = c.req.fixed["port"]
    fid, why, steps = await _run(c, find_playbook(FLAP, None, c.engine.registry), inputs)
    data = _data(steps, "bench.flap")
    status = "ok" if not why else "failed"
    await c.rec.step("flap test", "tune.flap", status, (f"adaptive candidate holds (run #{fid})" if not why else
                     f"rejected (run #{fid}): {why}"), data=data, started=t0)
    return f"the flap test rejected it (run #{fid}): {why}" if why else None


def _proposal(d: Deploy, current: Measurement | None, noise: float, run_id: int) -> dict[str, Any] | None:
    if current is None:
        return None
    gains = [d.expected[b] / current.tok_s[b] - 1 for b in d.expected if current.tok_s.get(b)]
    if not gains:
        return None
    gain, bar = statistics.fmean(gains), max(0.02, 3 * noise)
    same = d.mode == "static" and d.cell == current.cell
    return {"gain_pct": round(100 * gain, 2), "noise_pct": round(100 * noise, 2), "beats_current": gain > bar and not same,
            "apply": f"tune apply {run_id}"}


async def run_tuning(engine: Engine, req: TuneRequest, *, actor: str, origin: str, observer: Observer | None = None,
                     approver: Approver | None = None, assume_yes: bool = False, channel: str | None = None,
                     schedule: str | None = None) -> dict[str, Any]:
    """Tune, record, decide, and with `apply` relaunch after an approval. Bad input raises UsageError
    after an audit record of the refusal."""
    await engine.authorized([req.playbook, MEASURE, FLAP], actor, origin, f"tune {req.playbook} {req.host}")
    try:
        pb, cells = check(engine, req)
    except UsageError as e:
        await engine.record_rejected(RunRequest(req.playbook, [req.host], dict(req.fixed), actor=actor, origin=origin,
                                                text=f"tune {req.playbook} {req.host}"), e)
        raise
    t0 = time.monotonic()
    rec = await TuneRecord.open(engine, playbook=pb.name, host=req.host, spec=req.spec(), actor=actor, origin=origin,
                                channel=channel, schedule=schedule)
    c = Ctx(engine, req, pb, rec, actor, origin, observer, approver, assume_yes, channel)
    who = Who(actor, origin, observer, approver, assume_yes, channel, rec.run_id)
    current: Measurement | None = None
    try:
        current = await _current(c)
        return await _tune(c, cells, current, who, t0)
    except asyncio.CancelledError:   # SIGINT/SIGTERM (the CLI cancels it): put back what ran, then go
        await _interrupted(c, current, who)
        raise


async def _interrupted(c: Ctx, current: Measurement | None, who: Who) -> None:
    """An interrupted tuning relaunches the config found running (restore) and ends `cancelled`."""
    result: dict[str, Any] = {"interrupted": True}
    if current is not None:
        result["restored"] = await restore(c.engine, c.rec, c.pb, c.req, current, who)
    said = ("the config found running was relaunched" if (result.get("restored") or {}).get("ok") else
            "the config found running could not be relaunched" if current is not None else
            "no server was found running: nothing to restore")
    await c.rec.finish("cancelled", 130, result, f"interrupted: {said}")


async def _tune(c: Ctx, cells: list[Cell], current: Measurement | None, who: Who, t0: float) -> dict[str, Any]:
    engine, req, pb, rec = c.engine, c.req, c.pb, c.rec
    sizes = req.batch_sizes
    plan = Plan(sizes, cells, req.max_launches or default_launches(len(cells), len(sizes)), req.budget_s,
                reserve=1 if len(sizes) > 1 else 0, current=current)

    async def measure(cell: Cell, phase: str) -> Measurement | str:
        return await _measure(c, cell, phase)

    res = await search(plan, measure)
    static = static_best(res, sizes)
    deploy, why_static = _adaptive_candidate(res, sizes, static)
    rejected: list[str] = []
    if deploy is not None:
        if (reason := await _flap(c, deploy)) is not None:
            rejected.append(f"adaptive steps ({deploy.why}): {reason}")
            deploy = None
            why_static = "the adaptive candidate was rejected: static flags"
    if deploy is None and static is not None:
        deploy = Deploy("static", static.cell, None, dict(static.tok_s), f"{label(static.cell)}: {why_static}", rejected)
    result = report(res, sizes, deploy, current=current, grid_launches=len(cells), extra_launches=c.launches - res.launches)
    used = round(time.monotonic() - t0, 1)
    result.update(run_id=rec.run_id, tune_id=rec.tune_id, playbook=pb.name, host=req.host, simulated=c.simulated,
                  seconds=used, budget={"launches": c.launches, "max_launches": plan.max_launches,
                                        "seconds": used, "max_seconds": req.budget_s})
    result["proposal"] = _proposal(deploy, current, rel_noise(res), rec.run_id) if deploy else None
    metrics = [Metric(f"tune_tok_s_bs{b}", v["tok_s"], "tok/s", "higher") for b, v in
               ((int(k), e) for k, e in result["batch_sizes"].items()) if v.get("tok_s") is not None]
    ok = deploy is not None
    summary = (f"{deploy.mode}: {deploy.why}" if deploy else f"nothing measured: {res.stopped}") + \
        f"; {result['launches']} launches of {'an' if str(len(cells)).startswith('8') else 'a'} {len(cells)}-cell grid" + \
        (f"; caveat: {result['caveat']}" if result.get("caveat") else "")
    await rec.step("choose", "tune.choose", "ok" if ok else "failed", summary, data=result, metrics=metrics)
    status, code, error = ("succeeded", 0, None) if ok else ("failed", 1, res.stopped or "nothing was measured")
    if ok and req.apply and deploy is not None:
        applied = await apply(engine, rec, pb, req, deploy, current, who)
        result["applied"] = applied
        if not applied.get("ok"):
            status, code, error = "failed", 1, applied.get("why")
    if current is not None and not (result.get("applied") or {}).get("ok"):
        result["restored"] = await restore(engine, rec, pb, req, current, who)
    await rec.finish(status, code, result, error)
    result["status"] = status
    return result


__all__ = ["TuneRequest", "apply_past", "parse_duration", "parse_ints", "parse_seconds", "run_tuning", "valid"]
