"""SIMULATED `python -m sglang.benchmark.serving` (SGLang 0.5.23 flags, table and JSONL).

It really sends each request to the server's /generate over HTTP (so a dead or
unready server fails the benchmark), but timings come from the SIMULATED server's
model, replayed on a virtual clock, so a run takes well under a second.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Benchmark the online serving throughput. (SIMULATED)")
    a = p.add_argument
    a("--backend", type=str, default="sglang")
    a("--base-url", type=str, default=None)
    a("--host", type=str, default="0.0.0.0")
    a("--port", type=int)
    a("--dataset-name", type=str, default="sharegpt",
      choices=["sharegpt", "random", "random-ids", "generated-shared-prefix", "mmmu", "random-image"])
    a("--dataset-path", type=str, default="")
    a("--model", type=str)
    a("--tokenizer", type=str)
    a("--num-prompts", type=int, default=1000)
    a("--sharegpt-output-len", type=int)
    a("--random-input-len", type=int, default=1024)
    a("--random-output-len", type=int, default=1024)
    a("--random-range-ratio", type=float, default=0.0)
    a("--request-rate", type=float, default=float("inf"))
    a("--max-concurrency", type=int, default=None)
    a("--output-file", type=str)
    a("--output-details", action="store_true")
    a("--disable-tqdm", action="store_true")
    a("--disable-stream", action="store_true")
    a("--return-logprob", action="store_true")
    a("--seed", type=int, default=1)
    a("--disable-ignore-eos", action="store_true")
    a("--extra-request-body", type=str)
    a("--apply-chat-template", action="store_true")
    a("--profile", action="store_true")
    a("--flush-cache", action="store_true")
    a("--warmup-requests", type=int, default=1)
    a("--tag", type=str)
    return p


def _http(url: str, body: dict[str, Any] | None = None, timeout: float = 60.0, batch: int | None = None
          ) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"content-type": "application/json"}
    if batch:
        # the requests are replayed on a virtual clock, so the SIMULATED server cannot see how many
        # run together: the benchmark says it (the real one need not)
        headers["X-Eagle-Sim-Batch"] = str(batch)
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _pct(values: list[float], q: float) -> float:
    """numpy.percentile's linear interpolation."""
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _stats(prefix: str, values_s: list[float], out: dict[str, Any], pcts: tuple[int, ...] = (90, 95, 99)) -> None:
    ms = [v * 1000 for v in values_s] or [0.0]
    out[f"mean_{prefix}_ms"] = statistics.fmean(ms)
    out[f"median_{prefix}_ms"] = statistics.median(ms)
    out[f"std_{prefix}_ms"] = statistics.pstdev(ms)
    for p in pcts:
        out[f"p{p}_{prefix}_ms"] = _pct(ms, p)


