"""Benchmark a running SGLang server with `python -m sglang.bench_serving` on its host.

Refuses when the server runs with SGLANG_SIMULATE_ACC_LEN (its acceptance is faked),
warns when processes the bot did not start are using the GPUs, then runs
`bench_serving --dataset-name random-ids --random-range-ratio 1.0 --flush-cache` with a
fresh `--output-file` per run (the tool appends). `repeats` > 1 reports the median.
Metrics: output_throughput (tok/s), request_throughput, accept_length, median_ttft_ms,
p99_ttft_ms, median_itl_ms, mean_e2e_latency_ms, completed, and avg_spec_accept_length
from /server_info. Zero completed requests is a failed step. A server whose /server_info shows an
accept threshold below 1 (at launch, or set at runtime through /set_internal_state: `internal_states`)
is refused like SGLANG_SIMULATE_ACC_LEN. With speculative decoding on, the run must also show that
speculation is really on (facts/spec/live.py, as server.launch: resolved algorithm and steps, not
step 0; two greedy prompts with histogram mass beyond 0, accept length above 1.05, at least 80% of this
draft's own earlier reading); else the step fails naming what broke and records no metrics
(`speculation` in the data; dummy weights read `unknown (dummy weights)`, no alarm). Sanity: with speculative decoding
on, an accept length <= `min_accept_length` (1.05) fails ("the draft model accepts nothing");
fewer completed requests than asked is a warning with both numbers, under
`min_completed_fraction` (90%) a failure; a failed check records no metrics.

Every metric carries the run's configuration class (`config_class`: speculative algorithm or
none, target model, TP size, quantization, benchmark shape; docs/regressions.md says why
these), so the regression check compares like with like. With speculative decoding on, the
bench also reports `speedup_vs_reference`: its output throughput over that of the newest
no-speculation bench of the same target, TP size and benchmark shape on this host (the run
is named); under 1 it is a warning with both numbers.

```yaml
- skill: bench.serving
  register: bench
  with: {python: "{{ python }}", port: "{{ port }}", num_prompts: 64, input_len: 1024,
         output_len: 256, max_concurrency: 8, repeats: 1}
```
The numbers come from the benchmark's JSONL record (`--output-file`, under `{state_dir}/bench`,
absolute: the host resolved `state_dir` when the run reached it); a run whose file is missing or does
not parse fails the step with the benchmark's own last words, unless `allow_table: true`, which
reads the printed table and says so (`source: table`).
Registers `metrics` (name -> value), `runs` (per-run numbers), `records` (each run's whole JSONL
record, every key), `source` ("jsonl" or "table"), `output_files` (absolute paths on the host),
`config` ({class, reference_key, speculative_algorithm}), `output_throughput`, `speedup`
({value, reference_run, reference_tok_s}, or null) and `speculation` (the reading, or null).
"""
from __future__ import annotations

import json
import shlex
from typing import Any

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, Metric, Plan, SkillContext, SkillParams, StepResult

from eaglebot.facts.bench import sanity
from eaglebot.facts.gpu import nvsmi
from eaglebot.facts.host import ports, procs
from eaglebot.facts.sglang import adaptive, release
from eaglebot.facts.spec import live as spec_facts
from eaglebot.skills.lib import bench, draft, processes, server, spec_live

NAME = "bench.serving"


class Params(SkillParams):
    python: str = Field("python3", description="the host's Python that has sglang (host var `python`)",
                        json_schema_extra=HOST_PATH)
    port: int = Field(30000, ge=1, le=65535, description="port of the server to benchmark")
    num_prompts: int = Field(64, ge=1, le=100000, description="--num-prompts")
    input_len: int = Field(1024, ge=1, description="--random-input-len (tokens)")
    output_len: int = Field(256, ge=1, description="--random-output-len (tokens)")
    max_concurrency: int = Field(8, ge=1, description="--max-concurrency")
    repeats: int = Field(1, ge=1, le=20, description="benchmark runs; more than one reports the median")
    timeout_s: float = Field(3600.0, gt=0, description="time limit of each benchmark run")
    extra_args: list[str] = Field(default_factory=list, description="more bench_serving arguments, verbatim")
    check_tenants: bool = Field(True, description="warn when other processes use the GPUs")
    min_accept_length: float = Field(sanity.MIN_ACCEPT_LENGTH, ge=0, description=(
        "with speculative decoding on, fail at or below this accept length (the draft accepts nothing)"))
    min_completed_fraction: float = Field(sanity.MIN_COMPLETED_FRACTION, ge=0, le=1, description=(
        "fail when fewer requests than this share completed (any shortfall is a warning)"))
    allow_table: bool = Field(False, description=(
        "when the JSONL file is missing, read the numbers off the printed table instead of failing "
        "(said in the summary and as `source: table` in the data)"))


