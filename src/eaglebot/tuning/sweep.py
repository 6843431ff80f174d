"""`eagle sweep` / `/eagle sweep`: a grid of playbook inputs, each point relaunch + bench.

Combinations SGLang 0.5.23 would reject or silently rewrite (e.g. topk 1 with draft tokens
other than steps + 1) are reported and skipped before anything is launched. Every point is
one audited run; the sweep and its points are store rows, so `eagle sweep resume ID` runs
only the points that have not finished.
"""
from __future__ import annotations

import asyncio
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eaglebot.engine.playbook import Playbook, find_playbook
from eaglebot.engine.runner import Approver, Engine, Observer, RunRequest
from eaglebot.errors import UsageError
from eaglebot.sdk import Metric
from eaglebot.tuning.points import THROUGHPUT, ParentRun, run_point
from eaglebot.tuning.records import SweepSpec
from eaglebot.facts.sglang.release import resolve_speculative

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_POINTS = 64
REPEAT_INPUTS = ("bench_repeats", "repeats")   # the input a playbook takes benchmark repeats as


@dataclass
class SweepRequest:
    playbook: str
    host: str
    axes: dict[str, list[str]]
    fixed: dict[str, str] = field(default_factory=dict)
    repeats: int | None = None
    heatmap: tuple[str, str] | None = None


def parse_assignments(words: list[str]) -> tuple[dict[str, list[str]], dict[str, str], int | None]:
    """`key=v1,v2` words -> axes (2+ values), fixed inputs (1 value) and `repeats=N`."""
    axes: dict[str, list[str]] = {}
    fixed: dict[str, str] = {}
    repeats = None
    for w in words:
        if "=" not in w:
            raise UsageError(f"sweep values are key=v1,v2,... (got {w[:40]!r})")
        key, raw = w.split("=", 1)
        if not _KEY.match(key):
            raise UsageError(f"{key[:40]!r} is not an input name")
        if key in axes or key in fixed or (key == "repeats" and repeats is not None):
            raise UsageError(f"{key} is given twice")
        if key == "repeats":
            if not raw.isdigit() or not 1 <= int(raw) <= 20:
                raise UsageError(f"repeats must be a whole number from 1 to 20 (got {raw[:20]!r})")
            repeats = int(raw)
            continue
        values = [v.strip() for v in raw.split(",")]
        if any(v == "" for v in values):
            raise UsageError(f"{key}: empty value in {raw[:60]!r}")
        if len(set(values)) != len(values):
            raise UsageError(f"{key}: a value is listed twice in {raw[:60]!r}")
        if len(values) > 1:
            axes[key] = values
        else:
            fixed[key] = values[0]
    if not axes:
        raise UsageError("a sweep needs at least one input with two or more values, e.g. spec_steps=3,5,7")
    return axes, fixed, repeats


def grid(axes: dict[str, list[str]]) -> list[dict[str, str]]:
    keys = list(axes)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]


def sglang_verdict(inputs: dict[str, Any]) -> tuple[str, str]:
    """("pending", "") when SGLang 0.5.23 would run the point as asked; ("skipped", why) when it
    would refuse it or rewrite a setting (the point would measure something else)."""
    if not any(k in inputs for k in ("spec_steps", "spec_topk", "spec_draft_tokens")):
        return "pending", ""
    res = resolve_speculative(inputs.get("spec_algorithm") or "EAGLE3", inputs.get("spec_steps"),
                              inputs.get("spec_topk"), inputs.get("spec_draft_tokens"))
    if res.error:
        return "skipped", f"SGLang would refuse it ({res.error}: {res.error_reason})"
    if res.adjusted:
        what = ", ".join(f"{k} {a} → {e}" for k, (a, e) in res.adjusted.items())
        return "skipped", f"SGLang would rewrite it ({what}): it would measure another point"
    return "pending", ""


def repeats_input(pb: Playbook) -> str | None:
    return next((k for k in REPEAT_INPUTS if k in pb.inputs), None)


