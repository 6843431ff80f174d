"""Check that the EAGLE-3 draft will be fed the hidden states it was trained on, before anything is
stopped or launched (the draft-contract gate).

Reads the target's and the draft's config.json on the host and resolves which hidden states the
host's SGLang will hand the draft, in which order: the host's own SGLang source first (its model
file's `set_eagle3_layers_to_capture` run on a stand-in, its forward read: no torch, no GPU, well
under a second), else the table captured from the real wheel of its version (`sglang_version`).
With `aux_layers` it checks the config as that patch will leave it. The training side, in order:
`train_layers` (declared: the layer OUTPUTS training concatenated), the trainer's provenance next
to the draft (a SpecForge checkpoint folder beside it, `epoch_E_step_S/config.json`, keeps the
capture ids training used; its `<run_id>.best_meta.json` the training accuracy), else the audit
trail: what this draft's config made the server capture the first time the bot saw it, before any
patch the bot applied. Out-of-range, duplicate, ignored (top-level) ids, a draft for another target
and a launch that would crash are findings of their own.

Verdict `ok`, `mismatch` or `unknown` (a warning), with both lists in words and the training
side's source. `mismatch` fails the step as a refusal (a run whose failures are refusals exits 2)
unless `on_mismatch: allow`, which launches anyway with a warning.

```yaml
- name: check the draft's inputs
  skill: draft.check
  register: draft_check
  with:
    python: "{{ python }}"
    model: "{{ model }}"
    draft: "{{ draft }}"
    train_layers: [2, 30, 58]       # host var draft_train_layers
    aux_layers: "{{ aux_layers | default(none) }}"
    on_mismatch: refuse
```
Registers `verdict`, `summary`, `server_points`, `server_words`, `training_points`, `training_words`,
`training_source`, `findings` (kind, severity, message), `sglang_version`, `resolved_by`, `rule`,
`disk_points` (what the config on disk feeds, for later first sightings), `first_seen` (that
sighting, carried forward), `planned_ids`,
`draft_config`, `draft_identity`, `train_accuracy` (per position), `accuracy_source` and, on a mismatch,
`fix_ids` (the capture list that feeds the draft what training used: the `-e aux_layers=...` the
refusal names, or None).
"""
from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, SkillContext, SkillParams, StepResult

from eaglebot.facts.spec import draft_contract as dc
from eaglebot.facts.spec import eagle3
from eaglebot.skills.lib import draft as lib

NAME = "draft.check"
READ_ONLY = True  # reads two config files and the host's SGLang source


class Params(SkillParams):
    python: str = Field("python3", description="the host's Python that has sglang (host var `python`)",
                        json_schema_extra=HOST_PATH)
    model: str | None = Field(None, description="target model folder (host var `model`)", json_schema_extra=HOST_PATH)
    draft: str | None = Field(None, description="EAGLE-3 draft folder (host var `draft`)", json_schema_extra=HOST_PATH)
    train_layers: list[int] | None = Field(None, description="the layer OUTPUTS training concatenated, e.g. "
                                                             "[2, 30, 58]; -1 is the embedding "
                                                             "(host var draft_train_layers)")
    train_accuracy: float | None = Field(None, ge=0, le=1, description="the draft's training accuracy at the first "
                                                                      "position (host var draft_train_accuracy)")
    aux_layers: list[int] | None = Field(None, description="check the config as this patch of "
                                                           "eagle_config.eagle_aux_hidden_state_layer_ids will leave it")
    on_mismatch: Literal["refuse", "allow"] = Field("refuse", description="refuse: a mismatch fails the step "
                                                                         "(exit 2); allow: launch anyway, warned")
    spec_algorithm: str | None = Field(None, description="--speculative-algorithm of the launch: only EAGLE3 "
                                                         "captures aux hidden states (others: skipped)")
    gate: bool = Field(True, description="the check guards a stop or launch that follows it (a mismatch is "
                                         "refused before it); false: a check on its own (draft-check)")


async def _fix(ctx: SkillContext, python: str, target: eagle3.Target, draft_text: str,
               training: list[int] | None) -> list[int] | None:
    """The capture list that feeds the draft what training used and launches cleanly (draft-repair's
    candidates, resolved by the host's SGLang like the check itself), or None when none does."""
    if not training:
        return None
    cands: list[list[int] | None] = [ids for _, ids in dc.candidate_ids(training, None) if ids is not None]
    res, _ = await lib.resolve(ctx, python, target, cands)
    if res is None:
        return None
    for i, ids in enumerate(cands):
        f = dc.feed(res, i, target, eagle3.parse_draft(eagle3.with_ids(draft_text, ids)))
        if ids is not None and f.points is not None and not f.errors and sorted(f.points) == sorted(training):
            return ids
    return None


def _unknown(why: str, data: dict[str, Any]) -> StepResult:
    summary = f"unknown: {why}"
    data.update(verdict="unknown", summary=summary)
    return StepResult.ok(summary, data=data, warnings=[f"draft.check: {summary}"])


def _is_path(s: str | None) -> bool:
    return bool(s) and str(s).startswith(("/", "./", "../", "~"))


