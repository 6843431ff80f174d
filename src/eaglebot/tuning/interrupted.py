"""An experiment whose process was killed (SIGKILL, a lost machine) cannot restore anything
itself. A tuning (or a sweep) leaves the server on its last cell (point). The store's recovery
marks its run `interrupted`; the next run that changes that host (`Engine.pre_run_hooks`) first
relaunches the config the tuning found
running, as the tuning's own restore does (tune_apply.restore: a `restore` step on the tuning's
run, a relaunch whose parent is the tuning), and says so in its warnings. Once per tuning (an
event marks it before the relaunch, whose own start passes this hook). A host some other run
changed since is left as it is, and that is said too: what ran after the tuning is not undone.
A sweep is finished as its own interruption does (sweep.restore_before: what ran before it), a
bisection as its own end does (relaunched in the configuration it was to leave: GOOD's by default).

A `draft-repair` killed mid-attempts leaves the draft's config at an attempt's capture list
nobody approved, and the server running it: the same hook puts the file back byte for byte
(`revert-config`, the run's first backup) unless the run's own restore ran, then relaunches the
server on it (`relaunch`, carrying the running launch) unless the run's final launch ran."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from eaglebot.engine.playbook import find_playbook
from eaglebot.engine.runner import Engine, RunRequest
from eaglebot.errors import EagleError
from eaglebot.store.rows import RunRow

# The tuning modules each finisher uses are imported in it: every run passes this hook, and a
# run with no interrupted experiment on its hosts (nearly every run) needs none of them (~85 M
# instructions of a fresh `eagle run`: tests/test_startup_budget.py).

FINISHED = "experiment_finished"  # the event kind that says an interrupted experiment was taken care of
_LOOKBACK = 20               # the newest interrupted runs of each kind looked at


@dataclass
class _Target:
    playbook: str
    host: str
    fixed: dict[str, Any] = field(default_factory=dict)


async def finish_interrupted(engine: Engine, req: RunRequest, hosts: list[str]) -> list[str]:
    """The engine's pre-run hook: finish each interrupted experiment on `hosts`; what was done, said.
    Every run that locks a host pays three reads of the store (by playbook: the runs' index),
    whatever the number of hosts."""
    finish = {"tune": _finish_tune, "sweep": _finish_sweep, "draft-repair": _finish_repair, "bisect": _finish_bisect}
    wanted = set(hosts)
    runs = await engine.store.call(lambda s: [r for kind in finish
                                              for r in s.history(playbook=kind, status="interrupted", limit=_LOOKBACK)])
    found = [r for r in runs if wanted & set(r["hosts"])]
    if not found:
        return []
    found.sort(key=lambda r: -r["id"])
    done = {e["run_id"] for e in await engine.store.call(lambda s: s.events(FINISHED, limit=1000))}
    said: list[str] = []
    for run in reversed(found):                       # oldest first: a later one's restore is the newer state
        if run["id"] in done:
            continue
        host = run["hosts"][0]
        kind = run["playbook"]
        note = f"finishing interrupted {kind} run #{run['id']}"
        await engine.store.call(lambda s: s.add_event(run["id"], FINISHED, note))
        what = f"{kind} run #{run['id']} on {host} was interrupted (its process is gone)"
        since = [r["id"] for r in await engine.store.call(lambda s: s.history(host=host, limit=50))
                 if r["id"] > run["id"] and r["parent_run_id"] != run["id"]]
        msg = (f"{what}; run #{min(since)} changed {host} since, so it is left as that run left it" if since
               else await finish[kind](engine, req, run, host, what))
        await engine.store.call(lambda s: s.add_event(run["id"], FINISHED, msg))
        said.append(msg)
    return said


async def _finish_sweep(engine: Engine, req: RunRequest, run: RunRow, host: str, what: str) -> str:
    from eaglebot.tuning.sweep import restore_before

    spec = run["inputs"] or {}
    try:
        pb = find_playbook(str(spec.get("playbook")), engine.settings.playbooks_path, engine.registry)
        did = await restore_before(engine, pb, host, run["id"], actor=run["actor"] or req.actor, origin=req.origin,
                                   observer=None, approver=None, assume_yes=True, channel=None)
    except EagleError as e:
        return f"{what}; relaunching what ran before it was refused: {e}"
    return f"{what}: {did}"


async def _finish_bisect(engine: Engine, req: RunRequest, run: RunRow, host: str, what: str) -> str:
    """Relaunch the host in the configuration the bisection was to leave it in (GOOD's by default),
    as its own end does (`Bench.leave_host`: a `bisect-point` run of its own, no benchmark)."""
    from eaglebot.tuning.bisect import PLAYBOOK as BISECT_POINT, Bench, BisectRequest, load_ends

    spec = run["inputs"] or {}
    sweep = await engine.store.call(lambda s: s.get_sweep(int(spec.get("bisect_id") or 0)))
    leave = str((sweep["spec"] if sweep else {}).get("leave") or "good")
    breq = BisectRequest(int(spec.get("good") or 0), int(spec.get("bad") or 0), host, run["actor"] or req.actor,
                         req.origin, leave=leave, assume_yes=True)
    try:
        ends = await load_ends(engine, breq)
        pb = find_playbook(BISECT_POINT, engine.settings.playbooks_path, engine.registry)
        final, status = await Bench(engine, breq, ends, pb, int(spec.get("bisect_id") or 0), run["id"],
                                    None, None).leave_host()
    except EagleError as e:
        return f"{what}; relaunching it in {leave.upper()}'s configuration was refused: {e}"
    if status != "succeeded":
        return f"{what}; relaunching it in {leave.upper()}'s configuration failed (run #{final}: {status})"
    return f"{what}: {host} was relaunched in {leave.upper()}'s configuration first (run #{final})"


async def _finish_repair(engine: Engine, req: RunRequest, run: RunRow, host: str, what: str) -> str:
    rid = run["id"]
    steps = await engine.store.call(lambda s: s.steps(rid))
    patched = [s for s in steps if s["skill"] == "config.patch" and s["status"] == "changed"]
    reverted = any(s["skill"] == "config.revert" and s["status"] in ("ok", "changed") for s in steps)
    relaunched = any(s["skill"] in ("server.stop", "server.launch") and s["status"] not in ("skipped", "ok")
                     for s in steps)
    launched_last = any(s["name"] in ("final: launch", "restore: launch on the restored config")
                        and s["status"] == "changed" for s in steps)
    done: list[str] = []

    def child(playbook: str, inputs: dict[str, Any]) -> RunRequest:   # undoes the run's experiment: its actor's
        return RunRequest(playbook, [host], inputs, actor=run["actor"] or req.actor, origin=req.origin,
                          assume_yes=True, parent_run_id=rid)
    try:
        if patched and not reverted:
            path = json.loads(patched[0]["params"] or "{}").get("path")
            out = await engine.run(child("revert-config", {"path": path, "run": rid, "first": True}))
            if out.status != "succeeded":
                return f"{what}; restoring the draft's config failed (run #{out.run_id}: {out.error or out.status})"
            done.append(f"the draft's config was restored (run #{out.run_id})")
        if relaunched and not launched_last:
            # puts back what ran before the repair: judged as such (its acceptance is that config's), not refused
            out = await engine.run(child("relaunch", {"carry": True, "bench_prompts": 0, "spec_check": "warn"}))
            if out.status != "succeeded":
                return f"{what}; " + "".join(f"{d}, but " for d in done) + \
                    f"relaunching the server failed (run #{out.run_id}: {out.error or out.status})"
            done.append(f"the server was relaunched on it (run #{out.run_id})")
    except EagleError as e:
        return f"{what}; finishing it was refused: {e}"
    return f"{what}: " + (", and ".join(done) + " first" if done else "nothing of it was left to restore")


async def _finish_tune(engine: Engine, req: RunRequest, run: RunRow, host: str, what: str) -> str:
    from eaglebot.tuning.tune_apply import Who, restore
    from eaglebot.tuning.tune_model import Measurement, label
    from eaglebot.tuning.tune_record import TuneRecord

    rid = run["id"]
    steps = await engine.store.call(lambda s: s.steps(rid))
    found = next((s for s in steps if s["skill"] == "tune.current" and s["status"] == "ok" and s["data"]), None)
    if found is None:
        return f"{what}; it found no speculative server running, so there is nothing to restore"
    spec = run["inputs"] or {}
    c = json.loads(found["data"] or "{}")["cell"]
    current = Measurement((int(c[0]), int(c[1]), int(c[2])), {}, phase="current")
    target = _Target(str(spec.get("playbook")), host, dict(spec.get("fixed") or {}))
    try:
        pb = find_playbook(target.playbook, engine.settings.playbooks_path, engine.registry)
        rec = TuneRecord(engine, rid, int(spec.get("tune_id") or 0), host)
        rec.idx = len(steps)
        # The tuning's own actor: the relaunch undoes its experiment, as its restore would have.
        who = Who(run["actor"] or req.actor, req.origin, assume_yes=True, parent_run_id=rid)
        got = await restore(engine, rec, pb, target, current, who)
    except EagleError as e:
        return f"{what}; relaunching the config it found running ({label(current.cell)}) was refused: {e}"
    if got.get("ok"):
        return (f"{what} and left the server on an experimental config: the config it found running "
                f"({label(current.cell)}) was relaunched first (run #{got['run_id']})")
    return (f"{what}; relaunching the config it found running ({label(current.cell)}) failed (run #{got['run_id']}): "
            f"{host} is as that run left it")
