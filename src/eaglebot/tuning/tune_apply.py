"""Deploying a tuning's result, and putting the host back when it is not deployed.

`apply` asks an approval first (an `approvals` row either way, through the engine's own
`ask_approval`: a terminal, Slack's card, or `--yes`), then relaunches PLAYBOOK with the result;
`apply_past` does that for a finished tuning run (`eagle tune apply RUN`, the proposal's button).
`restore` relaunches the config that ran before the tuning when nothing was deployed: the tuning
had to relaunch the server to measure, and what it leaves running must be what was deployed."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

from eaglebot.engine.playbook import Playbook, find_playbook
from eaglebot.engine.runner import Approver, Engine, Observer, RunRequest
from eaglebot.errors import UsageError
from eaglebot.sdk import ApprovalRequest
from eaglebot.tuning.records import DeployJson
from eaglebot.tuning.tune_model import Measurement, label
from eaglebot.tuning.tune_record import TuneRecord
from eaglebot.tuning.tune_report import Deploy, choice_json


class Target(Protocol):
    """What apply and restore need of a tuning request: the playbook, the host, its fixed inputs."""

    playbook: str
    host: str
    fixed: dict[str, Any]

def _apply_details(deploy: Deploy, current: Measurement | None) -> list[str]:
    lines = []
    for b, v in sorted(deploy.expected.items()):
        was = f" (now {current.tok_s[b]:.1f})" if current and current.tok_s.get(b) else ""
        lines.append(f"batch size {b}: {v:.1f} tok/s measured{was}")
    if deploy.adaptive_config is not None:
        lines.append("adaptive config: " + json.dumps(deploy.adaptive_config, sort_keys=True)[:1500])
    return lines


async def apply(engine: Engine, rec: TuneRecord, pb: Playbook, req: Target, deploy: Deploy,
                current: Measurement | None, who: Who) -> dict[str, Any]:
    """Ask an approval (an `approvals` row either way), then relaunch PLAYBOOK with the result."""
    what = (f"relaunch {req.host} with {label(deploy.cell)}" if deploy.mode == "static" else
            f"relaunch {req.host} with adaptive speculative steps (starting at {label(deploy.cell)})")
    t0 = time.monotonic()
    ar = ApprovalRequest(rec.run_id, req.host, "apply", what, _apply_details(deploy, current), rec.idx)
    ok, by = await engine.ask_approval(ar, who.request(pb, req.host, {}), who.approver)
    if not ok:
        await rec.step("apply", "tune.apply", "failed", f"not approved ({by}): nothing was changed", started=t0)
        return {"ok": False, "why": f"not approved ({by})", "approved_by": None}
    inputs = {**req.fixed, **deploy.inputs()}
    if "carry" in pb.inputs and "carry" not in inputs:
        inputs["carry"] = True     # the choice changes the speculative cell; tp, memory and the rest stay
    out = await engine.run(who.request(pb, req.host, inputs), who.observer, who.approver)
    good = out.status == "succeeded"
    await rec.step("apply", "tune.apply", "changed" if good else "failed",
                   f"approved by {by}; {pb.name} run #{out.run_id} {out.status}: {what}", started=t0,
                   data={"run_id": out.run_id, "inputs": inputs, "approved_by": by})
    return {"ok": good, "approved_by": by, "run_id": out.run_id, "inputs": inputs,
            "why": None if good else (out.error or f"run #{out.run_id} {out.status}")}


async def apply_past(engine: Engine, run_id: int, *, actor: str, origin: str, observer: Observer | None = None,
                     approver: Approver | None = None, assume_yes: bool = False,
                     channel: str | None = None) -> dict[str, Any]:
    """`eagle tune apply RUN`: the deployable result of a finished tuning run, after an approval."""
    run = await engine.store.call(lambda s: s.get_run(run_id))
    tune_id = run["inputs"].get("tune_id") if run and run["playbook"] == "tune" else None
    sweep = await engine.store.call(lambda s: s.get_sweep(int(tune_id))) if isinstance(tune_id, int) else None
    if not isinstance(tune_id, int) or sweep is None or sweep.get("kind") != "tune":
        raise UsageError(f"run #{run_id} is not a tuning run (see eagle history --playbook tune)")
    await engine.authorized([sweep["playbook"]], actor, origin, f"tune apply {run_id}")
    result = sweep.get("result") or {}
    d: DeployJson | None = result.get("deploy")
    if not d:
        raise UsageError(f"tuning run #{run_id} found nothing to deploy")
    req = Past(sweep["playbook"], sweep["host"], dict(sweep["spec"].get("fixed") or {}))
    pb = find_playbook(req.playbook, engine.settings.playbooks_path, engine.registry)
    deploy = Deploy.from_json(d)
    rec = TuneRecord(engine, run_id, tune_id, req.host)
    rec.idx = len(await engine.store.call(lambda s: s.steps(run_id)))
    return await apply(engine, rec, pb, req, deploy, None, Who(actor, origin, observer, approver, assume_yes, channel,
                                                                     rec.run_id))


async def restore(engine: Engine, rec: TuneRecord, pb: Playbook, req: Target, current: Measurement,
                  who: Who) -> dict[str, Any]:
    """Relaunch what ran before: the last successful run of PLAYBOOK on the host before the tuning, when
    it launched the config the server was found running (its inputs keep the rest: capture layers,
    env, an adaptive config), else the cell found running with the tuning's own inputs."""
    t0 = time.monotonic()
    rows = await engine.store.call(lambda s: s.history(playbook=pb.name, host=req.host, limit=50, status="succeeded"))
    prev = next((r for r in rows if r["id"] < rec.run_id and _cell_of(r["inputs"]) == current.cell), None)
    inputs: dict[str, Any] = dict(prev["inputs"]) if prev else {**req.fixed, **choice_json(current.cell)}
    if "bench_prompts" in pb.inputs:
        inputs["bench_prompts"] = 0
    if "carry" in pb.inputs and "carry" not in inputs:
        inputs["carry"] = True
    out = await engine.run(who.request(pb, req.host, inputs), who.observer, who.approver)
    good = out.status == "succeeded"
    source = f"the inputs of run #{prev['id']}" if prev else "the tuning's inputs"
    await rec.step("restore", "tune.restore", "changed" if good else "failed",
                   f"relaunched the config found running, {label(current.cell)} ({source}): {pb.name} run "
                   f"#{out.run_id} {out.status}", started=t0, data={"run_id": out.run_id, "inputs": inputs})
    return {"ok": good, "run_id": out.run_id, "inputs": inputs}


def _cell_of(inputs: dict[str, Any] | None) -> tuple[int, int, int] | None:
    i = inputs or {}
    try:
        return int(i["spec_steps"]), int(i["spec_topk"]), int(i["spec_draft_tokens"])
    except (KeyError, TypeError, ValueError):
        return None


@dataclass
class Who:
    """Who asked, from where, and how they are reached (progress, approvals)."""

    actor: str
    origin: str
    observer: Observer | None = None
    approver: Approver | None = None
    assume_yes: bool = False
    channel: str | None = None
    parent_run_id: int | None = None     # the tuning run the relaunch belongs to

    def request(self, pb: Playbook, host: str, inputs: dict[str, Any]) -> RunRequest:
        return RunRequest(pb, [host], inputs, actor=self.actor, origin=self.origin, assume_yes=self.assume_yes,
                          channel=self.channel, parent_run_id=self.parent_run_id)


@dataclass
class Past:
    """The slice of a finished tuning's request that applying it needs."""

    playbook: str
    host: str
    fixed: dict[str, Any]