def bench_argv(p: Params, output_file: str, base: str | None = None) -> list[str]:
    """`base`: the server's URL where the host reaches it (server.base_url), default 127.0.0.1."""
    return bench.argv(p.python, p.port, p.num_prompts, p.input_len, p.output_len, p.max_concurrency, output_file,
                      p.extra_args, base)


async def _foreign_gpu_tenants(ctx: SkillContext) -> list[str] | None:
    """Compute processes on the GPUs outside the bot's sessions; None when nvidia-smi does not answer."""
    try:
        apps = await nvsmi.COMPUTE_APPS.gather(ctx.host, ctx.vars)
    except nvsmi.NvsmiError as e:
        ctx.log(f"GPU tenants not checked: {e}")
        return None
    if not apps:
        return []
    ours = await processes.our_sessions(ctx)
    infos = await procs.proc_info(ctx.host, sorted({a.pid for a in apps}))
    out, seen = [], set()
    for app in apps:
        info = infos.get(app.pid)
        if app.pid in seen or (info is not None and processes.is_ours(info, ours)):
            continue
        seen.add(app.pid)
        who = server.describe(info) if info else f"pid {app.pid} {app.process_name}"
        mib = f"{app.used_mib} MiB" if app.used_mib is not None else "unknown memory"
        out.append(f"{who} using {mib}")
    return out


async def run(ctx: SkillContext, params: Params) -> StepResult:
    port = params.port
    bench_dir = f"{processes.state_dir(ctx)}/bench"
    files = [f"{bench_dir}/bench-{port}-run{ctx.run_id}-step{ctx.step_idx}-{i + 1}.jsonl"
             for i in range(params.repeats)]
    # In a dry run the server this would measure was not (re)started: plan only.
    return await ctx.carry_out(Plan(["run " + shlex.join(bench_argv(params, files[0]))],
                                    f"would benchmark port {port} {params.repeats} time(s)",
                                    lambda: _bench(ctx, params, bench_dir, files)))


