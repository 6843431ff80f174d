"""The product and the simulator held to the REAL SGLang 0.5.23 (tests/fixtures/sglang/0.5.23/, made by
scripts/capture/sglang.sh from the real wheel): its launch parser, its speculative hook over a grid,
its log lines, its argparse errors."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from eaglebot.facts import sglang, sglang_phase, sglang_table
from test_sglang_sim import Sim

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "sglang" / "0.5.23"


def test_the_simulator_and_the_fallback_check_carry_the_captured_table_byte_for_byte():
    captured = (FIX / "server_args.json").read_bytes()
    assert (ROOT / "bot" / "sim" / "sglang_pkg" / "sglang" / "srt" / "server_args.json").read_bytes() == captured
    assert (ROOT / "bot" / "facts" / "data" / "sglang-0.5.23-server_args.json").read_bytes() == captured
    table = json.loads(captured)
    assert table["sglang"] == "0.5.23" and table["allow_abbrev"] is True and len(table["options"]) == 532


def _errors() -> list[tuple[list[str], str, int]]:
    out = []
    for f in sorted(FIX.glob("argparse-error-*.txt")):
        argv_line, err, rc = f.read_text().splitlines()
        out.append((argv_line.removeprefix("argv: ").split(), err, int(rc.removeprefix("exit "))))
    return out


def test_the_real_parser_refuses_cuda_graph_bs_as_ambiguous():
    errs = {tuple(a): e for a, e, _ in _errors()}
    assert errs[("--cuda-graph-bs", "1", "2", "4")] == ("launch_server.py: error: ambiguous option: --cuda-graph-bs "
                                                          "could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill")


@pytest.mark.parametrize("argv,error,rc", _errors(), ids=lambda v: str(v)[:30])
def test_the_fallback_table_check_refuses_with_sglangs_own_words(argv, error, rc):
    v = sglang_table.check_with_table(["--model-path", "/m", *argv], "0.5.23")
    assert rc == 2 and v.kind == "refused" and v.message == error


def test_the_simulated_launch_server_refuses_exactly_as_the_real_one(tmp_path):
    sim = Sim(tmp_path)
    for argv, error, rc in _errors():
        p = subprocess.run([sim.vars["python"], "-m", "sglang.launch_server", "--model-path", str(sim.target), *argv],
                           capture_output=True, text=True, timeout=60)
        assert (p.returncode, p.stderr.strip().splitlines()[-1]) == (rc, error)


def test_the_host_probe_reads_the_simulated_hosts_own_parser(tmp_path):
    sim = Sim(tmp_path)
    cmd = sglang_table.probe_command(sim.vars["python"], ["--model-path", "/m", "--cuda-graph-bs", "1", "2"])
    p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
    v = sglang_table.parse_probe(p.returncode, p.stdout, p.stderr)
    assert v.kind == "refused" and "could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill" in v.message
    cmd = sglang_table.probe_command(sim.vars["python"], ["--model-path", "/m", "--cuda-graph-bs-decode", "1", "2",
                                                          "--tp", "2", "--disable-cuda-graph"])
    p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert sglang_table.parse_probe(p.returncode, p.stdout, p.stderr).version == "0.5.23"
    p = subprocess.run(["sh", "-c", sglang_table.probe_command("/usr/bin/env", ["--model-path", "/m"])],
                       capture_output=True, text=True, timeout=60)
    assert sglang_table.parse_probe(p.returncode, p.stdout, p.stderr).kind == "unavailable"


# Launch flags as they appear in the product's docs, playbooks and skills: each must exist in the real
# 0.5.23 parser and be unambiguous there (argparse accepts a unique prefix; `--tp` is one).
SGLANG_FLAG = re.compile(r"(?<![\w-])(--(?:speculative|cuda-graph|mem-fraction|tp|dp|model|disable-cuda|"
                         r"enable-torch|max-running|context-length|chunked-prefill|attention-backend|"
                         r"kv-cache|quantization|trust-remote)[a-z0-9-]*)(?![\w\"'-])")   # not a "prefix" in code
DOC_FILES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
             *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "playbooks").glob("*.yaml")),
             "skills/server_launch.py", "bot/facts/sglang_phase.py", "bot/facts/sglang.py",
             "bot/facts/sglang_args.py", "bot/history/attribution.py"]


def _documented_flags() -> dict[str, str]:
    found: dict[str, str] = {}
    for rel in DOC_FILES:
        for m in SGLANG_FLAG.finditer((ROOT / rel).read_text()):
            found.setdefault(m.group(1), rel)
    return found


def test_every_documented_launch_flag_is_known_and_unambiguous_in_the_real_parser():
    flags = _documented_flags()
    assert "--speculative-num-draft-tokens" in flags and "--mem-fraction-static" in flags
    parser = sglang_table.launch_parser("0.5.23")
    bad = {}
    for flag, where in flags.items():
        try:
            parser._parse_optional(flag)   # argparse's own lookup: exact, alias or unique prefix
        except sglang_table.Refused as e:
            bad[flag] = f"{where}: {e}"
            continue
        hit = parser._parse_optional(flag)
        if hit is None or hit[0] is None:
            bad[flag] = f"{where}: unknown option"
    assert bad == {}


# -- the speculative grid ----------------------------------------------------------------------

def _grid():
    g = json.loads((FIX / "spec_grid.json").read_text())
    return g, [dict(zip(("algorithm", "steps", "topk", "draft_tokens", "draft_path", "effective", "error",
                         "warnings"), row)) for row in g["rows"]]


def test_the_grid_covers_what_the_issue_asks():
    g, rows = _grid()
    assert g["hook"].endswith("speculative_hook.py:_handle_eagle_family") and len(rows) == 2 * 9 * 5 * 65 * 2
    assert {r["algorithm"] for r in rows} == {"EAGLE", "EAGLE3"} and {r["draft_path"] for r in rows} == {True, False}
    assert {r["steps"] for r in rows} == {None, *range(1, 9)} and {r["topk"] for r in rows} == {None, 1, 2, 4, 8}
    assert {r["draft_tokens"] for r in rows} == {None, *range(1, 65)}
    assert any(r["error"] for r in rows) and any(r["effective"] for r in rows)   # refusals and runs both


def test_the_products_speculative_rule_agrees_with_the_real_hook_on_the_whole_grid():
    g, rows = _grid()
    texts = g["warnings"]
    disagree = []
    for r in rows:
        res = sglang.resolve_speculative(r["algorithm"], r["steps"], r["topk"], r["draft_tokens"], "LlamaForCausalLM")
        real_warnings = [texts[i] for i in r["warnings"]]
        eff = res.effective()
        ours = (res.error, None if res.error else [eff["speculative_num_steps"], eff["speculative_eagle_topk"],
                                                   eff["speculative_num_draft_tokens"]], res.log_warnings)
        real = (r["error"].split(":")[0] if r["error"] else None, r["effective"], real_warnings)
        if ours != real:
            disagree.append((r, ours, real))
    assert disagree == []


def test_the_real_rewrite_is_topk_1_only_with_the_exact_warning():
    g, rows = _grid()
    rewritten = [r for r in rows if r["effective"] and r["draft_tokens"] is not None
                 and r["effective"][2] != r["draft_tokens"]]
    assert rewritten and all(r["topk"] == 1 and r["effective"][2] == r["steps"] + 1 for r in rewritten)
    assert sglang.DRAFT_TOKENS_WARNING in g["warnings"] and sglang.MAX_RUNNING_WARNING in g["warnings"]


# -- log lines -----------------------------------------------------------------------------------

def _log_lines() -> dict[str, list[dict]]:
    return json.loads((FIX / "log_lines.json").read_text())["lines"]


def test_every_line_the_product_reads_comes_from_the_real_package():
    lines = _log_lines()
    def source(key: str) -> str:
        return " ".join(x["text"] for x in lines[key])
    assert sglang.READY_LINE in source("ready")
    assert "Decode batch" in source("decode_stats") and "#running-req" in source("decode_stats")
    for key, pat in (("fatal_scheduler_exception", 0), ("fatal_sigquit", 1), ("fatal_rank_died", 2),
                     ("fatal_not_enough_memory", 3), ("fatal_cuda_graph", 4)):
        fragment = sglang.FATAL_PATTERNS[pat].pattern.replace("\\", "").replace("d+", "{rank}")
        assert fragment.split("{")[0] in source(key), key
    for fragment, _ in sglang_phase.PHASES:
        if "graph" in fragment:
            assert any(fragment.strip() in x["text"] or "graph_backend[model_runner.device]} " +
                       fragment.strip().split()[-1] in x["text"] for x in lines[fragment.split()[-1] == "begin"
                                                                                and "capture_cuda_graph_begin"
                                                                                or "capture_cuda_graph_end"])
    for key, entries in lines.items():
        assert entries, f"no source line found for {key}"
        assert all(e["file"].startswith("sglang/srt/") and e["line"] > 0 for e in entries)


# -- bench_serving -------------------------------------------------------------------------------

def _real_record() -> dict:
    return json.loads((FIX / "bench_serving.jsonl").read_text().splitlines()[-1])


def test_the_jsonl_parser_keeps_every_key_of_the_real_record():
    real = _real_record()
    assert len(real) >= 45
    parsed = sglang.parse_bench_jsonl((FIX / "bench_serving.jsonl").read_text())
    assert parsed == real
    nums = sglang.bench_numbers(parsed)
    assert nums["completed"] == 8 and nums["output_throughput"] == real["output_throughput"]
    assert set(nums) == {k for k in sglang.BENCH_METRICS if isinstance(real.get(k), (int, float))}


def test_the_table_parser_reads_the_real_printed_table_as_the_record_says():
    text = (FIX / "bench_serving_stdout.txt").read_text()
    table = sglang.parse_bench_table(text)
    real = _real_record()
    rows = [ln for ln in text[text.rfind("Serving Benchmark Result"):].splitlines() if ":" in ln]
    assert len(table) == len(rows) == 38          # every printed row is read
    for key, value in table.items():
        if isinstance(real.get(key), (int, float)) and isinstance(value, (int, float)):
            assert value == real[key] or abs(value - real[key]) <= 0.006, key   # printed with 2 decimals


def test_the_simulated_benchmark_writes_the_real_records_keys_and_table_labels(tmp_path):
    from test_sglang_sim import free_port, wait_status
    sim = Sim(tmp_path)
    port = free_port()
    p = sim.spec_server(port, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                        "--speculative-num-draft-tokens", "4")
    try:
        wait_status(port, "/health", 200, p)
        out = tmp_path / "b.jsonl"
        b = subprocess.run([sim.vars["python"], "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url",
                            f"http://127.0.0.1:{port}", "--dataset-name", "random-ids", "--random-input-len", "128",
                            "--random-output-len", "32", "--random-range-ratio", "1.0", "--num-prompts", "8",
                            "--max-concurrency", "4", "--flush-cache", "--output-file", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert b.returncode == 0, b.stderr
    finally:
        sim.stop_all()
    ours = json.loads(out.read_text().splitlines()[-1])
    assert set(ours) == set(_real_record())

    def labels(text: str) -> list[str]:
        body = text[text.rfind("Serving Benchmark Result"):]
        return [ln.split(":")[0].strip() for ln in body.splitlines() if ":" in ln]
    assert labels(b.stdout) == labels((FIX / "bench_serving_stdout.txt").read_text())


def test_topk_above_1_without_draft_tokens_runs_in_the_real_hook_so_it_is_a_warning_not_a_refusal():
    _, rows = _grid()
    loose = [r for r in rows if r["steps"] and r["topk"] and r["topk"] > 1 and r["draft_tokens"] is None]
    assert loose and all(r["error"] is None and r["effective"][2] is None for r in loose)
    res = sglang.resolve_speculative("EAGLE3", 3, 4, None, "LlamaForCausalLM")
    assert res.error is None and "--speculative-num-draft-tokens is not set" in res.advice[0]


def _real_bench_options() -> dict[str, dict]:
    rows = json.loads((FIX / "bench_serving_args.json").read_text())["options"]
    return {opt: row for row in rows for opt in row["options"]}


def test_every_bench_flag_the_product_passes_exists_in_the_real_bench_serving():
    from eaglebot.skills.bench_serving import Params, bench_argv
    real = _real_bench_options()
    argv = bench_argv(Params(), "/x.jsonl")
    flags = [a for a in argv if a.startswith("--")]
    assert flags and [f for f in flags if f not in real] == []
    assert real["--dataset-name"]["choices"] is None or "random-ids" in real["--dataset-name"]["choices"]


def test_the_simulated_bench_serving_knows_only_real_options_with_the_real_shapes():
    import argparse
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "sim_bench", ROOT / "bot" / "sim" / "sglang_pkg" / "sglang" / "benchmark" / "serving.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    real = _real_bench_options()
    for action in mod.build_parser()._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for opt in action.option_strings:
            assert opt in real, opt
            assert action.dest == real[opt]["dest"] and action.nargs == real[opt]["nargs"], opt
