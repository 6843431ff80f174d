"""SGLang facts as pure functions: speculative-arg resolution, log lines, bench_serving output,
/server_info, for each release eaglebot carries captures of (KNOWN_VERSIONS: each one's launch
table, speculative grid and log lines are in tests/fixtures/sglang/<version>/, made from the real
wheel by scripts/capture/sglang.sh). What a launch command's flags say is in cmdline.py; who
listens on the server's port in ports.py.

Nothing here talks to a host; the server and bench skills feed it text they read.
The simulator in `eaglebot/sim/sglang_pkg` applies the same resolution rules (it
cannot import this module: it runs stand-alone on the GPU host), and a test keeps
the two in agreement.
"""
from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from eaglebot.facts.sglang import cmdline

SGLANG_VERSION = "0.5.23"                 # the newest release eaglebot knows: its rules by default
# Releases whose rules eaglebot carries, each held to its real wheel's captures: the speculative hook
# (the same over the whole 11,700-row grid in both), the launch table (0.5.17 still has --cuda-graph-bs
# and --cuda-graph-max-bs; 0.5.23 refuses them as ambiguous) and the log lines.
KNOWN_VERSIONS = ("0.5.17", "0.5.23")


def rules_version(reported: str | None) -> str:
    """The release whose rules apply to a host that reports `reported` (its own, when eaglebot knows
    it; else the newest eaglebot knows)."""
    return reported if reported in KNOWN_VERSIONS else SGLANG_VERSION


def unknown_version_warning(reported: str | None) -> str | None:
    """The warning for a host whose SGLang release eaglebot carries no rules of (None: known or unsaid)."""
    if not reported or reported in KNOWN_VERSIONS:
        return None
    return (f"SGLang {reported} is running; eaglebot knows the rules of {', '.join(KNOWN_VERSIONS)} "
            f"and applies those of {SGLANG_VERSION}")

# -- speculative decoding -----------------------------------------------------------

EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})
DRAFT_TOKENS_WARNING = ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
                        "when speculative_eagle_topk == 1")
MAX_RUNNING_WARNING = ("Max running requests is reset to 48 for speculative decoding. You can override "
                       "this by explicitly setting --max-running-requests.")
SPEC_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens")


def normalize_algorithm(name: str | None) -> str | None:
    """`--speculative-algorithm` is case-insensitive; NEXTN is an alias of EAGLE."""
    if name is None:
        return None
    up = name.strip().upper()
    return "EAGLE" if up == "NEXTN" else up


def auto_spec_params(architecture: str | None, algorithm: str | None = None) -> tuple[int, int, int]:
    """(num_steps, eagle_topk, num_draft_tokens) SGLang picks from the TARGET model's architecture
    (STANDALONE: always (3, 1, 4), `_auto_choose_speculative_params`)."""
    arch = architecture or ""
    if algorithm == "STANDALONE":
        return 3, 1, 4
    if arch == "LlamaForCausalLM" or arch.startswith("Grok"):
        return 5, 4, 8
    return 3, 1, 4


@dataclass
class SpecResolution:
    """What `sglang.launch_server` will run with, or why it will refuse to start."""

    algorithm: str | None
    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    auto_chosen: bool = False
    log_warnings: list[str] = field(default_factory=list)   # lines SGLang itself logs
    error: str | None = None                                 # "AssertionError" / "TypeError"
    error_reason: str = ""                                   # a sentence for the user
    adjusted: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # key -> (asked, effective)
    advice: list[str] = field(default_factory=list)          # eaglebot's own warnings (SGLang says nothing)

    def effective(self) -> dict[str, Any]:
        return {"speculative_algorithm": self.algorithm, "speculative_num_steps": self.num_steps,
                "speculative_eagle_topk": self.topk, "speculative_num_draft_tokens": self.num_draft_tokens}