async def _bench(ctx: SkillContext, params: Params, bench_dir: str, files: list[str]) -> StepResult:
    port = params.port
    warnings: list[str] = []
    # -- probe
    pid, env = await server.server_env(ctx, port)
    if env is not None and "SGLANG_SIMULATE_ACC_LEN" in env:
        raise StepFailed(
            f"the server on port {port} (pid {pid}) runs with SGLANG_SIMULATE_ACC_LEN="
            f"{env['SGLANG_SIMULATE_ACC_LEN']}: its acceptance is faked, so a benchmark would mean nothing; "
            f"relaunch it without that variable")
    if pid is not None and env is None:
        warnings.append(f"could not read the environment of server pid {pid}: "
                        f"SGLANG_SIMULATE_ACC_LEN was not checked")
    base = await server.base_url(ctx, port)
    code, _ = await server.http_get(ctx, params.python, port, "/health", base=base)
    if code != 200:
        raise StepFailed(f"no ready server on port {port} (GET /health -> {code or 'no answer'}); "
                         f"launch it first (server.launch)")
    code, body = await server.http_get(ctx, params.python, port, "/server_info", base=base)
    try:
        before = release.parse_server_info(body)["raw"] if code == 200 else {}
    except ValueError:
        before = {}
    if lossy := spec_facts.lossy_running(None, before):
        raise StepFailed(f"the server on port {port} is not lossless: {'; '.join(lossy)}: a benchmark would "
                         f"mean nothing; relaunch it without that")
    if params.check_tenants:
        tenants = await _foreign_gpu_tenants(ctx)
        if tenants:
            warnings.append(f"{len(tenants)} other process(es) are using the GPUs, the numbers may be low: "
                            + "; ".join(tenants[:5]))
    # -- act (bench_dir is absolute: under ctx.state_dir, which the host resolved)
    made = await ctx.host.run(f"mkdir -p -- {shlex.quote(bench_dir)}", timeout=30)
    if made.exit_status != 0:
        raise StepFailed(f"cannot create the benchmark folder {bench_dir} on {ctx.host_name}: "
                         f"{_last(made.stderr + made.stdout) or f'exit status {made.exit_status}'}", warnings=warnings)
    runs: list[dict[str, float]] = []
    records: list[dict[str, Any]] = []
    outputs: list[str] = []
    source = "jsonl"
    for i, out_file in enumerate(files):
        argv = bench_argv(params, out_file, base)
        cmd = f"rm -f {shlex.quote(out_file)} && {shlex.join(argv)}"
        ctx.log(f"benchmark run {i + 1}/{params.repeats}: {shlex.join(argv)}")
        res = await ctx.host.run(cmd, timeout=params.timeout_s, on_output=lambda _s, line: ctx.log(line))
        printed = res.stdout + res.stderr
        outputs.append(printed)
        if res.timed_out:
            raise StepFailed(f"benchmark run {i + 1} did not finish within {params.timeout_s:g}s",
                             warnings=warnings, output=release.tail(printed, 60))
        fres = await ctx.host.run(f"cat {shlex.quote(out_file)}", timeout=30)
        record = release.parse_bench_jsonl(fres.stdout) if fres.exit_status == 0 else None
        result: dict[str, Any] | None = record
        if record is None:
            why = (f"its JSONL file {out_file} " + ("does not exist" if fres.exit_status != 0 else "holds no record")
                   + f" (exit status {res.exit_status}): {_last(printed) or 'no output'}")
            table = release.parse_bench_table(res.stdout) or None
            if not params.allow_table or table is None:
                raise StepFailed(f"benchmark run {i + 1} gave no numbers: {why}", warnings=warnings,
                                 output=release.tail(printed, 60), data={"output_files": files})
            warnings.append(f"benchmark run {i + 1}: {why}; numbers read from the printed table (allow_table)")
            source, result = "table", table
        else:
            records.append(record)
        assert result is not None
        numbers = release.bench_numbers(result)
        if not numbers.get("completed"):
            raise StepFailed(
                f"0 of {params.num_prompts} benchmark requests completed on port {port}: the server answered "
                f"none of them (see its log)", warnings=warnings, output=release.tail(printed, 60))
        runs.append(numbers)
    code, body = await server.http_get(ctx, params.python, port, "/server_info", base=base)
    avg_accept = None
    spec_alg: str | None = None
    raw: dict[str, Any] = {}
    if code == 200:
        try:
            info = release.parse_server_info(body)
            avg_accept = info["avg_spec_accept_length"]
            spec_alg = info["effective"].get("speculative_algorithm") or None
            raw = info["raw"]
        except ValueError:
            pass
    ref_key = reference_key(raw, params)
    cls = f"spec={spec_alg or 'none'} {ref_key}"
    summary_numbers = release.median_numbers(runs)
    if avg_accept is not None:
        summary_numbers["avg_spec_accept_length"] = float(avg_accept)
    metrics = []
    for name, value in summary_numbers.items():
        unit, better = release.BENCH_METRICS.get(name, ("", release.metric_direction(name)))
        metrics.append(Metric(name, round(value, 4), unit, better, config=cls))  # type: ignore[arg-type]
    n = summary_numbers
    parts = [f"output {n.get('output_throughput', 0):.1f} tok/s"]
    if "accept_length" in n or "avg_spec_accept_length" in n:
        parts.append(f"accept length {n.get('accept_length', n.get('avg_spec_accept_length')):.2f}")
    if "median_ttft_ms" in n:
        parts.append(f"median TTFT {n['median_ttft_ms']:.1f} ms")
    judged = sanity.check(
        [int(r.get("completed", 0)) for r in runs], params.num_prompts, speculative=spec_alg,
        accept_length=n.get("accept_length", n.get("avg_spec_accept_length")),
        min_accept_length=params.min_accept_length, min_completed_fraction=params.min_completed_fraction)
    warnings += judged.warnings
    if judged.failure:
        # No metrics: the numbers would enter the history as if they meant something. What /server_info
        # says of the speculation names the cause where it can (an adaptive step-0 tier: drafting off).
        said = spec_facts.really_on(raw, None).failures if spec_alg else []
        said += await _adaptive_off(ctx, raw, params.max_concurrency)
        raise StepFailed(judged.failure + "".join(f"; {f}" for f in said), warnings=warnings,
                         data={"runs": runs, "records": records, "source": source, "output_files": files,
                               "rejected": summary_numbers},
                         output=release.tail(outputs[-1], 60))
    speculation = None
    if spec_alg:
        verdict, speculation = await spec_live.check(ctx, params.python, base, raw)
        if verdict.failures:
            raise StepFailed(verdict.summary, warnings=warnings,
                             data={"runs": runs, "records": records, "source": source, "output_files": files,
                                   "rejected": summary_numbers, "speculation": speculation},
                             output=release.tail(outputs[-1], 60))
        if verdict.verdict == spec_facts.UNKNOWN:
            warnings.append(verdict.summary)
    speedup = None
    tok_s = n.get("output_throughput")
    if spec_alg and tok_s:
        speedup = await _speedup(ctx, ref_key, float(tok_s))
        if speedup is None:
            ctx.log(f"no speed-up: no no-speculation bench of this target and benchmark shape on {ctx.host_name} "
                    f"yet (relaunch with spec_algorithm=none and bench once to record it)")
        else:
            metrics.append(Metric(SPEEDUP, speedup["value"], "x", "higher", config=cls))
            part, slower = speedup_words(spec_alg, float(tok_s), speedup)
            parts.append(part)
            warnings += [slower] if slower else []
    runs_txt = f"median of {len(runs)} runs" if len(runs) > 1 else "1 run"
    summary = (f"{', '.join(parts)} ({int(n.get('completed', 0))}/{params.num_prompts} requests, {runs_txt}, "
               f"concurrency {params.max_concurrency}"
               + (", numbers read from the printed table: the JSONL file is missing)" if source == "table" else ")"))
    return StepResult.ok(summary, metrics=metrics, warnings=warnings,
                         data={"runs": runs, "records": records, "source": source, "output_files": files,
                               "config": {"class": cls, "reference_key": ref_key, "speculative_algorithm": spec_alg},
                               "output_throughput": tok_s, "speedup": speedup, "speculation": speculation},
                         output=release.tail(outputs[-1], 60))