async def create(engine: Engine, req: SweepRequest, *, actor: str, origin: str) -> int:
    """Validate every point (typed inputs, SGLang's rules), then record the sweep. Bad input
    raises UsageError after an audit record of the refusal."""
    await engine.authorized([req.playbook], actor, origin, f"sweep {req.playbook} {req.host}")
    pb = find_playbook(req.playbook, engine.settings.playbooks_path, engine.registry)
    points = grid(req.axes)
    base_req = RunRequest(pb, [req.host], {**req.fixed}, actor=actor, origin=origin)
    try:
        if len(points) > MAX_POINTS:
            raise UsageError(f"the grid has {len(points)} points; the limit is {MAX_POINTS}")
        unknown = [k for k in [*req.axes, *req.fixed] if k not in pb.inputs]
        if unknown:
            raise UsageError(f"playbook {pb.name} has no input {unknown[0]!r} (inputs: {', '.join(pb.inputs)})")
        rep_key = repeats_input(pb)
        if req.repeats is not None and rep_key is None:
            raise UsageError(f"playbook {pb.name} takes no benchmark repeats (no input {' or '.join(REPEAT_INPUTS)})")
        rows: list[tuple[dict[str, Any], str, str]] = []
        for p in points:
            inputs: dict[str, Any] = {**req.fixed, **p}
            if req.repeats is not None and rep_key:
                inputs[rep_key] = str(req.repeats)
            prep = engine.prepare(RunRequest(pb, [req.host], inputs, actor=actor, origin=origin))
            status, why = sglang_verdict(prep.inputs)
            rows.append((inputs, status, why))
        if req.heatmap and any(a not in req.axes for a in req.heatmap):
            raise UsageError(f"--heatmap axes must be swept inputs ({', '.join(req.axes)})")
    except UsageError as e:
        await engine.record_rejected(base_req, e)
        raise
    spec = SweepSpec(axes=req.axes, order=list(req.axes), fixed=req.fixed, repeats=req.repeats,
                     heatmap=list(req.heatmap) if req.heatmap else None)
    return await engine.store.call(lambda s: s.create_sweep(kind="sweep", playbook=pb.name, host=req.host,
                                                            spec=dict(spec), actor=actor, origin=origin, points=rows))


async def run_points(engine: Engine, sweep_id: int, *, actor: str, origin: str, observer: Observer | None = None,
                  approver: Approver | None = None, assume_yes: bool = False, channel: str | None = None,
                  stop_after: int | None = None) -> dict[str, Any]:
    """Run every point that has not finished (a resume is the same call). `stop_after` ends
    early after that many points (what an interruption leaves behind)."""
    sweep = await engine.store.call(lambda s: s.get_sweep(sweep_id))
    if sweep is None or sweep.get("kind") != "sweep":
        raise UsageError(f"no sweep #{sweep_id}")
    await engine.authorized([sweep["playbook"]], actor, origin, f"sweep resume {sweep_id}")
    pb = find_playbook(sweep["playbook"], engine.settings.playbooks_path, engine.registry)
    points = await engine.store.call(lambda s: s.sweep_points(sweep_id))
    todo = [p for p in points if p["status"] in ("pending", "failed")]
    earlier = (sweep.get("result") or {}).get("final")
    if not todo and earlier:    # finished already: nothing runs, so no run row either
        return await summary(engine, sweep_id)
    parent = await ParentRun.open(engine, "sweep", sweep["host"], {"sweep_id": sweep_id, "playbook": pb.name},
                                  actor=actor, origin=origin, channel=channel)
    try:
        done = 0
        for p in todo:
            if stop_after is not None and done >= stop_after:
                await parent.close("sweep.result", False, f"sweep #{sweep_id} stopped after {done} points",
                                   error=f"stopped after {done} points (eagle sweep resume {sweep_id})")
                return await summary(engine, sweep_id)
            res = await run_point(engine, pb, sweep["host"], p["inputs"], actor=actor, origin=origin,
                                  observer=observer, approver=approver, assume_yes=assume_yes, channel=channel,
                                  parent_run_id=parent.run_id)
            ok = res.status == "succeeded" and res.throughput is not None
            await engine.store.call(lambda s: s.sweep_point_done(
                sweep_id, p["idx"], "done" if ok else "failed", res.run_id, dict(res.as_json()),
                "" if ok else (res.error or f"run {res.status}")))
            done += 1
        result = await summary(engine, sweep_id)
        final = await leave_on_best(
            engine, pb, result, actor=actor, origin=origin, observer=observer, approver=approver,
            assume_yes=assume_yes, channel=channel, parent_run_id=parent.run_id)
        outcome = {"best": result["best"], "final": final}
        await engine.store.call(lambda s: s.finish_sweep(sweep_id, "finished", outcome))
    except BaseException as e:
        why = str(e) or type(e).__name__
        if isinstance(e, asyncio.CancelledError):    # SIGINT/SIGTERM: put back what ran before the sweep
            why = "interrupted; " + await restore_before(
                engine, pb, sweep["host"], parent.run_id, actor=actor, origin=origin, observer=observer,
                approver=approver, assume_yes=assume_yes, channel=channel)
        await parent.close("sweep.result", False, f"sweep #{sweep_id} did not finish: {why}", error=why)
        raise
    best = result["best"]
    metrics = [Metric(THROUGHPUT, float(best["output_throughput"]), "tok/s", "higher")] \
        if best and best.get("output_throughput") is not None else None
    await parent.close("sweep.result", True, f"sweep #{sweep_id}: {final['state']}", metrics=metrics)
    return await summary(engine, sweep_id)