def _row(label: str, value: object) -> str:
    return "{:<40} {:<10}".format(label + ":", value)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(f"benchmark_args={args}")
    print("SIMULATED sglang.benchmark.serving (eaglebot sandbox): timings come from the simulated server.")
    base = args.base_url or f"http://{args.host}:{args.port or 30000}"
    if args.dataset_name not in ("random", "random-ids"):
        print(f"SIMULATED benchmark supports only --dataset-name random/random-ids, not {args.dataset_name}",
              file=sys.stderr)
        return 2
    rng = random.Random(args.seed)

    def length(n: int) -> int:
        if args.random_range_ratio >= 1.0:
            return n
        return rng.randint(max(1, int(n * args.random_range_ratio)), n)

    reqs = [(length(args.random_input_len), length(args.random_output_len)) for _ in range(args.num_prompts)]

    def conc_of() -> int:
        return args.max_concurrency or max(1, len(reqs))
    print(f"#Input tokens: {sum(r[0] for r in reqs)}")
    print(f"#Output tokens: {sum(r[1] for r in reqs)}")

    def send(in_len: int, out_len: int) -> dict[str, Any] | None:
        ids = [rng.randrange(100, 30000) for _ in range(min(in_len, 64))] + [0] * max(0, in_len - 64)
        body: dict[str, Any] = {"input_ids": ids,
                                "sampling_params": {"max_new_tokens": out_len, "temperature": 0.0,
                                                    "ignore_eos": True},
                                "stream": False}
        try:
            code, data = _http(base + "/generate", body, batch=min(conc_of(), len(reqs)) or 1)
        except (OSError, urllib.error.URLError) as e:
            return {"error": str(e)}
        if code != 200:
            return {"error": f"HTTP {code}: {data[:200].decode(errors='replace')}"}
        result: dict[str, Any] | None = json.loads(data)
        return result

    print(f"Starting warmup with {args.warmup_requests} sequences...")
    warm = send(min(reqs[0][0], 16) if reqs else 16, 16)
    if warm is None or "error" in warm:
        err = (warm or {}).get("error", "no response")
        print("Traceback (most recent call last):\n  File \"sglang/benchmark/serving.py\", line 1581, in benchmark")
        print(f"ValueError: Initial test run failed - Please make sure benchmark arguments are correctly "
              f"specified. Error: {err}")
        return 1
    print(f"Warmup completed with {args.warmup_requests} sequences. Starting main benchmark run...")
    if args.flush_cache:
        _http(base + "/flush_cache", {})
        time.sleep(0.05)
    conc = args.max_concurrency or max(1, len(reqs))
    with ThreadPoolExecutor(max_workers=min(conc, 32)) as pool:
        results = list(pool.map(lambda r: send(*r), reqs))

    # Replay on a virtual clock: `conc` slots, each request on the earliest free one.
    slots = [0.0] * conc
    ttfts: list[float] = []
    itls: list[float] = []
    e2es: list[float] = []
    tpots: list[float] = []
    spans: list[tuple[float, float]] = []
    completed = total_in = total_out = 0
    for (in_len, out_len), res in zip(reqs, results):
        if not res or "error" in res:
            continue
        meta = res.get("meta_info", {})
        ttft, itl = float(meta.get("simulated_ttft", 0.0)), float(meta.get("simulated_itl", 0.0))
        e2e = ttft + max(0, out_len - 1) * itl
        i = min(range(conc), key=lambda k: slots[k])
        start = slots[i]
        slots[i] = start + e2e
        spans.append((start, start + e2e))
        completed += 1
        total_in += in_len
        total_out += out_len
        ttfts.append(ttft)
        e2es.append(e2e)
        itls.extend([itl] * max(0, min(out_len - 1, 64)))
        tpots.append(itl)
    duration = max((e for _, e in spans), default=0.0) or 1e-9
    code, data = _http(base + "/server_info")
    server_info = json.loads(data) if code == 200 else {}
    states = server_info.get("internal_states") or [{}]
    accept = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
    out: dict[str, Any] = {"tag": args.tag, "backend": args.backend, "dataset_name": args.dataset_name,
                 "request_rate": args.request_rate, "max_concurrency": args.max_concurrency,
                 "sharegpt_output_len": args.sharegpt_output_len, "random_input_len": args.random_input_len,
                 "random_output_len": args.random_output_len, "random_range_ratio": args.random_range_ratio,
                 "duration": duration, "completed": completed, "total_input_tokens": total_in,
                 "total_input_text_tokens": total_in, "total_input_vision_tokens": 0,
                 "total_output_tokens": total_out,
                 "total_output_tokens_retokenized": total_out,
                 "request_throughput": completed / duration, "input_throughput": total_in / duration,
                 "output_throughput": total_out / duration,
                 "total_throughput": (total_in + total_out) / duration}
    per_req = (1.0 / tpots[0]) if tpots and tpots[0] else 0.0
    out["max_output_tokens_per_s"] = per_req * min(conc, completed) if completed else 0.0
    out["max_concurrent_requests"] = min(conc, completed)
    out["concurrency"] = sum(e - s for s, e in spans) / duration if spans else 0.0
    out["accept_length"] = accept
    _stats("e2e_latency", e2es, out)
    _stats("ttft", ttfts, out)
    _stats("tpot", tpots, out)
    _stats("itl", itls, out)
    max_itl_ms = max(itls, default=0.0) * 1000   # printed, but not a key of 0.5.23's record
    out["server_info"] = server_info
    if completed == 0:
        print("All requests failed: check the server log. (SIMULATED)")

    f2: Callable[[float], str] = lambda v: f"{v:.2f}"  # noqa: E731
    lines = ["\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="),
             _row("Backend", args.backend),
             _row("Traffic request rate", args.request_rate),
             _row("Max request concurrency", args.max_concurrency if args.max_concurrency else "not set"),
             _row("Successful requests", completed),
             _row("Benchmark duration (s)", f2(duration)),
             _row("Total input tokens", total_in),
             _row("Total input text tokens", total_in),
             _row("Total generated tokens", total_out),
             _row("Total generated tokens (retokenized)", total_out),
             _row("Request throughput (req/s)", f2(out["request_throughput"])),
             _row("Input token throughput (tok/s)", f2(out["input_throughput"])),
             _row("Output token throughput (tok/s)", f2(out["output_throughput"])),
             _row("Peak output token throughput (tok/s)", f2(out["max_output_tokens_per_s"])),
             _row("Peak concurrent requests", out["max_concurrent_requests"]),
             _row("Total token throughput (tok/s)", f2(out["total_throughput"])),
             _row("Concurrency", f2(out["concurrency"]))]
    if accept is not None:
        lines.append(_row("Accept length", f2(accept)))
    lines.append("{s:{c}^{n}}".format(s="End-to-End Latency", n=50, c="-"))
    for k, lab in (("mean", "Mean"), ("median", "Median"), ("p90", "P90"), ("p95", "P95"), ("p99", "P99")):
        lines.append(_row(f"{lab} E2E Latency (ms)", f2(out[f"{k}_e2e_latency_ms"])))
    lines.append("{s:{c}^{n}}".format(s="Time to First Token", n=50, c="-"))
    for k, lab in (("mean", "Mean"), ("median", "Median"), ("p90", "P90"), ("p95", "P95"), ("p99", "P99")):
        lines.append(_row(f"{lab} TTFT (ms)", f2(out[f"{k}_ttft_ms"])))
    lines.append("{s:{c}^{n}}".format(s="Time per Output Token (excl. 1st token)", n=50, c="-"))
    for k, lab in (("mean", "Mean"), ("median", "Median"), ("p90", "P90"), ("p95", "P95"), ("p99", "P99")):
        lines.append(_row(f"{lab} TPOT (ms)", f2(out[f"{k}_tpot_ms"])))
    lines.append("{s:{c}^{n}}".format(s="Inter-Token Latency", n=50, c="-"))
    for k, lab in (("mean", "Mean"), ("median", "Median"), ("p90", "P90"), ("p95", "P95"), ("p99", "P99")):
        lines.append(_row(f"{lab} ITL (ms)", f2(out[f"{k}_itl_ms"])))
    lines.append(_row("Max ITL (ms)", f2(max_itl_ms)))
    lines.append("=" * 50)
    print("\n".join(lines))
    if args.output_file:
        with open(args.output_file, "a") as f:
            f.write(json.dumps(out) + "\n")
    return 0 if completed else 1


if __name__ == "__main__":
    sys.exit(main())