def resolve_speculative(algorithm: str | None, num_steps: int | None, topk: int | None,
                        num_draft_tokens: int | None, target_architecture: str | None = None,
                        max_running_requests: int | None = None,
                        version: str = SGLANG_VERSION) -> SpecResolution:
    """Apply SGLang `version`'s rules (REFERENCE.md, rules 1-3) to the asked flags. The releases
    eaglebot knows agree on them over their whole captured grids (tests/test_sglang_fidelity.py)."""
    algo = normalize_algorithm(algorithm)
    res = SpecResolution(algo, num_steps, topk, num_draft_tokens)
    if algo is None or algo not in EAGLE_FAMILY:
        return res
    if max_running_requests is None:
        res.log_warnings.append(MAX_RUNNING_WARNING)
    if num_steps is None:
        if topk is not None or num_draft_tokens is not None:
            res.error = "AssertionError"
            res.error_reason = ("--speculative-eagle-topk/--speculative-num-draft-tokens were given without "
                                "--speculative-num-steps: SGLang stops with a bare AssertionError; "
                                "set all three or none")
            return res
        res.num_steps, res.topk, res.num_draft_tokens = auto_spec_params(target_architecture, algo)
        res.auto_chosen = True
        return res
    if topk is None:
        res.error = "TypeError"
        res.error_reason = ("--speculative-num-steps was given without --speculative-eagle-topk: SGLang fails "
                            "with a TypeError (None comparison); set all three or none")
        return res
    if topk != 1 and num_draft_tokens is None:
        # The real hook accepts this and leaves draft tokens unset (tests/fixtures/sglang/0.5.23/spec_grid.json).
        res.advice.append("--speculative-num-draft-tokens is not set while --speculative-eagle-topk is "
                          f"{topk}: SGLang {rules_version(version)} leaves it unset (None) rather than choosing "
                          f"one; set all three")
    if topk == 1 and num_draft_tokens != num_steps + 1:
        res.num_draft_tokens = num_steps + 1
        res.log_warnings.append(DRAFT_TOKENS_WARNING)
        res.adjusted["speculative_num_draft_tokens"] = (num_draft_tokens, num_steps + 1)
    return res


def resolve_from_args(args: list[str], target_architecture: str | None,
                      version: str = SGLANG_VERSION) -> SpecResolution:
    """resolve_speculative applied to the flags of a launch command, by the rules of `version`."""
    f = cmdline.flag_values(args)
    return resolve_speculative(
        f.get("--speculative-algorithm"), cmdline.int_value(f.get("--speculative-num-steps")),
        cmdline.int_value(f.get("--speculative-eagle-topk")),
        cmdline.int_value(f.get("--speculative-num-draft-tokens")),
        target_architecture, cmdline.int_value(f.get("--max-running-requests")), version)


def target_architecture(config_json: str) -> str | None:
    """First entry of `architectures` in a model's config.json (None when unreadable)."""
    try:
        data = json.loads(config_json)
    except (ValueError, TypeError):
        return None
    archs = data.get("architectures") if isinstance(data, dict) else None
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return None


# -- server log ---------------------------------------------------------------------

READY_LINE = "The server is fired up and ready to roll!"   # the last start-up line (startup.py)
FATAL_PATTERNS = [
    re.compile(r"Scheduler hit an exception:"),
    re.compile(r"Received sigquit from a child process"),
    re.compile(r"Rank \d+ scheduler died during initialization"),
    re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static"),
    re.compile(r"Capture cuda graph failed:"),
    re.compile(r"torch\.OutOfMemoryError: CUDA out of memory"),
    re.compile(r"\[Errno 98\] error while attempting to bind on address"),
    # 0.5.17 and 0.5.23 (kv_cache_configurator.py): the weights alone exceed --mem-fraction-static's budget
    re.compile(r"Loaded weights leave no GPU memory for the KV cache"),
]
# The first three say THAT a process died; the others say why. A crash logs both (the scheduler's
# traceback ends in the cause, then the launcher's sigquit line), and the cause is what to report.
_GENERIC = 3
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b.*:")


def find_fatal(text: str) -> str | None:
    """The fatal line of a server log that says most (stripped), or None: a specific cause (out of
    memory, the KV budget, a bind error...) over a process that died; for a scheduler's exception
    with no known cause, that line with the exception its traceback ends in."""
    lines = text.splitlines()
    first: tuple[int, int] | None = None   # (pattern rank, line index) of the most telling line
    for i, line in enumerate(lines):
        for rank, pat in enumerate(FATAL_PATTERNS):
            if pat.search(line):
                key = (0 if rank >= _GENERIC else 1, i)
                if first is None or key < first:
                    first = key
                break
    if first is None:
        return None
    i = first[1]
    found = lines[i].strip()
    if FATAL_PATTERNS[0].search(found) and first[0] == 1:
        cause = next((ln.strip() for ln in lines[i + 1:] if _EXCEPTION_LINE.match(ln)), None)
        if cause:
            return f"{found} ... {cause}"
    return found


def tail(text: str, n: int = 40) -> str:
    return "\n".join(text.splitlines()[-n:])


# -- /server_info ---------------------------------------------------------------------