SPEEDUP = "speedup_vs_reference"


def reference_key(info: dict[str, Any], p: Params) -> str:
    """What besides the speculative setting makes two benches' throughputs comparable: the
    target model, its TP size and quantization (from /server_info), and the benchmark shape."""
    parts = [f"target={info.get('model_path') or '?'}", f"tp={info.get('tp_size') or 1}"]
    if info.get("quantization"):
        parts.append(f"quant={info['quantization']}")
    parts.append(f"bench=in{p.input_len}/out{p.output_len}/c{p.max_concurrency}/n{p.num_prompts}")
    if p.extra_args:
        parts.append("extra=" + shlex.join(p.extra_args))
    return " ".join(parts)


def speedup_words(spec_alg: str, tok_s: float, speedup: dict[str, Any]) -> tuple[str, str | None]:
    """The summary's words for a speed-up, and the warning when it is under 1 (both numbers)."""
    ref, rid, x = speedup["reference_tok_s"], speedup["reference_run"], speedup["value"]
    part = f"speed-up {x:.2f}x over the target alone ({ref:.1f} tok/s, run #{rid})"
    if x >= 1:
        return part, None
    return part, (f"{spec_alg} is slower than the target alone: {tok_s:.1f} tok/s against {ref:.1f} tok/s "
                  f"without speculation (run #{rid}), a speed-up of {x:.2f}x")


async def _adaptive_off(ctx: SkillContext, raw: dict[str, Any], concurrency: int) -> list[str]:
    """Adaptive steps whose ladder runs step 0 alone at this concurrency (the built-in one from batch 64):
    speculation was off for the benchmark, though /server_info may show another tier by now."""
    if not raw.get("speculative_adaptive"):
        return []
    path, cfg = raw.get("speculative_adaptive_config"), None
    if isinstance(path, str) and path:
        text = await draft.read_text(ctx, path)
        try:
            cfg = json.loads(text) if text is not None else None
        except ValueError:
            cfg = None
        if not isinstance(cfg, dict):
            return []
    off = adaptive.drafting_off_from(cfg)
    if off is None or concurrency < off:
        return []
    ladder = f"the adaptive config {path}" if cfg is not None else "SGLang's built-in adaptive ladder"
    return [f"{ladder} runs step 0 alone from batch {off} (drafting disabled): at concurrency {concurrency} "
            f"speculation was off"]


async def _speedup(ctx: SkillContext, ref_key: str, tok_s: float) -> dict[str, Any] | None:
    """This bench's output throughput over the newest no-speculation bench with the same
    reference key on this host: {value, reference_run, reference_tok_s}; None without one."""
    if ctx.audit is None:
        return None
    needle = f'"reference_key": {json.dumps(ref_key)}'
    for row in await ctx.audit.step_data_history(ctx.host_name, [NAME], needle, limit=50, newest_first=True):
        if row["status"] != "ok" or row["run_id"] == ctx.run_id:
            continue
        try:
            data = json.loads(row["data"] or "{}")
        except json.JSONDecodeError:
            continue
        conf, ref = data.get("config") or {}, data.get("output_throughput")
        if conf.get("reference_key") == ref_key and not conf.get("speculative_algorithm") and ref:
            return {"value": round(tok_s / float(ref), 4), "reference_run": int(row["run_id"]),
                    "reference_tok_s": float(ref)}
    return None


def _last(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""
