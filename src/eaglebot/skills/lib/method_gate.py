"""The launch pre-flight's method-aware gate (facts/spec/methods.py): for DFLASH, NEXTN/MTP,
STANDALONE and NGRAM, the static checks that refuse, before anything stops, a launch SGLang would
refuse later or one that would run at an accept length of about 1.0.

Read on the host in one pass by `spec_files` (standard library, nothing of sglang or torch
imported, no tensor loaded: configs, weight names, the fc shape from a safetensors header,
tokenizer hashes, the algorithms its SGLang source accepts); for DFLASH a second pass runs the
target's own `set_dflash_layers_to_capture` from the host's SGLang source on a stand-in
(`eagle3_probe`, as draft.check does for EAGLE-3). Where the host cannot answer, the checks that
need it are warnings saying so, and the algorithm names are eaglebot's record of the release.
"""
from __future__ import annotations

import json
from typing import Any

from eaglebot.errors import StepFailed
from eaglebot.facts.sglang import cmdline
from eaglebot.facts.spec import eagle3, methods
from eaglebot.sdk import SkillContext
from eaglebot.skills.lib.preflight import KEEPS

DFLASH_HOOK = "set_dflash_layers_to_capture"


async def _capture(ctx: SkillContext, python: str, host: dict[str, Any]) -> dict[str, Any] | None:
    """The DFLASH capture probe's answer for the ids SGLang will pass, or None (the log says why; a dry run
    runs none of the host's code)."""
    target = (host.get("model") or {}).get("config")
    draft = (host.get("draft") or {}).get("config")
    if not isinstance(target, dict) or not isinstance(draft, dict):
        return None
    try:
        t = eagle3.parse_target(json.dumps(target))
    except ValueError:
        return None
    if not ctx.may_run_host_code(f"SGLang's {DFLASH_HOOK}, compiled from the host's model file and run"):
        return None
    n = t.num_layers * (methods.as_int(target.get("num_loops")) or 1)
    plan, _ = methods.dflash_plan(draft, n)
    res = await ctx.host.run(eagle3.probe_command(python, t.archs, t.num_layers, [plan], method=DFLASH_HOOK),
                             timeout=eagle3.PROBE_TIMEOUT_S, stdin=eagle3.probe_program())
    doc = eagle3.probe_answer(-1 if res.exit_status is None else res.exit_status, res.stdout, res.stderr)
    if isinstance(doc, dict):
        return doc
    ctx.log(f"the target's {DFLASH_HOOK} could not be read from the host's SGLang ({doc}): the capture is "
            f"checked from the configs only")
    return None


async def verdict(ctx: SkillContext, python: str, args: list[str], version: str) -> methods.Verdict:
    """The method's static checks for a launch (`args`: its launch_server arguments) on this host."""
    f = cmdline.flag_values(args)
    algo = f.get("--speculative-algorithm")
    what = methods.needs(algo, args)
    if what is None:
        return methods.Verdict(None, None, None)
    model, draft = f.get("--model-path"), f.get("--speculative-draft-model-path")
    local = [p if methods.is_local(p) else None for p in (model, draft)]
    res = await ctx.host.run(methods.command(python, local[0], local[1], what), timeout=methods.TIMEOUT_S,
                             stdin=methods.program())
    got = methods.parse(-1 if res.exit_status is None else res.exit_status, res.stdout, res.stderr)
    host: dict[str, Any] | None = got if isinstance(got, dict) else None
    if host is None:
        ctx.log(f"the model folders and SGLang's algorithms could not be read on the host ({got})")
    elif "error" in (host.get("sglang") or {}):
        ctx.log(f"the host's SGLang source could not be read ({host['sglang']['error']}): the algorithm names are "
                f"eaglebot's record of SGLang {version}")
    capture = await _capture(ctx, python, host) if host is not None and str(algo).upper() == "DFLASH" \
        and "names" in (host.get("sglang") or {}) else None
    return methods.check(algo, args, host, capture, version)


async def check(ctx: SkillContext, python: str, args: list[str], version: str, on_refusal: str) -> tuple[
        list[str], dict[str, Any] | None]:
    """(warnings, the verdict as data); raises StepFailed (usage) naming the fix for a refused launch
    unless `on_refusal` is "warn"."""
    v = await verdict(ctx, python, args, version)
    if v.method is None and not v.findings:
        return [], None
    for msg in v.of(methods.NOTE):
        ctx.log(f"{v.algorithm}: {msg}")
    warnings = [f"{v.algorithm}: {m}" for m in v.of(methods.WARN)]
    refusals = v.of(methods.REFUSE)
    if refusals and on_refusal != "warn":
        raise StepFailed(f"{v.algorithm}: {'; '.join(refusals)} ({KEEPS}; -e method_check=warn launches anyway)",
                         warnings=warnings, usage=True, data={"method_checks": v.to_json()})
    warnings += [f"{v.algorithm} (method_check=warn): {m}" for m in refusals]
    return warnings, v.to_json()
