"""`eagle bisect GOOD BAD -H HOST`: which of the changes between two runs cost the metric.

The changes come from the two runs' fingerprints (config keys, launch arguments, env).
Each point applies a subset of them (BAD's values for the subset, GOOD's for the rest)
with the shipped `bisect-point` playbook (config.patch, relaunch with exactly those
arguments, benchmark with repeats): one audited run per point. Each point is judged by
which of GOOD's and BAD's recorded values it is closer to (Chromium Pinpoint's idea:
repeat to beat noise, compare with both ends).

Points: GOOD's configuration first (the control: if it no longer reproduces GOOD's value,
the host itself changed and bisection would blame the wrong thing), then a binary search
(ceil(log2 n)), then the suspect alone (its confirmation). So a single culprit among n
changes costs at most ceil(log2 n) + 2 benchmark points. When the suspect alone is fine
the drop needs it together with another change: that interaction is searched and reported
as such, never blamed on one change. Finally the host is relaunched in the state the user
chose (GOOD by default, or BAD) without a benchmark.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from eaglebot.engine.playbook import Playbook, find_playbook
from eaglebot.engine.runner import Approver, Engine, Observer
from eaglebot.errors import UsageError
from eaglebot.history.attribution import (config_changes, env_changes, health_changes, launch_changes, show,
                                          version_changes)
from eaglebot.history.host_state import host_state
from eaglebot.facts.sglang.cmdline import build_launch_args, launch_flags
from eaglebot.tuning.points import ParentRun, run_point
from eaglebot.tuning.records import BisectSpec

PLAYBOOK = "bisect-point"
METRIC = "output_throughput"
_NOT_APPLIED_FLAGS = ("--port", "--host")


@dataclass(frozen=True)
class Candidate:
    kind: str      # config | launch | env
    key: str
    good: object   # the value in GOOD's run (a JSON value: a config key, a flag, a variable)
    bad: object
    path: str = ""

    @property
    def label(self) -> str:
        prefix = {"launch": "launch ", "env": "env "}.get(self.kind, "")
        return f"{prefix}{self.key} {show(self.good)} → {show(self.bad)}"


def candidates(sg: dict[str, Any], sb: dict[str, Any]) -> tuple[list[Candidate], list[str]]:
    """The applicable changes from GOOD's state to BAD's, and the ones a relaunch cannot apply."""
    cands = [Candidate("config", c.key, c.before, c.after, c.path) for c in config_changes(sg, sb)]
    cands += [Candidate("launch", c.key, c.before, c.after) for c in launch_changes(sg, sb)
              if c.key not in _NOT_APPLIED_FLAGS]
    cands += [Candidate("env", c.key, c.before, c.after) for c in env_changes(sg, sb)]
    fixed = [c.text() for c in [*version_changes(sg, sb), *health_changes(sg, sb)]]
    return cands, fixed


def point_inputs(cands: list[Candidate], applied: set[int], sg: dict[str, Any], *, port: int, repeats: int,
                 num_prompts: int) -> dict[str, Any]:
    flags = dict(launch_flags(list(sg.get("launch_args") or [])))
    env = dict(sg.get("env") or {})
    config: dict[str, Any] = {}
    path = ""
    for i, c in enumerate(cands):
        value = c.bad if i in applied else c.good
        if c.kind == "launch":
            if value is None:
                flags.pop(c.key, None)
            elif isinstance(value, (str, bool, list)):   # what launch_flags gives: a value, values, a switch
                flags[c.key] = value
        elif c.kind == "env":
            if value is None:
                env.pop(c.key, None)
            else:
                env[c.key] = value
        else:
            path = c.path
            config[c.key] = value
    for f in _NOT_APPLIED_FLAGS:
        flags.pop(f, None)
    inputs: dict[str, Any] = {"args": build_launch_args(flags), "env": env, "port": port, "repeats": repeats,
                              "num_prompts": num_prompts}
    if config:
        inputs["config_path"] = path
        inputs["config_set"] = config
    return inputs


def bound(n: int) -> int:
    return math.ceil(math.log2(n)) + 2 if n > 1 else 2


Measure = Callable[[set[int]], Awaitable[tuple[float | None, str]]]


async def search(n: int, measure: Measure) -> tuple[list[int], str]:
    """Binary search over n changes with `measure(subset) -> (value, "good"|"bad")`.

    Returns (culprit indexes, kind): kind "single", "interaction" or "none" (the control
    point was already bad, or the full set is fine)."""
    cand = list(range(n))
    while len(cand) > 1:
        half = cand[:len(cand) // 2]
        _, verdict = await measure(set(half))
        cand = half if verdict == "bad" else cand[len(cand) // 2:]
    suspect = cand[0]
    _, alone = await measure({suspect})
    if alone == "bad":
        return [suspect], "single"
    # The suspect alone is fine, so no single change reproduces the drop: it needs two or
    # more together. Supersets of a bad set stay bad, so the smallest bad prefix of the
    # changes ends with a change every bad set needs; the smallest prefix that is bad
    # together with it ends with its partner.
    everything = set(range(n))
    if (await measure(everything))[1] != "bad":
        return [], "none"
    k = await _smallest_bad_prefix(list(range(n)), set(), measure)
    if k is None:
        return [], "none"
    partners = list(range(k))
    j = await _smallest_bad_prefix(partners, {k}, measure)
    if j is None:
        return [k], "single"
    if (await measure({k, j}))[1] == "bad":
        return sorted([j, k]), "interaction"
    return sorted([*partners[:partners.index(j) + 1], k]), "interaction"


async def _smallest_bad_prefix(items: list[int], base: set[int], measure: Measure) -> int | None:
    """The item ending the smallest prefix of `items` that is bad together with `base`."""
    if not items or (await measure(base | set(items)))[1] != "bad":
        return None
    lo, hi = 0, len(items) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if (await measure(base | set(items[:mid + 1])))[1] == "bad":
            hi = mid
        else:
            lo = mid + 1
    return items[lo]


@dataclass(frozen=True)
class BisectRequest:
    """What `eagle bisect` / `/eagle bisect` asks: the two runs, the host, and how to measure."""

    good: int
    bad: int
    host: str
    actor: str
    origin: str
    leave: str = "good"          # the configuration the host is relaunched in at the end
    repeats: int = 3
    num_prompts: int = 32
    port: int | None = None      # default: GOOD's launch port
    assume_yes: bool = False
    channel: str | None = None


@dataclass(frozen=True)
class Ends:
    """GOOD's and BAD's side of the bisection, read from the audit store."""

    good_state: dict[str, Any]
    good_value: float
    bad_value: float
    cands: list[Candidate]
    fixed: list[str]             # changes a relaunch cannot apply (versions, GPU health)
    port: int


async def load_ends(engine: Engine, req: BisectRequest) -> Ends:
    """The two runs' states, values and changes; UsageError when they cannot be bisected."""
    store = engine.store
    if req.leave not in ("good", "bad"):
        raise UsageError("--leave is good or bad")
    good, bad, host = req.good, req.bad, req.host
    runs = []
    for rid in (good, bad):
        run = await store.call(lambda s: s.get_run(rid))
        if run is None:
            raise UsageError(f"no run #{rid} (see `eagle history`)")
        runs.append(run)
    # it relaunches with the two runs' configurations: their playbooks' allowlists apply, and its own
    await engine.authorized([PLAYBOOK, *(r["playbook"] for r in runs)], req.actor, req.origin,
                            f"bisect {good} {bad} {host}")
    for rid, run in zip((good, bad), runs):
        if host not in (run.get("hosts") or []):
            raise UsageError(f"run #{rid} did not run on {host} (it ran on {', '.join(run.get('hosts') or []) or '-'})")
    sg = await store.call(lambda s: host_state(s, host, good))
    sb = await store.call(lambda s: host_state(s, host, bad))
    if sg.get("launch_args") is None:
        raise UsageError(f"run #{good} has no recorded launch on {host}: bisect needs launch arguments to relaunch with")
    gv, bv = await store.call(lambda s: (s.metric_value(good, METRIC), s.metric_value(bad, METRIC)))
    if gv is None or bv is None:
        raise UsageError(f"runs #{good} and #{bad} must both have measured {METRIC} on {host}")
    cands, fixed = candidates(sg, sb)
    if not cands:
        raise UsageError(f"nothing that a relaunch can apply differs between runs #{good} and #{bad} on {host}"
                         + (f" (only: {'; '.join(fixed)})" if fixed else ""))
    paths = {c.path for c in cands if c.kind == "config"}
    if len(paths) > 1:
        raise UsageError(f"the config changes span {len(paths)} files ({', '.join(sorted(paths))}); bisect patches one")
    flag = launch_flags(list(sg["launch_args"])).get("--port")
    port = req.port or (int(flag) if isinstance(flag, str) else 30000)
    return Ends(sg, gv, bv, cands, fixed, port)