def parse_server_info(body: str) -> dict[str, Any]:
    """Effective speculative settings, version and average acceptance from /server_info."""
    try:
        data = json.loads(body)
    except RecursionError:   # the server's answer: a hostile one nests it 200,000 deep
        raise ValueError("server_info is nested too deep to read") from None
    if not isinstance(data, dict):
        raise ValueError("server_info is not a JSON object")
    states = data.get("internal_states") or []
    accepts = [s["avg_spec_accept_length"] for s in states
               if isinstance(s, dict) and isinstance(s.get("avg_spec_accept_length"), (int, float))]
    return {
        "version": data.get("version"),
        "effective": {k: data.get(k) for k in (*SPEC_KEYS, "speculative_draft_model_path")},
        "avg_spec_accept_length": statistics.fmean(accepts) if accepts else None,
        "raw": data,
    }


# -- bench_serving ---------------------------------------------------------------------

TABLE_KEYS = {
    "Backend": "backend",
    "Traffic request rate": "request_rate",
    "Max request concurrency": "max_concurrency",
    "Successful requests": "completed",
    "Benchmark duration (s)": "duration",
    "Total input tokens": "total_input_tokens",
    "Total input text tokens": "total_input_text_tokens",
    "Total generated tokens": "total_output_tokens",
    "Total generated tokens (retokenized)": "total_output_tokens_retokenized",
    "Request throughput (req/s)": "request_throughput",
    "Input token throughput (tok/s)": "input_throughput",
    "Output token throughput (tok/s)": "output_throughput",
    "Peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "Peak concurrent requests": "max_concurrent_requests",
    "Total token throughput (tok/s)": "total_throughput",
    "Concurrency": "concurrency",
    "Accept length": "accept_length",
}
_LAT = re.compile(r"^(Mean|Median|P90|P95|P99|Max) (E2E Latency|TTFT|TPOT|ITL) \(ms\)$")
_LAT_KEY = {"E2E Latency": "e2e_latency", "TTFT": "ttft", "TPOT": "tpot", "ITL": "itl"}


def _num(v: str) -> Any:
    try:
        f = float(v)
    except ValueError:
        return v
    return int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f


def parse_bench_table(text: str) -> dict[str, Any]:
    """The `Serving Benchmark Result` table printed by bench_serving (the last one in `text`)."""
    start = text.rfind("Serving Benchmark Result")
    if start < 0:
        return {}
    out: dict[str, Any] = {}
    for line in text[start:].splitlines()[1:]:
        s = line.strip()
        if s.startswith("=" * 10):
            break
        if ":" not in s or s.startswith("-"):
            continue
        label, _, value = s.partition(":")
        label, value = label.strip(), value.strip()
        m = _LAT.match(label)
        if m:
            key = f"{m[1].lower()}_{_LAT_KEY[m[2]]}_ms"
        elif label in TABLE_KEYS:
            key = TABLE_KEYS[label]
        else:
            continue
        out[key] = _num(value) if value else None
    return out


def parse_bench_jsonl(text: str) -> dict[str, Any] | None:
    """The last JSON object of a bench_serving --output-file (the file is appended to)."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


# name -> (unit, better) of the metrics a benchmark reports
BENCH_METRICS: dict[str, tuple[str, str]] = {
    "output_throughput": ("tok/s", "higher"),
    "request_throughput": ("req/s", "higher"),
    "accept_length": ("tok", "higher"),
    "median_ttft_ms": ("ms", "lower"),
    "p99_ttft_ms": ("ms", "lower"),
    "median_itl_ms": ("ms", "lower"),
    "mean_e2e_latency_ms": ("ms", "lower"),
    "completed": ("req", "higher"),
    "avg_spec_accept_length": ("tok", "higher"),
}


def metric_direction(name: str) -> str:
    if name in BENCH_METRICS:
        return BENCH_METRICS[name][1]
    low = name.lower()
    if low.endswith("_ms") or "latency" in low or "ttft" in low or "itl" in low or "tpot" in low:
        return "lower"
    return "higher"


def bench_numbers(result: dict[str, Any]) -> dict[str, float]:
    """The benchmark's numeric metrics we record, from a JSONL object or a parsed table."""
    out: dict[str, float] = {}
    for name in BENCH_METRICS:
        v = result.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[name] = float(v)
    return out


def median_numbers(runs: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for r in runs for k in r}
    return {k: float(statistics.median([r[k] for r in runs if k in r])) for k in sorted(keys)}
