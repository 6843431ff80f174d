"""Check that speculative decoding is lossless: greedy outputs against a reference.

Sends `num_prompts` fixed prompts (`seed`) to the running server with temperature 0 and
`max_tokens`, and compares the output token ids with a reference recorded by this same skill
on the same model WITHOUT speculative decoding (on a plain server the skill records it, with the
plain server's top-2 logprobs at every position, once, in `{state_dir}/correctness/` on the host;
later plain runs reuse it). Each output that differs is classified at its first differing token
by the reference's top-2 margin there (eaglebot.facts.bench.correctness): `tie` (at most
`tie_margin_nats`, two bf16 steps: the target's own top-2 were tied, either may come out of a
verify pass) or `lossy` (a clear margin broken). The step fails on any `lossy`, never on ties;
the share of outputs that match or diverge at a tie is the metric `greedy_match_rate` (higher is
better: it joins the regression history). Differences with no margin to judge by (a reference
recorded before margins were, a missing answer) count against `min_match`. With no reference yet
the step is skipped and says how to record one.

```yaml
- skill: bench.correctness
  with: {python: "{{ python }}", port: "{{ port }}", num_prompts: 32, max_tokens: 32, min_match: 0.95}
```
Registers `reference` (its path on the host), `matched`, `ties`, `lossy`, `unexplained`, `total`,
`exact_rate`, `first_diff` and `divergences` (prompt, token, both tokens, margin, kind of each).
"""
from __future__ import annotations

import json
import secrets
import shlex
from datetime import datetime, timezone
from typing import Any

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, Metric, Plan, SkillContext, SkillParams, StepResult, path_for_shell

from eaglebot.facts.bench import correctness
from eaglebot.skills.lib import processes, server

NAME = "bench.correctness"


class Params(SkillParams):
    python: str = Field("python3", description="the host's Python (host var `python`); it sends the prompts",
                        json_schema_extra=HOST_PATH)
    port: int = Field(30000, ge=1, le=65535, description="port of the running server")
    num_prompts: int = Field(32, ge=1, le=1024, description="greedy prompts sent (the same ones every run)")
    max_tokens: int = Field(32, ge=1, le=4096, description="max_new_tokens of each prompt (fixed: part of the reference)")
    seed: int = Field(0, description="seed of the fixed prompts")
    min_match: float = Field(0.95, ge=0, le=1, description="fail under this share of outputs that match the reference "
                                                          "or diverge at a tie")
    tie_margin_nats: float = Field(correctness.TIE_MARGIN_NATS, ge=0, le=10,
                                   description="a divergence where the reference's top-2 logprobs are at most this far "
                                               "apart is a tie (default two bf16 steps)")
    timeout_s: float = Field(600.0, gt=0, description="time limit for all the prompts")


async def _read_json(ctx: SkillContext, path: str) -> Any:
    res = await ctx.host.run(f"cat {path_for_shell(path)} 2>/dev/null; true", timeout=30)
    try:
        return json.loads(res.stdout) if res.stdout.strip() else None
    except json.JSONDecodeError:
        return None


async def _generate(ctx: SkillContext, p: Params, texts: list[str], folder: str, base: str,
                    logprobs: bool) -> tuple[list[list[int] | None], list[Any]]:
    # `folder` is absolute (under ctx.state_dir, resolved by the host): Python gets a path it can open.
    # The random part: several bots (or test workers) may share one login's state folder.
    prompts_file = f"{folder}/prompts-{ctx.run_id}-{ctx.step_idx}-{secrets.token_hex(4)}.json"
    await ctx.host.write_file(prompts_file, json.dumps(texts).encode())
    argv = [p.python, "-c", correctness.GENERATE_PY, prompts_file, base, str(p.max_tokens),
            str(max(10.0, p.timeout_s / 4)), "1" if logprobs else "0"]
    res = await ctx.host.run(shlex.join(argv), timeout=p.timeout_s)
    await ctx.host.run(f"rm -f {path_for_shell(prompts_file)}", timeout=30)
    if res.timed_out:
        raise StepFailed(f"{len(texts)} greedy prompts did not finish within {p.timeout_s:g}s on port {p.port}")
    try:
        doc = json.loads(res.stdout.strip().splitlines()[-1])
        outputs, top = doc["outputs"], doc["top2"]
    except (json.JSONDecodeError, IndexError, KeyError, TypeError):
        raise StepFailed(f"the greedy prompts gave no result (exit status {res.exit_status}): "
                         f"{(res.stderr.strip().splitlines() or ['no output'])[-1][:300]}") from None
    if not isinstance(outputs, list) or all(o is None for o in outputs):
        raise StepFailed(f"none of {len(texts)} greedy prompts was answered on port {p.port}: "
                         f"{(res.stderr.strip().splitlines() or ['no error printed'])[-1][:300]}")
    return outputs, top