async def restore_before(engine: Engine, pb: Playbook, host: str, parent_run_id: int, *, actor: str, origin: str,
                         observer: Observer | None, approver: Approver | None, assume_yes: bool,
                         channel: str | None) -> str:
    """An interrupted sweep relaunches what ran before it: the inputs of the newest run of PLAYBOOK
    on the host that succeeded before the sweep's run and was no experiment's point (without its
    benchmark). Returns what it did, as a sentence."""
    rows = await engine.store.call(lambda s: s.history(playbook=pb.name, host=host, limit=50, status="succeeded",
                                                       top_level=True))
    prev = next((r for r in rows if r["id"] < parent_run_id), None)
    if prev is None:
        return f"no {pb.name} run on {host} before the sweep to restore: the host is as the last point left it"
    inputs = {k: v for k, v in (prev["inputs"] or {}).items() if k not in REPEAT_INPUTS}
    if "bench_prompts" in pb.inputs:
        inputs["bench_prompts"] = "0"
    res = await run_point(engine, pb, host, inputs, actor=actor, origin=origin, observer=observer, approver=approver,
                          assume_yes=assume_yes, channel=channel, parent_run_id=parent_run_id)
    return (f"the config that ran before (run #{prev['id']}'s inputs) was relaunched by run #{res.run_id}: "
            f"{res.status}")


async def leave_on_best(engine: Engine, pb: Playbook, result: dict[str, Any], *, actor: str, origin: str,
                        observer: Observer | None, approver: Approver | None, assume_yes: bool,
                        channel: str | None, parent_run_id: int | None = None) -> dict[str, Any]:
    """The host ends on the best point: when the last point run was another one, the best is
    relaunched (one more audited run, without its benchmark where the playbook can skip it).
    Returns where the host was left: {"run_id", "status", "on_best", "state"} (a sentence)."""
    host, best = result["host"], result["best"]
    runs = [p["run_id"] for p in (*result["ranked"], *result["failed"]) if p.get("run_id")]
    last = max(runs) if runs else None
    if best is None:
        return {"run_id": last, "status": None, "on_best": False,
                "state": f"no point was measured: host {host} is as its last run left it"
                         + (f" (run #{last})" if last else "")}
    words = " ".join(f"{a}={best['inputs'].get(a)}" for a in result["axes"])
    if best["run_id"] == last:
        return {"run_id": last, "status": "succeeded", "on_best": True,
                "state": f"host {host} left on the best point ({words}: run #{last}, the last one measured)"}
    inputs = {k: v for k, v in best["inputs"].items() if k not in REPEAT_INPUTS}
    if "bench_prompts" in pb.inputs:
        inputs["bench_prompts"] = "0"     # the point was measured already: only its configuration is wanted
    res = await run_point(engine, pb, host, inputs, actor=actor, origin=origin, observer=observer,
                          approver=approver, assume_yes=assume_yes, channel=channel, parent_run_id=parent_run_id)
    if res.status == "succeeded":
        return {"run_id": res.run_id, "status": res.status, "on_best": True,
                "state": f"host {host} left on the best point ({words}: relaunched by run #{res.run_id})"}
    return {"run_id": res.run_id, "status": res.status, "on_best": False,
            "state": f"host {host} is NOT on the best point: its relaunch (run #{res.run_id}) {res.status}"
                     f"{f': {res.error}' if res.error else ''}; the host is as that run left it"}