async def run(ctx: SkillContext, params: Params) -> StepResult:
    algo = (params.spec_algorithm or "EAGLE3").strip().upper()
    if algo != "EAGLE3":
        return StepResult.skipped(f"speculative algorithm {params.spec_algorithm}: no EAGLE-3 capture to check")
    if not params.draft:
        return StepResult.skipped("no draft model (host var draft): nothing to check")
    cfg_path = f"{params.draft.rstrip('/')}/config.json"
    data: dict[str, Any] = {"draft_config": cfg_path, "planned_ids": params.aux_layers}
    if not _is_path(params.model):
        return _unknown(f"the target {params.model or '(none)'} is not a folder on the host: its config "
                        f"cannot be read", data)
    target_text = await lib.read_text(ctx, f"{str(params.model).rstrip('/')}/config.json")
    draft_text = await lib.read_text(ctx, cfg_path)
    if target_text is None or draft_text is None:
        missing = "target's" if target_text is None else "draft's"
        return _unknown(f"the {missing} config.json cannot be read on {ctx.host_name}", data)
    try:
        target = eagle3.parse_target(target_text)
        on_disk = eagle3.parse_draft(draft_text)
        planned = eagle3.parse_draft(eagle3.with_ids(draft_text, params.aux_layers))
    except ValueError as e:
        return _unknown(str(e), data)
    data["draft_identity"] = ident = await lib.identity(ctx, params.draft)
    sighting = await lib.sighting(ctx, cfg_path, ident)
    prov = await lib.provenance(ctx, params.draft)
    cases: list[list[int] | None] = [on_disk.ids_sglang_reads(), planned.ids_sglang_reads()]
    prov_ids = dc.specforge_default(target.num_layers) if prov.ids_default else prov.ids
    cases.append(prov_ids)                                         # case 2: the provenance's ids
    if sighting is not None and sighting.points is None:
        cases.append(sighting.ids)                                 # case 3: a config.patch's `before`
    res, how = await lib.resolve(ctx, params.python, target, cases)
    data["resolved_by"] = how
    if res is None:
        return _unknown(how, data)
    disk_feed = dc.feed(res, 0, target, on_disk)
    feed = dc.feed(res, 1, target, planned)
    data.update(sglang_version=res.version, rule=res.method, disk_points=disk_feed.points)
    seen_points = None if sighting is None else sighting.points if sighting.points is not None else res.points(3)
    if sighting is not None and seen_points is not None:   # carried forward: later checks need not rescan
        data["first_seen"] = {"points": seen_points, "where": sighting.where}
    accuracy = ([params.train_accuracy], "declared") if params.train_accuracy is not None else \
        (prov.accuracy, f"provenance {prov.accuracy_file}") if prov.accuracy else (None, None)
    if params.train_layers is not None:
        training = dc.Training(sorted(params.train_layers), "declared", *accuracy)
    elif prov.ids_file is not None and res.points(2) is not None:
        training = dc.Training(res.points(2), f"provenance {prov.ids_file}", *accuracy)
    elif sighting is not None:
        training = dc.Training(seen_points, f"first seen in {sighting.where}", *accuracy)
    elif params.aux_layers is not None and disk_feed.points is not None and not disk_feed.errors:
        training = dc.Training(disk_feed.points, "first seen in this run, before its patch", *accuracy)
    else:
        training = dc.Training(None, "unknown", *accuracy)
    v = dc.judge(feed, training, first_sight=sighting is None)
    data.update(verdict=v.verdict, summary=v.summary, server_points=feed.points, server_words=feed.words(),
                training_points=training.points,
                training_words=dc.layer_words(training.points) if training.points is not None else None,
                training_source=training.source, train_accuracy=training.accuracy,
                accuracy_source=training.accuracy_source,
                findings=[{"kind": f.kind, "severity": f.severity, "message": f.message} for f in feed.findings])
    detail = "\n".join([f"resolved by: {how}", f"rule: {res.method} ({res.arch}, {target.num_layers} layers)",
                        *[f"forward: {e}" for e in res.forward.get("evidence", [])[:4]],
                        f"SGLang reads the capture ids as: {feed.ids if feed.ids is not None else 'its default'}; "
                        f"its list: {feed.raw}", f"server: {feed.words()}",
                        f"training: {data['training_words'] or 'unknown'} ({training.source})",
                        *[f"{f.severity}: {f.message}" for f in feed.findings]]) + "\n"
    for line in detail.splitlines():
        ctx.log(line)
    warnings = [f"draft.check: {f.message}" for f in feed.findings if f.severity == dc.WARNING]
    if v.verdict == "mismatch":
        if params.on_mismatch == "allow":
            summary = v.summary.replace("mismatch:", "mismatch (allowed by draft_mismatch=allow):", 1)
            data["summary"] = summary
            return StepResult.ok(summary, data=data, output=detail, warnings=[*warnings, f"draft.check: {summary}"])
        fix = await _fix(ctx, params.python, target, draft_text, training.points)
        data["fix_ids"] = fix
        how_to = (f"to fix it: -e aux_layers={json.dumps(fix, separators=(',', ':'))} (the capture list that feeds "
                  f"the draft {dc.layer_words(training.points or [])}), or run draft-repair to measure the "
                  f"candidates" if fix is not None else "to fix it: run draft-repair to measure the candidate "
                                                         "capture lists")
        allow = "goes on anyway" if params.gate else "reports it as a warning"
        refused = "; refused before anything was stopped or launched" if params.gate else ""
        raise StepFailed(f"{v.summary}{refused}; {how_to} (-e draft_mismatch=allow {allow})", data=data,
                         output=detail, warnings=warnings, usage=True)
    if v.verdict == "unknown":
        return StepResult.ok(v.summary, data=data, output=detail, warnings=[*warnings, f"draft.check: {v.summary}"])
    return StepResult.ok(v.summary, data=data, output=detail, warnings=warnings)