async def run(ctx: SkillContext, params: Params) -> StepResult:
    texts = correctness.prompts(params.seed, params.num_prompts)
    folder = f"{processes.state_dir(ctx)}/correctness"
    return await ctx.carry_out(Plan(
        [f"send {params.num_prompts} greedy prompts to port {params.port} and compare with the reference"],
        f"would check {params.num_prompts} greedy outputs on port {params.port}",
        lambda: _check(ctx, params, texts, folder)))


async def _check(ctx: SkillContext, params: Params, texts: list[str], folder: str) -> StepResult:
    base = await server.base_url(ctx, params.port)
    code, body = await server.http_get(ctx, params.python, params.port, "/server_info", base=base)
    if code != 200:
        raise StepFailed(f"no ready server on port {params.port} (GET /server_info -> {code or 'no answer'}); "
                         f"launch it first (server.launch)")
    try:
        info: dict[str, Any] = json.loads(body)
    except json.JSONDecodeError:
        raise StepFailed(f"/server_info on port {params.port} is not JSON") from None
    spec, model = info.get("speculative_algorithm"), str(info.get("model_path") or "?")
    ref_path = f"{folder}/reference-{correctness.reference_key(model, texts, params.max_tokens)}.json"
    ref = await _read_json(ctx, ref_path)
    what = f"{params.num_prompts} prompts x {params.max_tokens} tokens of {model}"
    if not spec and ref is not None and "top2" in ref:
        return StepResult.ok(f"no speculative decoding: the greedy reference ({what}, recorded by run "
                             f"#{ref.get('run_id')}) is kept", data={"reference": ref_path})
    await ctx.host.run(f"mkdir -p {path_for_shell(folder)}", timeout=30)
    outputs, top = await _generate(ctx, params, texts, folder, base, logprobs=not spec)
    if not spec:
        rows = [correctness.top2_rows(t) for t in top]
        doc = {"model": model, "max_tokens": params.max_tokens, "seed": params.seed, "prompts": texts,
               "outputs": outputs, "top2": rows, "run_id": ctx.run_id,
               "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        await ctx.host.write_file(ref_path, json.dumps(doc).encode())
        with_margins = sum(1 for r in rows if r)
        return StepResult.changed(f"recorded the greedy reference without speculative decoding: {what}, with "
                                  f"the top-2 logprobs of {with_margins} of them", data={"reference": ref_path})
    if ref is None:
        return StepResult.skipped(
            f"no greedy reference for {model} on this host yet: run this step once on a server without "
            f"speculative decoding (it records one); {spec} outputs not checked",
            warnings=[f"speculative decoding ({spec}) not checked for lossless outputs: no reference"])
    m = correctness.compare(ref["outputs"], outputs, ref.get("top2"), params.tie_margin_nats)
    metric = Metric("greedy_match_rate", round(m.rate, 4), "", "higher")
    ties, lossy, unexplained = m.count("tie"), m.count("lossy"), m.count("unexplained")
    data = {"reference": ref_path, "matched": m.matched, "ties": ties, "lossy": lossy, "unexplained": unexplained,
            "total": m.total, "exact_rate": round(m.exact_rate, 4), "first_diff": m.first_diff_text(),
            "tie_margin_nats": params.tie_margin_nats,
            "divergences": [{"prompt": d.prompt, "token": d.token, "reference": d.want, "got": d.got,
                             "margin_nats": d.margin, "runner_up": d.runner_up, "kind": d.kind} for d in m.diffs]}
    line = (f"{m.matched}/{m.total} greedy outputs match the reference, {ties} diverge at a tie (top-2 margin "
            f"<= {params.tie_margin_nats:g} nats), {lossy} lossy"
            + (f", {unexplained} unexplained" if unexplained else "")
            + f" ({m.rate:.1%} match or tie, min_match {params.min_match:.0%})")
    if lossy:
        first = next(d for d in m.diffs if d.kind == "lossy")
        raise StepFailed(f"{spec} changed the greedy outputs: {line}; first lossy divergence at {first.text()}",
                         metrics=[metric], data=data)
    if m.rate < params.min_match:
        why = ("the reference has no top-2 logprobs (recorded before they were): record it again on a server "
               "without speculative decoding to tell ties from lossy" if "top2" not in ref
               else "outputs missing or without a margin to judge by")
        raise StepFailed(f"{spec} changed the greedy outputs: {line}; first difference at {m.first_diff_text()}; "
                         f"{why}", metrics=[metric], data=data)
    extra = f"; first difference at {m.first_diff_text()}" if m.diffs else ""
    return StepResult.ok(f"lossless: {line}{extra}", metrics=[metric], data=data)