def pareto(points: list[dict[str, Any]]) -> list[int]:
    """Indexes (sweep point idx) on the throughput (higher) / TTFT (lower) Pareto front."""
    front = []
    for p in points:
        t, l = p["result"]["output_throughput"], p["result"]["median_ttft_ms"]
        if t is None or l is None:
            continue
        dominated = any(q is not p and q["result"]["output_throughput"] is not None
                        and q["result"]["median_ttft_ms"] is not None
                        and q["result"]["output_throughput"] >= t and q["result"]["median_ttft_ms"] <= l
                        and (q["result"]["output_throughput"] > t or q["result"]["median_ttft_ms"] < l)
                        for q in points)
        if not dominated:
            front.append(p["idx"])
    return front


async def summary(engine: Engine, sweep_id: int) -> dict[str, Any]:
    sweep = await engine.store.call(lambda s: s.get_sweep(sweep_id))
    if sweep is None:
        raise UsageError(f"no sweep #{sweep_id}")
    pts: list[dict[str, Any]] = [dict(p) for p in await engine.store.call(lambda s: s.sweep_points(sweep_id))]
    axes = list(sweep["spec"].get("order") or sweep["spec"]["axes"])
    done = [p for p in pts if p["status"] == "done"]
    ranked = sorted(done, key=lambda p: -(p["result"]["output_throughput"] or 0.0))
    simulated = False
    for p in done[:1]:
        for s in await engine.store.call(lambda s: s.steps(p["run_id"])):
            if s["skill"] == "server.launch" and "SIMULATED" in (s.get("summary") or ""):
                simulated = True
    best = ranked[0] if ranked else None
    return {"sweep_id": sweep_id, "playbook": sweep["playbook"], "host": sweep["host"], "status": sweep["status"],
            "axes": axes, "spec": sweep["spec"], "simulated": simulated,
            "ranked": [{"rank": i + 1, "idx": p["idx"], "inputs": {a: p["inputs"].get(a) for a in axes},
                        **p["result"]} for i, p in enumerate(ranked)],
            "skipped": [{"idx": p["idx"], "inputs": {a: p["inputs"].get(a) for a in axes}, "reason": p["reason"]}
                        for p in pts if p["status"] == "skipped"],
            "failed": [{"idx": p["idx"], "inputs": {a: p["inputs"].get(a) for a in axes}, "reason": p["reason"],
                        "run_id": p["run_id"]} for p in pts if p["status"] == "failed"],
            "pending": [p["idx"] for p in pts if p["status"] == "pending"],
            "pareto": pareto(done),
            "final": (sweep.get("result") or {}).get("final"),   # where the host was left (leave_on_best)
            "best": ({"inputs": best["inputs"], "run_id": best["run_id"],
                      "output_throughput": best["result"]["output_throughput"]} if best else None)}


def apply_best_command(result: dict[str, Any]) -> str | None:
    """The `/eagle` text that applies the winner: the sweep's playbook with its inputs."""
    best = result.get("best")
    if not best:
        return None
    pts = {p["idx"]: p for p in result["ranked"]}
    axes = result["axes"]
    fixed = {k: v for k, v in (result["spec"].get("fixed") or {}).items() if k not in REPEAT_INPUTS}
    winner = pts[result["ranked"][0]["idx"]]["inputs"]
    words = [f"{a}={winner[a]}" for a in axes] + [f"{k}={v}" for k, v in fixed.items()]
    return f"{result['playbook']} {result['host']} " + " ".join(words)


def heatmap_axes(result: dict[str, Any]) -> tuple[str, str] | None:
    chosen = result["spec"].get("heatmap")
    if chosen:
        return chosen[0], chosen[1]
    axes = [a for a in result["axes"] if len(result["spec"]["axes"][a]) > 1]
    return (axes[0], axes[1]) if len(axes) >= 2 else None


def plot_axes(result: dict[str, Any]) -> tuple[str, str | None] | None:
    """The plot's axes: the heatmap's two, else the one swept input (a line plot), else None
    (nothing was swept: one point)."""
    if (two := heatmap_axes(result)) is not None:
        return two
    swept = [a for a in result["axes"] if len(result["spec"]["axes"][a]) > 1]
    return (swept[0], None) if swept else None


def default_png(result: dict[str, Any], folder: Path | None = None) -> Path:
    return (folder or Path.cwd()) / f"sweep-{result['sweep_id']}.png"