@dataclass
class Bench:
    """Runs the bisection's points: one audited run each, recorded as a sweep point, cached
    by the subset applied. A point that fails stops the bisection (UsageError)."""

    engine: Engine
    req: BisectRequest
    ends: Ends
    playbook: Playbook
    bisect_id: int
    parent_run_id: int
    observer: Observer | None
    approver: Approver | None    # only the first point may ask (see measure)
    points: list[dict[str, Any]] = field(default_factory=list)
    cache: dict[frozenset[int], tuple[float | None, str]] = field(default_factory=dict)

    def judge(self, v: float | None) -> str:
        """Closer to BAD's value than to GOOD's: bad."""
        if v is None:
            return "failed"
        return "bad" if abs(v - self.ends.bad_value) < abs(v - self.ends.good_value) else "good"

    def inputs(self, applied: set[int], *, repeats: int, num_prompts: int) -> dict[str, Any]:
        return point_inputs(self.ends.cands, applied, self.ends.good_state, port=self.ends.port, repeats=repeats,
                            num_prompts=num_prompts)

    async def measure(self, subset: set[int]) -> tuple[float | None, str]:
        key = frozenset(subset)
        if key in self.cache:
            return self.cache[key]
        req, store = self.req, self.engine.store
        inputs = self.inputs(set(subset), repeats=req.repeats, num_prompts=req.num_prompts)
        # One approval at the start: only the first point may ask (it is the one that can
        # meet processes the bot did not start); every later server is the bot's own.
        res = await run_point(self.engine, self.playbook, req.host, inputs, actor=req.actor, origin=req.origin,
                              observer=self.observer, approver=self.approver,
                              assume_yes=req.assume_yes or bool(self.points), channel=req.channel,
                              parent_run_id=self.parent_run_id)
        self.approver = None
        verdict = self.judge(res.throughput) if res.status == "succeeded" else "failed"
        idx = await store.call(lambda s: s.add_sweep_point(self.bisect_id, inputs))
        doc = {**res.as_json(), "applied": sorted(subset), "verdict": verdict}
        await store.call(lambda s: s.sweep_point_done(self.bisect_id, idx, "done" if verdict != "failed" else "failed",
                                                      res.run_id, doc))
        self.points.append({"applied": [self.ends.cands[i].label for i in sorted(subset)], "value": res.throughput,
                            "verdict": verdict, "run_id": res.run_id})
        if verdict == "failed":
            raise UsageError(f"bisect point run #{res.run_id} {res.status}: {res.error or 'no throughput measured'}"
                             f" (bisect #{self.bisect_id} stopped)")
        self.cache[key] = (res.throughput, verdict)
        return self.cache[key]

    async def leave_host(self) -> tuple[int, str]:
        """Relaunch in the configuration asked for (no benchmark): (run id, its status)."""
        req = self.req
        final = set() if req.leave == "good" else set(range(len(self.ends.cands)))
        res = await run_point(self.engine, self.playbook, req.host, self.inputs(final, repeats=1, num_prompts=0),
                              actor=req.actor, origin=req.origin, observer=self.observer, assume_yes=True,
                              channel=req.channel, parent_run_id=self.parent_run_id)
        return res.run_id, res.status


