"""Tell a draft fed the wrong hidden states from a weak draft, on the running server.

Sends a fixed set of greedy prompts to /generate and reads the server's own per-request
speculative stats (`spec_verify_ct`, `spec_accept_length` and the histogram of accepted drafts per
verify pass, from which the acceptance of each draft position follows), then compares them with
what the draft's training accuracy predicts for the running steps/topk (`train_accuracy`, host var
`draft_train_accuracy`; else draft.check's data; else SpecForge's provenance file next to the
draft): `as expected`, `weak draft` (low but smooth), `wrong inputs` (the first position far below
the training proxy, the later ones near zero) or `unknown` (no proxy, no stats, dummy weights).
`wrong inputs` fails the step naming the likely cause, the capture list, with both lists from
draft.check (`check`) and the numbers; `weak draft` and `unknown` are warnings.

```yaml
- name: probe the draft's acceptance
  skill: draft.probe
  continue_on_error: true
  with: {python: "{{ python }}", port: "{{ port }}", check: "{{ draft_check }}", train_accuracy: 0.747}
```
Registers `verdict`, `accept_length`, `positions` (per-position acceptance), `first`, `proxy`,
`expected_length`, `tok_s`, `answered`, `speculative` (steps, topk, draft tokens), `capture` (the
server's capture list in words, from draft.check), `capture_points`, `training_points`,
`draft_config`, `draft_identity` (what later probes find this one by) and `own` (the history it was
compared with). A server run with SGLANG_SIMULATE_ACC_LEN (acceptance forced) reads `unknown`. Metrics `draft_accept_length`,
`draft_first_position_accept`, `probe_tok_s`.
"""
from __future__ import annotations

import json
import posixpath
import shlex
from typing import Any

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, Metric, Plan, SkillContext, SkillParams, StepResult

from eaglebot.facts.spec import draft_accept
from eaglebot.skills.lib import draft as lib
from eaglebot.skills.lib import server

NAME = "draft.probe"
READ_ONLY = True  # greedy requests to the running server, nothing on the host changes


class Params(SkillParams):
    python: str = Field("python3", description="the host's Python (host var `python`); it sends the prompts",
                        json_schema_extra=HOST_PATH)
    port: int = Field(30000, ge=1, le=65535, description="port of the running server")
    num_prompts: int = Field(len(draft_accept.PROMPTS), ge=1, le=len(draft_accept.PROMPTS),
                             description="fixed greedy prompts sent")
    max_tokens: int = Field(96, ge=8, le=2048, description="max_new_tokens per prompt")
    timeout_s: float = Field(300.0, gt=0, description="time limit for all the prompts")
    train_accuracy: float | None = Field(None, ge=0, le=1, description="the draft's training accuracy at the first "
                                                                      "position (host var draft_train_accuracy)")
    draft: str | None = Field(None, description="the draft folder, for the trainer's provenance file",
                              json_schema_extra=HOST_PATH)
    check: dict[str, Any] | None = Field(None, description="draft.check's registered data (the capture lists)")
    compare_history: bool = Field(True, description="judge against this draft's own accept length under its trained "
                                                    "list (false where `check` no longer says what the server feeds)")


def _proxy(params: Params, check: dict[str, Any]) -> tuple[list[float] | None, str | None]:
    if params.train_accuracy is not None:
        return [params.train_accuracy], "declared"
    acc = check.get("train_accuracy")
    if isinstance(acc, list) and acc and all(isinstance(v, (int, float)) for v in acc):
        return [float(v) for v in acc], str(check.get("accuracy_source") or "draft.check")
    return None, None


def cause(check: dict[str, Any]) -> str:
    """The likely cause of `wrong inputs`, in words: the capture list, with draft.check's two lists."""
    server_words, training = check.get("server_words"), check.get("training_words")
    if not server_words:
        return ("likely cause: the capture list (eagle_config.eagle_aux_hidden_state_layer_ids); "
                "run draft-check for what the server feeds the draft")
    said = f"the server feeds the draft {server_words}"
    if training and check.get("verdict") == "mismatch":
        return f"likely cause: the capture list: {said}, training used {training} ({check.get('training_source')})"
    if training:
        return (f"likely cause: the capture list or the training side: {said}, as training did per "
                f"{check.get('training_source')}; declare draft_train_layers if that is not what training used")
    return f"likely cause: the capture list: {said}; what training used is unknown (declare draft_train_layers)"


async def own_history(ctx: SkillContext, check: dict[str, Any],
                      speculative: dict[str, int]) -> draft_accept.Own | None:
    """The newest earlier probe of this draft (same config, same identity when both know one, same
    speculative settings) whose server fed it the list training used, with a measured accept length."""
    trained, config = check.get("training_points"), check.get("draft_config")
    if ctx.audit is None or not isinstance(trained, list) or not isinstance(config, str):
        return None
    needle = "/".join(posixpath.normpath(config).split("/")[-2:])
    for row in await ctx.audit.step_data_history(ctx.host_name, [NAME], needle, 200, True):
        try:
            d = json.loads(row.get("data") or "{}")
        except json.JSONDecodeError:
            continue
        ident, theirs = check.get("draft_identity"), d.get("draft_identity")
        if (isinstance(d, dict) and d.get("capture_points") == trained and d.get("speculative") == speculative
                and isinstance(d.get("draft_config"), str)
                and posixpath.normpath(d["draft_config"]) == posixpath.normpath(config)
                and (ident is None or theirs is None or ident == theirs)
                and d.get("verdict") not in ("unknown", None) and isinstance(d.get("accept_length"), (int, float))):
            return draft_accept.Own(float(d["accept_length"]), list(trained), int(row.get("run_id") or 0))
    return None


