"""Plan and judge the draft-repair playbook's attempts: capture lists tried as relaunches.

`action: plan` (after draft.check) resolves the candidate capture lists with the host's SGLang
(the training layers under each convention and shifted by one, the current list shifted by one,
SGLang's default), keeps those that feed the draft something new and launch cleanly, at most
`max_attempts`, and asks for approval before any relaunch (`confirm: true`): denied, nothing is
touched (a dry-run probes the same and registers the attempts, asking nobody, so the playbook's
later steps plan each one). `action: choose` compares every attempt's acceptance and tok/s
(draft.probe's data) with the current config's, names the best, and asks for approval to keep it;
without that approval the playbook restores the draft's config byte for byte (`config.revert` of
this run's first backup).

```yaml
- skill: draft.repair
  confirm: true
  register: plan
  with: {action: plan, python: "{{ python }}", model: "{{ model }}", draft: "{{ draft }}", check: "{{ check }}"}
```
`plan` registers `attempts` (label, ids, set, delete, points, words), `count` and `current`; `choose`
registers `apply` (keep the best), `best` (its attempt), `set`, `delete`, `table` (one line per attempt) and,
when kept, `serving` (the best is the last attempt, whose server still runs: no final relaunch).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, Approval, Plan, SkillContext, SkillParams, StepResult

from eaglebot.facts.spec import draft_contract as dc
from eaglebot.facts.spec import eagle3
from eaglebot.skills.lib import draft as lib

NAME = "draft.repair"


class Params(SkillParams):
    action: Literal["plan", "choose"] = Field(description="plan: the attempts (asks before relaunching); "
                                                          "choose: the best attempt (asks before keeping it)")
    python: str = Field("python3", description="the host's Python that has sglang", json_schema_extra=HOST_PATH)
    model: str | None = Field(None, description="target model folder", json_schema_extra=HOST_PATH)
    draft: str | None = Field(None, description="EAGLE-3 draft folder", json_schema_extra=HOST_PATH)
    check: dict[str, Any] | None = Field(None, description="draft.check's registered data")
    max_attempts: int = Field(4, ge=1, le=4, description="capture lists tried at most (each is a relaunch)")
    plan: dict[str, Any] | None = Field(None, description="choose: the plan step's registered data")
    current: dict[str, Any] | None = Field(None, description="choose: draft.probe's data on the current config")
    attempts: list[dict[str, Any]] = Field(default_factory=list, description="choose: draft.probe's data per attempt")
    min_gain_pct: float = Field(5.0, ge=0, description="choose: keep an attempt only if its accept length beats "
                                                       "the current config's by this much")


def _patch(ids: list[int] | None) -> tuple[dict[str, Any], list[str]]:
    return ({eagle3.NESTED_KEY: ids}, []) if ids is not None else ({}, [eagle3.NESTED_KEY])


async def _plan(ctx: SkillContext, p: Params) -> StepResult:
    check = p.check or {}
    if not p.model or not p.draft:
        raise StepFailed("draft-repair needs the target and the draft folders (host vars model and draft)")
    target_text = await lib.read_text(ctx, f"{p.model.rstrip('/')}/config.json")
    draft_text = await lib.read_text(ctx, f"{p.draft.rstrip('/')}/config.json")
    if target_text is None or draft_text is None:
        raise StepFailed(f"the target's or the draft's config.json cannot be read on {ctx.host_name}")
    target, draft = eagle3.parse_target(target_text), eagle3.parse_draft(draft_text)
    current_ids = draft.ids_sglang_reads()
    cands = dc.candidate_ids(check.get("training_points"), current_ids)
    res, how = await lib.resolve(ctx, p.python, target, [current_ids, *[ids for _, ids in cands]])
    if res is None:
        raise StepFailed(f"the candidates cannot be resolved: {how}")
    now = dc.feed(res, 0, target, draft)
    seen = [now.points]
    attempts: list[dict[str, Any]] = []
    for i, (label, ids) in enumerate(cands, start=1):
        text = eagle3.with_ids(draft_text, ids) if ids is not None else eagle3.without_ids(draft_text)
        f = dc.feed(res, i, target, eagle3.parse_draft(text))
        if f.points is None or f.errors or f.points in seen:
            continue  # it launches nothing new, or does not launch
        seen.append(f.points)
        set_, delete = _patch(ids)
        attempts.append({"label": label, "ids": ids, "set": set_, "delete": delete, "points": f.points,
                         "words": f.words()})
        if len(attempts) == p.max_attempts:
            break
    data = {"attempts": attempts, "count": len(attempts), "current": {"ids": current_ids, "points": now.points,
                                                                      "words": now.words()}, "resolved_by": how}
    if not attempts:
        return StepResult.ok("nothing to try: every candidate capture list feeds the draft what it gets now "
                             "or would not launch", data=data)
    lines = [f"{i}. {a['words']} (ids {a['ids'] if a['ids'] is not None else 'removed'}: {a['label']})"
             for i, a in enumerate(attempts, start=1)]
    approval = Approval(f"relaunch SGLang on {ctx.host_name} {len(attempts) + 1} times to try "
                        f"{len(attempts)} capture lists (the draft's config is restored unless the best "
                        f"is approved)", lines,
                        refused=lambda who: StepFailed(f"the attempts were not approved ({who}); nothing was changed"))

    async def go() -> StepResult:
        for line in lines:
            ctx.log(line)
        return StepResult.ok(f"{len(attempts)} capture lists to try (approved by {approval.by}); now the server "
                             f"feeds the draft {now.words()}", data=data)

    # A dry-run registers the attempts too, so the playbook's later steps show what each would change.
    return await ctx.carry_out(Plan([f"try capture list {line}" for line in lines],
                                    f"would try {len(attempts)} capture lists ({len(attempts) + 1} relaunches); "
                                    f"now the server feeds the draft {now.words()}", go, approve=approval, data=data))


def _score(d: dict[str, Any]) -> tuple[float, float]:
    return float(d.get("accept_length") or 0.0), float(d.get("tok_s") or 0.0)


async def _choose(ctx: SkillContext, p: Params) -> StepResult:
    plan = p.plan or {}
    planned = list(plan.get("attempts") or [])
    base = p.current or {}
    table = [f"now: {(plan.get('current') or {}).get('words')}: accept length {base.get('accept_length')}, "
             f"{base.get('tok_s')} tok/s ({base.get('verdict')})"]
    best: tuple[int, dict[str, Any]] | None = None
    for i, (a, got) in enumerate(zip(planned, p.attempts)):
        if not got or got.get("skipped") or got.get("accept_length") is None:
            table.append(f"{i + 1}. {a['words']}: not measured ({got.get('summary') if got else 'skipped'})")
            continue
        table.append(f"{i + 1}. {a['words']}: accept length {got.get('accept_length')}, {got.get('tok_s')} tok/s "
                     f"({got.get('verdict')})")
        if best is None or _score(got) > _score(best[1]):
            best = (i, got)
    for line in table:
        ctx.log(line)
    data: dict[str, Any] = {"apply": False, "best": None, "set": {}, "delete": [], "table": table, "serving": False}
    base_len = float(base.get("accept_length") or 0.0)
    if best is None or _score(best[1])[0] <= base_len * (1 + p.min_gain_pct / 100):
        return StepResult.ok("no attempt beat the current capture list; the draft's config is restored", data=data,
                             output="\n".join(table) + "\n")
    a = planned[best[0]]
    data.update(best={**a, **{k: best[1].get(k) for k in ("accept_length", "tok_s", "verdict")}},
                set=a["set"], delete=a["delete"])
    ok, who = await ctx.approve(f"keep the capture list that feeds the draft {a['words']} on {ctx.host_name} "
                                f"(accept length {best[1].get('accept_length')} vs {base.get('accept_length')} now)",
                                table)
    if not ok:
        return StepResult.ok(f"best: {a['words']} (accept length {best[1].get('accept_length')}); not approved "
                             f"({who}): the draft's config is restored", data=data, output="\n".join(table) + "\n")
    data["apply"] = True
    # The last attempt's server still runs: when it is the best, the playbook keeps it instead of a final
    # relaunch onto the same list (minutes of an 8-GPU node's model load, for nothing).
    data["serving"] = best[0] == len(planned) - 1
    kept = "; the server already runs it" if data["serving"] else ""
    return StepResult.ok(f"keeping {a['words']} (accept length {best[1].get('accept_length')} vs "
                         f"{base.get('accept_length')}, approved by {who}){kept}", data=data,
                         output="\n".join(table) + "\n")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    # `plan` probes (read-only) and plans the relaunches; `choose` judges what the attempts measured
    # (nothing, in a dry-run: "not measured") and changes nothing itself: later steps keep or restore.
    return await (_plan(ctx, params) if params.action == "plan" else _choose(ctx, params))
