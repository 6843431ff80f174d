"""Benchmark the running SGLang server at several batch sizes, and read its acceptance by draft position.

For each batch size B, `repeats` runs of `python -m sglang.bench_serving` (random-ids, fixed
lengths, `--flush-cache`, `--max-concurrency B`, `max(num_prompts, prompts_per_batch * B)` prompts,
a fresh `--output-file` per run): the median output tok/s and its MAD. With `acceptance: true` it
then sends `probe_prompts` requests of the same kind to /generate and sums SGLang's per-request
`spec_correct_drafts_histogram` (verify passes that accepted k drafts): what `eagle tune` predicts
every shorter chain from. A low accept length is reported, not refused (a tuning needs the
number; bench.serving's sanity check is for the history).

```yaml
- skill: bench.batches
  register: measured
  with: {python: "{{ python }}", port: "{{ port }}", batch_sizes: [1, 8, 32], repeats: 3,
         input_len: 1024, output_len: 256, acceptance: true}
```
No metrics: each measurement of a tuning is another config, so its numbers stay out of the
regression history (where they would read as drops and rises of one config); they are in the data.
Registers `batch_sizes` ({B: {tok_s, samples, mad, accept_length, completed}}), `histogram`,
`request_means`, `acceptance_source`, `effective` (the server's speculative settings), `sglang_version`.
"""
from __future__ import annotations

import shlex
import statistics
from typing import Any

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, Plan, SkillContext, SkillParams, StepResult

from eaglebot.facts.sglang import release
from eaglebot.facts.spec import probe
from eaglebot.skills.lib import bench, processes, server

NAME = "bench.batches"


class Params(SkillParams):
    python: str = Field("python3", description="the host's Python that has sglang (host var `python`)",
                        json_schema_extra=HOST_PATH)
    port: int = Field(30000, ge=1, le=65535, description="port of the server to benchmark")
    batch_sizes: list[int] = Field(default_factory=lambda: [1, 8, 32], min_length=1, max_length=16,
                                   description="concurrencies to benchmark (--max-concurrency each)")
    repeats: int = Field(3, ge=1, le=20, description="benchmark runs per batch size (median and MAD)")
    num_prompts: int = Field(16, ge=1, le=100000, description="at least this many prompts per run")
    prompts_per_batch: int = Field(2, ge=1, le=100, description="and at least this many per concurrent request")
    input_len: int = Field(1024, ge=1, description="--random-input-len (tokens)")
    output_len: int = Field(256, ge=1, description="--random-output-len (tokens)")
    acceptance: bool = Field(False, description="also read the acceptance by draft position from /generate")
    probe_prompts: int = Field(32, ge=1, le=1024, description="requests of the acceptance probe")
    probe_concurrency: int = Field(8, ge=1, le=256, description="concurrency of the acceptance probe")
    timeout_s: float = Field(3600.0, gt=0, description="time limit of each benchmark run")


def _mad(values: list[float]) -> float:
    m = statistics.median(values)
    return statistics.median(abs(v - m) for v in values) if len(values) > 1 else 0.0


async def run(ctx: SkillContext, params: Params) -> StepResult:
    port, sizes = params.port, sorted(set(params.batch_sizes))
    if any(b < 1 for b in sizes):
        raise StepFailed(f"batch sizes must be whole numbers from 1 (got {sizes})", usage=True)
    folder = f"{processes.state_dir(ctx)}/bench"
    return await ctx.carry_out(Plan(
        [f"benchmark port {port} at batch sizes {', '.join(map(str, sizes))}, {params.repeats} run(s) each"],
        f"would benchmark {len(sizes)} batch sizes", lambda: _bench(ctx, params, sizes, folder)))


async def _bench(ctx: SkillContext, params: Params, sizes: list[int], folder: str) -> StepResult:
    port = params.port
    base = await server.base_url(ctx, port)     # where it listens: 127.0.0.1 unless relaunch bound it elsewhere
    code, _ = await server.http_get(ctx, params.python, port, "/health", base=base)
    if code != 200:
        raise StepFailed(f"no ready server on port {port} (GET /health -> {code or 'no answer'}); launch it first")
    made = await ctx.host.run(f"mkdir -p -- {shlex.quote(folder)}", timeout=30)
    if made.exit_status != 0:
        raise StepFailed(f"cannot create the benchmark folder {folder} on {ctx.host_name}")
    per: dict[str, dict[str, Any]] = {}
    for b in sizes:
        prompts = max(params.num_prompts, params.prompts_per_batch * b)
        samples, accepts, completed = [], [], []
        for i in range(params.repeats):
            out_file = f"{folder}/batches-{port}-run{ctx.run_id}-step{ctx.step_idx}-bs{b}-{i + 1}.jsonl"
            argv = bench.argv(params.python, port, prompts, params.input_len, params.output_len, b, out_file,
                              base=base)
            ctx.log(f"batch size {b}, run {i + 1}/{params.repeats}: {shlex.join(argv)}")
            record = await bench.run_once(ctx, argv, out_file, params.timeout_s)
            numbers = release.bench_numbers(record)
            if not numbers.get("completed"):
                raise StepFailed(f"0 of {prompts} requests completed at batch size {b} on port {port}")
            samples.append(round(numbers["output_throughput"], 3))
            completed.append(int(numbers["completed"]))
            if numbers.get("accept_length") is not None:
                accepts.append(numbers["accept_length"])
        tok = statistics.median(samples)
        per[str(b)] = {"tok_s": round(tok, 3), "samples": samples, "mad": round(_mad(samples), 3),
                       "accept_length": statistics.median(accepts) if accepts else None,
                       "completed": min(completed), "prompts": prompts}
        ctx.log(f"batch size {b}: {tok:.1f} tok/s (MAD {per[str(b)]['mad']:.1f} over {len(samples)} runs)")
    data: dict[str, Any] = {"batch_sizes": per}
    code, body = await server.http_get(ctx, params.python, port, "/server_info", base=base)
    if code == 200:
        try:
            info = release.parse_server_info(body)
            data["effective"], data["sglang_version"] = info["effective"], info["version"]
            data["adaptive"] = bool(info["raw"].get("speculative_adaptive"))
        except ValueError:
            pass
    accept_lengths = [v["accept_length"] for v in per.values() if v["accept_length"] is not None]
    accept = statistics.median(accept_lengths) if accept_lengths else None
    if params.acceptance:
        argv = [params.python, "-c", probe.PROBE_PY, str(port), str(params.probe_prompts),
                str(params.input_len), str(params.output_len), str(params.probe_concurrency), "1",
                str(max(30.0, params.timeout_s / 4))]
        res = await ctx.host.run(shlex.join(argv), timeout=params.timeout_s)
        acc = probe.parse_probe(res.stdout, params.probe_prompts)
        data.update(histogram=acc.histogram, request_means=[round(m, 4) for m in acc.request_means],
                    acceptance_source="histogram" if acc.histogram else "accept length")
        if not acc.histogram:
            ctx.log(f"no per-request acceptance histogram came back ({acc.answered}/{acc.asked} answered"
                    + (f"; {acc.errors[0]}" if acc.errors else "") + "): shorter chains are predicted from "
                    "the accept length alone")
        accept = accept if accept is not None else acc.accept_length
    data["accept_length"] = accept
    summary = ", ".join(f"bs {b} {per[str(b)]['tok_s']:.1f}" for b in sizes) + " tok/s"
    if accept is not None:
        summary += f"; accept length {accept:.2f}"
    if params.acceptance and data.get("histogram"):
        summary += f"; acceptance by position from {sum(data['histogram'])} verify passes"
    return StepResult.ok(summary, data=data)