async def run(ctx: SkillContext, params: Params) -> StepResult:
    # In a dry run the server was not relaunched: what it serves now is not what the probe would see.
    return await ctx.carry_out(Plan(
        [f"send {params.num_prompts} greedy prompts to port {params.port} and read the acceptance per position"],
        f"would probe the draft's acceptance on port {params.port}", lambda: _probe(ctx, params)))


async def _probe(ctx: SkillContext, params: Params) -> StepResult:
    base = await server.base_url(ctx, params.port)
    code, body = await server.http_get(ctx, params.python, params.port, "/server_info", base=base)
    if code != 200:
        raise StepFailed(f"no ready server on port {params.port} (GET /server_info -> {code or 'no answer'}); "
                         f"launch it first (server.launch)")
    try:
        info: dict[str, Any] = json.loads(body)
    except (json.JSONDecodeError, RecursionError):   # whatever answers on the port wrote it
        raise StepFailed(f"/server_info on port {params.port} is not JSON (or nested too deep to read)") from None
    if not isinstance(info, dict):
        raise StepFailed(f"/server_info on port {params.port} is not a JSON object")
    if not info.get("speculative_algorithm"):
        return StepResult.skipped("the server runs without speculative decoding: no draft to probe")
    steps, topk = int(info.get("speculative_num_steps") or 1), int(info.get("speculative_eagle_topk") or 1)
    tokens = int(info.get("speculative_num_draft_tokens") or steps + 1)
    argv = [params.python, "-c", draft_accept.GENERATE_PY, base, str(params.max_tokens),
            str(max(10.0, params.timeout_s / 4)), str(params.num_prompts)]
    res = await ctx.host.run(shlex.join(argv), timeout=params.timeout_s, stdin=json.dumps(list(draft_accept.PROMPTS)))
    if res.timed_out:
        raise StepFailed(f"{params.num_prompts} probe prompts did not finish within {params.timeout_s:g}s")
    try:
        stats = draft_accept.parse_generate(res.stdout, str(info.get("version") or "") or None)
    except ValueError as e:
        raise StepFailed(f"{e} (exit status {res.exit_status}): "
                         f"{(res.stderr.strip().splitlines() or ['no error printed'])[-1][:300]}") from None
    check = params.check or {}
    accuracy, acc_source = _proxy(params, check)
    if accuracy is None and params.draft:
        prov = await lib.provenance(ctx, params.draft)
        if prov.accuracy:
            accuracy, acc_source = prov.accuracy, f"provenance {prov.accuracy_file}"
    reading = draft_accept.classify(stats, accuracy, steps, topk, tokens, info.get("load_format"))
    speculative = {"steps": steps, "topk": topk, "draft_tokens": tokens}
    _pid, env = await server.server_env(ctx, params.port)
    forced = (env or {}).get("SGLANG_SIMULATE_ACC_LEN")
    if forced is not None and reading.verdict != "unknown":
        # SGLang accepts drafts by that length, not by the target's verdict: nothing about the draft
        reading = draft_accept.Reading("unknown", f"unknown: the server runs with SGLANG_SIMULATE_ACC_LEN={forced}, "
                                                  f"its acceptance forced, so it says nothing about the draft; "
                                                  f"{reading.summary.split(': ', 1)[1]}", reading.numbers)
    elif params.compare_history and check.get("server_points") is not None:
        own = await own_history(ctx, check, speculative)
        reading = draft_accept.against_own(reading, own, check.get("verdict") == "mismatch")
    n = reading.numbers
    data: dict[str, Any] = {"verdict": reading.verdict, **n, "accuracy_source": acc_source,
                            "speculative": speculative,
                            "capture": check.get("server_words"), "training": check.get("training_words"),
                            # only where `check` says what this server feeds: later probes compare with it
                            "capture_points": check.get("server_points") if params.compare_history else None,
                            "training_points": check.get("training_points") if params.compare_history else None,
                            "draft_config": check.get("draft_config"), "draft_identity": check.get("draft_identity")}
    metrics = [Metric("draft_accept_length", n["accept_length"], "", "higher")] if n.get("accept_length") else []
    if n.get("first") is not None:
        metrics.append(Metric("draft_first_position_accept", n["first"], "", "higher"))
    if n.get("tok_s"):
        metrics.append(Metric("probe_tok_s", n["tok_s"], "tok/s", "higher"))
    detail = "\n".join([f"{stats.answered}/{params.num_prompts} greedy prompts answered, {stats.completion_tokens} "
                        f"tokens in {stats.verify_ct} verify passes ({stats.wall_s:.1f}s)",
                        f"accepted drafts per verify pass (histogram): {stats.histogram or 'not reported'}",
                        f"training proxy: {accuracy} ({acc_source or 'none'})", reading.summary]) + "\n"
    for line in detail.splitlines():
        ctx.log(line)
    if reading.verdict == "wrong inputs":
        why = cause(check)
        data["cause"] = why
        raise StepFailed(f"{reading.summary}; {why}", data=data, metrics=metrics, output=detail + why + "\n")
    if reading.verdict != "as expected":
        return StepResult.ok(reading.summary, data=data, metrics=metrics, output=detail,
                             warnings=[f"draft.probe: {reading.summary}"])
    return StepResult.ok(reading.summary, data=data, metrics=metrics, output=detail)
