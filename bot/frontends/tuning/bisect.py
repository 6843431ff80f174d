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
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from eaglebot.engine.playbook import find_playbook
from eaglebot.engine.runner import Approver, Observer
from eaglebot.errors import UsageError
from eaglebot.frontends.services import Services
from eaglebot.frontends.tuning.points import PointResult, run_point
from eaglebot.history.attribution import (config_changes, env_changes, health_changes, launch_changes, show,
                                          version_changes)
from eaglebot.history.regress import host_state
from eaglebot.facts.sglang_args import build_launch_args, launch_flags

PLAYBOOK = "bisect-point"
METRIC = "output_throughput"
_NOT_APPLIED_FLAGS = ("--port", "--host")


@dataclass(frozen=True)
class Candidate:
    kind: str      # config | launch | env
    key: str
    good: Any
    bad: Any
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
            else:
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


async def bisect(services: Services, good: int, bad: int, host: str, *, actor: str, origin: str,
                 leave: str = "good", repeats: int = 3, num_prompts: int = 32, port: int | None = None,
                 observer: Observer | None = None, approver: Approver | None = None, assume_yes: bool = False,
                 channel: str | None = None) -> dict[str, Any]:
    store = services.store
    if leave not in ("good", "bad"):
        raise UsageError("--leave is good or bad")
    for rid in (good, bad):
        run = await store.get_run(rid)
        if run is None:
            raise UsageError(f"no run #{rid} (see `eagle history`)")
        if host not in (run.get("hosts") or []):
            raise UsageError(f"run #{rid} did not run on {host} (it ran on {', '.join(run.get('hosts') or []) or '-'})")
    sg = await store.call(lambda s: host_state(s, host, good))
    sb = await store.call(lambda s: host_state(s, host, bad))
    if sg.get("launch_args") is None:
        raise UsageError(f"run #{good} has no recorded launch on {host}: bisect needs launch arguments to relaunch with")
    gv, bv = await store.metric_value(good, METRIC), await store.metric_value(bad, METRIC)
    if gv is None or bv is None:
        raise UsageError(f"runs #{good} and #{bad} must both have measured {METRIC} on {host}")
    cands, fixed = candidates(sg, sb)
    if not cands:
        raise UsageError(f"nothing that a relaunch can apply differs between runs #{good} and #{bad} on {host}"
                         + (f" (only: {'; '.join(fixed)})" if fixed else ""))
    paths = {c.path for c in cands if c.kind == "config"}
    if len(paths) > 1:
        raise UsageError(f"the config changes span {len(paths)} files ({', '.join(sorted(paths))}); bisect patches one")
    pb = find_playbook(PLAYBOOK, services.settings.playbooks_path, services.registry)
    port = port or int((dict(launch_flags(list(sg["launch_args"]))).get("--port") or 30000))  # type: ignore[arg-type]
    spec = {"good": good, "bad": bad, "leave": leave, "repeats": repeats,
            "changes": [c.label for c in cands], "metric": METRIC}
    bid = await store.create_sweep(kind="bisect", playbook=PLAYBOOK, host=host, spec=spec, actor=actor,
                                   origin=origin, points=[])
    await store.add_event(None, "bisect", f"bisect #{bid} by {actor}: runs #{good} → #{bad} on {host}, "
                                          f"{len(cands)} changes")
    points: list[dict[str, Any]] = []
    cache: dict[frozenset[int], tuple[float | None, str]] = {}
    first = {"approver": approver}

    def judge(v: float | None) -> str:
        if v is None:
            return "failed"
        return "bad" if abs(v - bv) < abs(v - gv) else "good"

    async def measure(subset: set[int]) -> tuple[float | None, str]:
        key = frozenset(subset)
        if key in cache:
            return cache[key]
        inputs = point_inputs(cands, set(subset), sg, port=port, repeats=repeats, num_prompts=num_prompts)
        # One approval at the start: only the first point may ask (it is the one that can
        # meet processes the bot did not start); every later server is the bot's own.
        res: PointResult = await run_point(services, pb, host, inputs, actor=actor, origin=origin,
                                           observer=observer, approver=first["approver"],
                                           assume_yes=assume_yes or bool(points), channel=channel)
        first["approver"] = None
        verdict = judge(res.throughput) if res.status == "succeeded" else "failed"
        idx = await store.add_sweep_point(bid, inputs)
        await store.sweep_point_done(bid, idx, "done" if verdict != "failed" else "failed", res.run_id,
                                     {**res.as_json(), "applied": sorted(subset), "verdict": verdict})
        points.append({"applied": [cands[i].label for i in sorted(subset)], "value": res.throughput,
                       "verdict": verdict, "run_id": res.run_id})
        if verdict == "failed":
            raise UsageError(f"bisect point run #{res.run_id} {res.status}: {res.error or 'no throughput measured'}"
                             f" (bisect #{bid} stopped)")
        cache[key] = (res.throughput, verdict)
        return cache[key]

    culprits: list[int] = []
    kind = "none"
    try:
        _, control = await measure(set())
        if control == "bad":
            conclusion = (f"GOOD's configuration no longer reproduces run #{good}'s {METRIC} on {host}: the host "
                          f"itself changed (see the not bisectable changes and GPU health), nothing to blame")
        elif len(cands) == 1:
            _, v = await measure({0})
            culprits, kind = ([0], "single") if v == "bad" else ([], "none")
            conclusion = ""
        else:
            culprits, kind = await search(len(cands), measure)
            conclusion = ""
    finally:
        final = set() if leave == "good" else set(range(len(cands)))
        inputs = point_inputs(cands, final, sg, port=port, repeats=1, num_prompts=0)
        res = await run_point(services, pb, host, inputs, actor=actor, origin=origin, observer=observer,
                              assume_yes=True, channel=channel)
        final_state = (f"host {host} left in {leave.upper()}'s configuration (run #{res.run_id}: {res.status})")
    if not conclusion:
        if kind == "single":
            c = cands[culprits[0]]
            conclusion = f"culprit: {c.label} (alone it reproduces the drop)"
        elif kind == "interaction":
            conclusion = ("interaction: " + " together with ".join(cands[i].label for i in culprits) +
                          " — each alone is fine; the drop needs them together")
        else:
            conclusion = f"no change reproduces the drop on {host} now (BAD's value may have been noise)"
    result = {"bisect_id": bid, "good": good, "bad": bad, "host": host, "metric": METRIC, "good_value": gv,
              "bad_value": bv, "changes": [c.label for c in cands], "not_bisectable": fixed,
              "points": points, "benchmark_points": len(points), "bound": bound(len(cands)),
              "culprits": [cands[i].label for i in culprits], "kind": kind, "conclusion": conclusion,
              "final_state": final_state, "final_run": res.run_id}
    await store.finish_sweep(bid, "finished", {k: result[k] for k in ("culprits", "kind", "conclusion")})
    await store.add_event(None, "bisect", f"bisect #{bid}: {conclusion}")
    return result