async def locate(bench: Bench) -> tuple[list[int], str, str]:
    """(culprit indexes, kind, conclusion): the control point first, then the search."""
    req, n = bench.req, len(bench.ends.cands)
    _, control = await bench.measure(set())
    if control == "bad":
        return [], "none", (f"GOOD's configuration no longer reproduces run #{req.good}'s {METRIC} on {req.host}: "
                            f"the host itself changed (see the not bisectable changes and GPU health), "
                            f"nothing to blame")
    if n == 1:
        _, v = await bench.measure({0})
        culprits, kind = ([0], "single") if v == "bad" else ([], "none")
    else:
        culprits, kind = await search(n, bench.measure)
    return culprits, kind, conclusion(bench.ends.cands, culprits, kind, req.host)


def conclusion(cands: list[Candidate], culprits: list[int], kind: str, host: str) -> str:
    if kind == "single":
        return f"culprit: {cands[culprits[0]].label} (alone it reproduces the drop)"
    if kind == "interaction":
        return ("interaction: " + " together with ".join(cands[i].label for i in culprits) +
                " — each alone is fine; the drop needs them together")
    return f"no change reproduces the drop on {host} now (BAD's value may have been noise)"


async def bisect(engine: Engine, req: BisectRequest, *, observer: Observer | None = None,
                 approver: Approver | None = None) -> dict[str, Any]:
    """Bisect, audited as a sweep of kind "bisect"; the host is left in req.leave's state
    whatever happens. Returns the `--json` document."""
    store = engine.store
    ends = await load_ends(engine, req)
    cands = ends.cands
    pb = find_playbook(PLAYBOOK, engine.settings.playbooks_path, engine.registry)
    spec = BisectSpec(good=req.good, bad=req.bad, leave=req.leave, repeats=req.repeats,
                      changes=[c.label for c in cands], metric=METRIC)
    bid = await store.call(lambda s: s.create_sweep(kind="bisect", playbook=PLAYBOOK, host=req.host, spec=dict(spec),
                                                    actor=req.actor, origin=req.origin, points=[]))
    note = f"bisect #{bid} by {req.actor}: runs #{req.good} → #{req.bad} on {req.host}, {len(cands)} changes"
    await store.call(lambda s: s.add_event(None, "bisect", note))
    parent = await ParentRun.open(engine, "bisect", req.host, {"bisect_id": bid, "good": req.good, "bad": req.bad},
                                  actor=req.actor, origin=req.origin, channel=req.channel)
    bench = Bench(engine, req, ends, pb, bid, parent.run_id, observer, approver)
    try:
        try:
            culprits, kind, said = await locate(bench)
        finally:
            final_run, final_status = await bench.leave_host()
    except BaseException as e:
        await parent.close("bisect.result", False, f"bisect #{bid} did not finish: {e}", error=str(e))
        raise
    final_state = f"host {req.host} left in {req.leave.upper()}'s configuration (run #{final_run}: {final_status})"
    result = {"bisect_id": bid, "good": req.good, "bad": req.bad, "host": req.host, "metric": METRIC,
              "good_value": ends.good_value, "bad_value": ends.bad_value, "changes": [c.label for c in cands],
              "not_bisectable": ends.fixed, "points": bench.points, "benchmark_points": len(bench.points),
              "bound": bound(len(cands)), "culprits": [cands[i].label for i in culprits], "kind": kind,
              "conclusion": said, "final_state": final_state, "final_run": final_run}
    outcome = {k: result[k] for k in ("culprits", "kind", "conclusion")}
    await store.call(lambda s: s.finish_sweep(bid, "finished", outcome))
    await parent.close("bisect.result", True, f"bisect #{bid}: {said}; {final_state}")
    await store.call(lambda s: s.add_event(None, "bisect", f"bisect #{bid}: {said}"))
    return result
