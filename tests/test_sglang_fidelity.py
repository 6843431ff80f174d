"""The product and the simulator held to the REAL SGLang releases eaglebot knows (0.5.17 and 0.5.23):
each one's launch parser, speculative hook over a grid, log lines, meta_info keys and argparse outcomes
(tests/fixtures/sglang/<version>/, made by scripts/capture/sglang.sh from the real wheel), and for 0.5.17
a REAL server on an H200 (tests/fixtures/sglang/0.5.17/h200-real/: its /server_info, a /generate
meta_info, its log, a real bench_serving run, the project's own relaunch). Wherever the two releases
differ, both are covered."""
from __future__ import annotations

import gzip
import json
import re
import subprocess
from pathlib import Path

import pytest

from eaglebot.facts.bench import sanity
from eaglebot.facts.sglang import launch_table, release, startup
from test_sglang_sim import Sim, free_port, get, wait_status

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = release.KNOWN_VERSIONS
REAL = ROOT / "tests" / "fixtures" / "sglang" / "0.5.17" / "h200-real"
OPTIONS = {"0.5.17": 475, "0.5.23": 532}


def fix(version: str) -> Path:
    return ROOT / "tests" / "fixtures" / "sglang" / version


@pytest.mark.parametrize("version", VERSIONS)
def test_the_simulator_and_the_fallback_check_carry_the_captured_table_byte_for_byte(version):
    captured = (fix(version) / "server_args.json.gz").read_bytes()
    assert (ROOT / "src" / "eaglebot" / "sim" / "sglang_pkg" / "sglang" / "srt" / f"server_args-{version}.json.gz").read_bytes() \
        == captured
    assert (ROOT / "src" / "eaglebot" / "facts" / "data" / f"sglang-{version}-server_args.json.gz").read_bytes() == captured
    table = json.loads(gzip.decompress(captured))
    assert table["sglang"] == version and table["allow_abbrev"] is True and len(table["options"]) == OPTIONS[version]


def _outcomes(version: str) -> list[tuple[list[str], str, int]]:
    out = []
    for f in sorted(fix(version).glob("argparse-*.txt")):
        argv_line, last, rc = f.read_text().splitlines()
        out.append((argv_line.removeprefix("argv: ").split(), last, int(rc.removeprefix("exit "))))
    assert len(out) == 4, version
    return out


def test_cuda_graph_bs_is_ambiguous_in_0_5_23_and_a_deprecated_alias_in_0_5_17():
    new = {tuple(a): (e, rc) for a, e, rc in _outcomes("0.5.23")}
    old = {tuple(a): (e, rc) for a, e, rc in _outcomes("0.5.17")}
    assert new[("--cuda-graph-bs", "1", "2", "4")] == ("launch_server.py: error: ambiguous option: --cuda-graph-bs "
                                                         "could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill", 2)
    assert old[("--cuda-graph-bs", "1", "2", "4")] == ("accepted", 0)
    assert old[("--cuda-graph-max-bs", "8")] == ("accepted", 0)
    assert new[("--no-such-flag", "1")] == old[("--no-such-flag", "1")]


@pytest.mark.parametrize("version,argv,last,rc", [(v, *o) for v in VERSIONS for o in _outcomes(v)],
                         ids=lambda v: str(v)[:30])
def test_the_fallback_table_check_agrees_with_the_real_parser(version, argv, last, rc):
    v = launch_table.check_with_table(["--model-path", "/m", *argv], version)
    assert (v.kind, v.message) == (("ok", "") if rc == 0 else ("refused", last))


@pytest.mark.parametrize("version", VERSIONS)
def test_the_simulated_launch_server_refuses_and_accepts_exactly_as_the_real_one(tmp_path, version):
    sim = Sim(tmp_path, version)
    for argv, last, rc in _outcomes(version):
        if rc == 0:   # accepted: the simulated host's own parser says so, as the real one did
            cmd = launch_table.probe_command(sim.vars["python"], ["--model-path", str(sim.target), *argv])
            p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
            assert launch_table.parse_probe(p.returncode, p.stdout, p.stderr).version == version
            continue
        p = subprocess.run([sim.vars["python"], "-m", "sglang.launch_server", "--model-path", str(sim.target), *argv],
                           capture_output=True, text=True, timeout=60)
        assert (p.returncode, p.stderr.strip().splitlines()[-1]) == (rc, last)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_host_probe_reads_the_simulated_hosts_own_parser_and_release(tmp_path, version):
    sim = Sim(tmp_path, version)
    cmd = launch_table.probe_command(sim.vars["python"], ["--model-path", "/m", "--cuda-graph-bs", "1", "2"])
    p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
    v = launch_table.parse_probe(p.returncode, p.stdout, p.stderr)
    if version == "0.5.23":
        assert v.kind == "refused" and "could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill" in v.message
    else:
        assert (v.kind, v.version) == ("ok", "0.5.17")
    cmd = launch_table.probe_command(sim.vars["python"], ["--model-path", "/m", "--cuda-graph-bs-decode", "1", "2",
                                                          "--tp", "2", "--disable-cuda-graph"])
    p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert launch_table.parse_probe(p.returncode, p.stdout, p.stderr).version == version
    p = subprocess.run(["sh", "-c", launch_table.probe_command("/usr/bin/env", ["--model-path", "/m"])],
                       capture_output=True, text=True, timeout=60)
    assert launch_table.parse_probe(p.returncode, p.stdout, p.stderr).kind == "missing"   # not a Python at all


# Launch flags as they appear in the product's docs, playbooks and skills: each must exist in every real
# parser eaglebot knows and be unambiguous there (argparse accepts a unique prefix; `--tp` is one).
SGLANG_FLAG = re.compile(r"(?<![\w-])(--(?:speculative|cuda-graph|mem-fraction|tp|dp|model|disable-cuda|"
                         r"enable-torch|max-running|context-length|chunked-prefill|attention-backend|"
                         r"kv-cache|quantization|trust-remote|load-format|sampling-backend)[a-z0-9-]*)(?![\w\"'-])")
DOC_FILES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
             *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src" / "eaglebot" / "playbooks").glob("*.yaml")),
             "src/eaglebot/skills/server_launch.py", "src/eaglebot/facts/sglang/startup.py", "src/eaglebot/facts/sglang/release.py",
             "src/eaglebot/facts/sglang/cmdline.py", "src/eaglebot/history/attribution.py", "tests/gpu/real_sglang_bed.py"]
# Documented as what one release has and the other does not (docs/gpu-validation.md, REFERENCE.md).
ONLY_IN = {"--cuda-graph-bs": "0.5.17", "--cuda-graph-max-bs": "0.5.17",
           "--speculative-dflash-draft-window-size": "0.5.17"}   # (docs/sglang-releases.md)


def _documented_flags() -> dict[str, str]:
    found: dict[str, str] = {}
    for rel in DOC_FILES:
        for m in SGLANG_FLAG.finditer((ROOT / rel).read_text()):
            found.setdefault(m.group(1), rel)
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_every_documented_launch_flag_is_known_and_unambiguous_in_the_real_parser(version):
    flags = _documented_flags()
    assert "--speculative-num-draft-tokens" in flags and "--mem-fraction-static" in flags
    parser = launch_table.launch_parser(version)
    bad = {}
    for flag, where in flags.items():
        if ONLY_IN.get(flag, version) != version:
            continue
        try:
            hit = parser._parse_optional(flag)   # argparse's own lookup: exact, alias or unique prefix
        except launch_table.Refused as e:
            bad[flag] = f"{where}: {e}"
            continue
        if hit is None or hit[0] is None:
            bad[flag] = f"{where}: unknown option"
    assert bad == {}


# -- the speculative grid ----------------------------------------------------------------------

def _grid(version: str):
    g = json.loads(gzip.decompress((fix(version) / "spec_grid.json.gz").read_bytes()))
    return g, [dict(zip(("algorithm", "steps", "topk", "draft_tokens", "draft_path", "effective", "error",
                         "warnings"), row)) for row in g["rows"]]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_grid_covers_what_the_issue_asks(version):
    g, rows = _grid(version)
    assert g["sglang"] == version and len(rows) == 2 * 9 * 5 * 65 * 2
    assert g["hook"].endswith("speculative_hook.py:_handle_eagle_family")
    assert {r["algorithm"] for r in rows} == {"EAGLE", "EAGLE3"} and {r["draft_path"] for r in rows} == {True, False}
    assert {r["steps"] for r in rows} == {None, *range(1, 9)} and {r["topk"] for r in rows} == {None, 1, 2, 4, 8}
    assert {r["draft_tokens"] for r in rows} == {None, *range(1, 65)}
    assert any(r["error"] for r in rows) and any(r["effective"] for r in rows)   # refusals and runs both


@pytest.mark.parametrize("version", VERSIONS)
def test_the_products_speculative_rule_agrees_with_the_real_hook_on_the_whole_grid(version):
    g, rows = _grid(version)
    texts = g["warnings"]
    disagree = []
    for r in rows:
        res = release.resolve_speculative(r["algorithm"], r["steps"], r["topk"], r["draft_tokens"], "LlamaForCausalLM",
                                         version=version)
        real_warnings = [texts[i] for i in r["warnings"]]
        eff = res.effective()
        ours = (res.error, None if res.error else [eff["speculative_num_steps"], eff["speculative_eagle_topk"],
                                                   eff["speculative_num_draft_tokens"]], res.log_warnings)
        real = (r["error"].split(":")[0] if r["error"] else None, r["effective"], real_warnings)
        if ours != real:
            disagree.append((r, ours, real))
    assert disagree == []


def test_the_two_releases_hooks_agree_on_every_grid_point():
    assert _grid("0.5.17")[1] == _grid("0.5.23")[1]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_real_rewrite_is_topk_1_only_with_the_exact_warning(version):
    g, rows = _grid(version)
    rewritten = [r for r in rows if r["effective"] and r["draft_tokens"] is not None
                 and r["effective"][2] != r["draft_tokens"]]
    assert rewritten and all(r["topk"] == 1 and r["effective"][2] == r["steps"] + 1 for r in rewritten)
    assert release.DRAFT_TOKENS_WARNING in g["warnings"] and release.MAX_RUNNING_WARNING in g["warnings"]


@pytest.mark.parametrize("version", VERSIONS)
def test_topk_above_1_without_draft_tokens_runs_in_the_real_hook_so_it_is_a_warning_not_a_refusal(version):
    _, rows = _grid(version)
    loose = [r for r in rows if r["steps"] and r["topk"] and r["topk"] > 1 and r["draft_tokens"] is None]
    assert loose and all(r["error"] is None and r["effective"][2] is None for r in loose)
    res = release.resolve_speculative("EAGLE3", 3, 4, None, "LlamaForCausalLM", version=version)
    assert res.error is None and f"SGLang {version} leaves it unset" in res.advice[0]


def test_a_release_eaglebot_knows_is_not_warned_about_and_another_is():
    assert [release.unknown_version_warning(v) for v in VERSIONS] == [None, None]
    assert release.unknown_version_warning(None) is None
    assert release.unknown_version_warning("0.5.99") == ("SGLang 0.5.99 is running; eaglebot knows the rules of "
                                                        "0.5.17, 0.5.23 and applies those of 0.5.23")
    assert [release.rules_version(v) for v in ("0.5.17", "0.5.23", "0.5.99", None)] == [
        "0.5.17", "0.5.23", "0.5.23", "0.5.23"]


# -- log lines -----------------------------------------------------------------------------------

def _log_lines(version: str) -> dict[str, list[dict]]:
    return json.loads((fix(version) / "log_lines.json").read_text())["lines"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_line_the_product_reads_comes_from_the_real_package(version):
    lines = _log_lines(version)

    def source(key: str) -> str:
        return " ".join(x["text"] for x in lines[key])
    assert release.READY_LINE in source("ready")
    assert "Decode batch" in source("decode_stats") and "#running-req" in source("decode_stats")
    for key, pat in (("fatal_scheduler_exception", 0), ("fatal_sigquit", 1), ("fatal_rank_died", 2),
                     ("fatal_not_enough_memory", 3), ("fatal_cuda_graph", 4), ("fatal_kv_budget", 7)):
        fragment = release.FATAL_PATTERNS[pat].pattern.replace("\\", "").replace("d+", "{rank}")
        assert fragment.split("{")[0] in source(key), key
    assert all(m.split(".")[0] in source("fatal_kv_budget") + source("fatal_not_enough_memory")
               for m in startup.NOT_ENOUGH)
    for fragment, _ in startup.PHASES:
        if "graph" in fragment:
            key = "capture_cuda_graph_begin" if fragment.split()[-1] == "begin" else "capture_cuda_graph_end"
            assert any(fragment.strip() in x["text"] or "graph_backend[model_runner.device]} " +
                       fragment.strip().split()[-1] in x["text"] for x in lines[key])
    for key, entries in lines.items():
        assert entries, f"no source line found for {key}"
        assert all(e["file"].startswith("sglang/srt/") and e["line"] > 0 for e in entries)


# -- bench_serving -------------------------------------------------------------------------------

def _record(path: Path) -> dict:
    return json.loads(path.read_text().splitlines()[-1])


@pytest.mark.parametrize("version", VERSIONS)
def test_the_jsonl_parser_keeps_every_key_of_the_real_record(version):
    real = _record(fix(version) / "bench_serving.jsonl")
    assert len(real) >= 45
    parsed = release.parse_bench_jsonl((fix(version) / "bench_serving.jsonl").read_text())
    assert parsed == real
    nums = release.bench_numbers(parsed)
    assert nums["completed"] == 8 and nums["output_throughput"] == real["output_throughput"]
    assert set(nums) == {k for k in release.BENCH_METRICS if isinstance(real.get(k), (int, float))}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_table_parser_reads_the_real_printed_table_as_the_record_says(version):
    text = (fix(version) / "bench_serving_stdout.txt").read_text()
    table = release.parse_bench_table(text)
    real = _record(fix(version) / "bench_serving.jsonl")
    rows = [ln for ln in text[text.rfind("Serving Benchmark Result"):].splitlines() if ":" in ln]
    assert len(table) == len(rows) == 38          # every printed row is read
    for key, value in table.items():
        if isinstance(real.get(key), (int, float)) and isinstance(value, (int, float)):
            assert value == real[key] or abs(value - real[key]) <= 0.006, key   # printed with 2 decimals


def _sim_bench(sim: Sim, port: int, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sim.vars["python"], "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url",
                           f"http://127.0.0.1:{port}", "--dataset-name", "random-ids", "--random-input-len", "128",
                           "--random-output-len", "32", "--random-range-ratio", "1.0", "--num-prompts", "8",
                           "--max-concurrency", "4", "--flush-cache", "--output-file", str(out)],
                          capture_output=True, text=True, timeout=120)


def _labels(text: str) -> list[str]:
    body = text[text.rfind("Serving Benchmark Result"):]
    return [ln.split(":")[0].strip() for ln in body.splitlines() if ":" in ln]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_simulated_benchmark_writes_the_real_records_keys_and_table_labels(tmp_path, version):
    sim = Sim(tmp_path, version)
    port = free_port()
    p = sim.spec_server(port, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                        "--speculative-num-draft-tokens", "4")
    try:
        wait_status(port, "/health", 200, p)
        out = tmp_path / "b.jsonl"
        b = _sim_bench(sim, port, out)
        assert b.returncode == 0, b.stderr
    finally:
        sim.stop_all()
    ours = _record(out)
    assert set(ours) == set(_record(fix(version) / "bench_serving.jsonl"))
    assert _labels(b.stdout) == _labels((fix(version) / "bench_serving_stdout.txt").read_text())
    if version == "0.5.17":   # and a real bench_serving against a real server wrote the same keys and labels
        assert set(ours) == set(_record(REAL / "bench.jsonl"))
        assert _labels(b.stdout) == _labels((REAL / "bench.log").read_text())


def _real_bench_options(version: str) -> dict[str, dict]:
    rows = json.loads((fix(version) / "bench_serving_args.json").read_text())["options"]
    return {opt: row for row in rows for opt in row["options"]}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_bench_flag_the_product_passes_exists_in_the_real_bench_serving(version):
    from eaglebot.skills.bench_serving import Params, bench_argv
    real = _real_bench_options(version)
    argv = bench_argv(Params(), "/x.jsonl")
    flags = [a for a in argv if a.startswith("--")]
    assert flags and [f for f in flags if f not in real] == []
    assert real["--dataset-name"]["choices"] is None or "random-ids" in real["--dataset-name"]["choices"]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_simulated_bench_serving_knows_only_real_options_with_the_real_shapes(version):
    import argparse
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "sim_bench", ROOT / "src" / "eaglebot" / "sim" / "sglang_pkg" / "sglang" / "benchmark" / "serving.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    real = _real_bench_options(version)
    for action in mod.build_parser()._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for opt in action.option_strings:
            assert opt in real, opt
            assert action.dest == real[opt]["dest"] and action.nargs == real[opt]["nargs"], opt


# -- a REAL 0.5.17 server on an H200 (tests/fixtures/sglang/0.5.17/h200-real/) ---------------------

def _real_info() -> dict:
    return json.loads((REAL / "server_info.json").read_text())


def test_the_real_server_info_parses_to_what_the_server_ran():
    info = release.parse_server_info((REAL / "server_info.json").read_text())
    assert info["version"] == "0.5.17"
    assert [info["effective"][k] for k in release.SPEC_KEYS] == ["EAGLE3", 3, 1, 4]
    assert info["avg_spec_accept_length"] == pytest.approx(1.0002, abs=1e-4)
    assert "launch_command" not in info["raw"]   # 0.5.23 adds it; nothing in the product reads it


def test_the_real_0_5_17_relaunch_warned_of_unknown_rules_and_no_longer_does():
    shown = json.loads((REAL / "eagle-show-relaunch.json").read_text())
    assert shown["warnings"] == ["local: SGLang 0.5.17 is running; eaglebot's rules are those of 0.5.23"]
    assert release.unknown_version_warning(_real_info()["version"]) is None
    launch = [s for s in shown["steps"] if s["name"] == "launch SGLang"][0]
    assert launch["summary"].startswith("SGLang 0.5.17 ready on port 30000 in 108.7s")


def test_the_real_benchmark_of_random_weights_is_refused_as_the_product_refused_it():
    rec = release.parse_bench_jsonl((REAL / "bench.jsonl").read_text())
    assert rec is not None
    nums = release.bench_numbers(rec)
    assert nums["completed"] == 64 and nums["output_throughput"] == pytest.approx(387.505, abs=0.01)
    assert nums["accept_length"] == 1.0
    verdict = sanity.check([64], 64, speculative=rec["server_info"]["speculative_algorithm"],
                                 accept_length=nums["accept_length"])
    shown = json.loads((REAL / "eagle-show-relaunch.json").read_text())
    bench = [s for s in shown["steps"] if s["name"] == "benchmark"][0]
    assert verdict.failure == bench["summary"]
    table = release.parse_bench_table((REAL / "bench.log").read_text())
    assert table["output_throughput"] == pytest.approx(nums["output_throughput"], abs=0.006)


def test_the_real_start_up_log_goes_through_every_phase_and_has_no_fatal_line():
    log = (REAL / "server.log").read_text()
    assert release.find_fatal(log) is None and startup.phase(log) == "ready"
    seen = [name for fragment, name in startup.PHASES if fragment in log]
    assert seen == [name for fragment, name in startup.PHASES if "graph" not in fragment]  # no graphs: disabled
    assert release.MAX_RUNNING_WARNING in log


def _decode_labels(line: str) -> list[str]:
    return [part.split(":")[0].strip() for part in line.split("Decode batch, ", 1)[1].split(", ")]


def _sim_server(tmp_path: Path, version: str, *extra: str):
    sim = Sim(tmp_path, version)
    port = free_port()
    p = sim.spec_server(port, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                        "--speculative-num-draft-tokens", "4", *extra)
    wait_status(port, "/health", 200, p)
    return sim, port, p


def _generate(port: int, n: int) -> dict:
    import urllib.request
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", json.dumps(
        {"text": "The quick brown fox", "sampling_params": {"max_new_tokens": n, "temperature": 0}}).encode(),
        {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_the_simulated_0_5_17_server_answers_with_the_real_servers_keys(tmp_path):
    sim, port, p = _sim_server(tmp_path, "0.5.17", "--disable-cuda-graph", "--load-format", "dummy")
    try:
        meta = _generate(port, 64)["meta_info"]
        for _ in range(2):
            _generate(port, 64)
        code, body = get(port, "/server_info")
        assert code == 200
    finally:
        p.terminate()
        log, _ = p.communicate(timeout=60)
        sim.stop_all()
    info, real = json.loads(body), _real_info()
    assert set(info) - {"simulated"} == set(real)
    assert set(info["internal_states"][0]) == set(real["internal_states"][0])
    probe = json.loads((REAL / "probes.json").read_text())["generate"]["body"]["meta_info"]
    assert set(meta) - {"simulated_ttft", "simulated_itl"} == set(probe)
    # random weights (--load-format dummy): the draft accepts nothing, as on the H200
    assert meta["spec_accept_rate"] == 0.0 and meta["spec_accept_length"] == pytest.approx(64 / 63)
    assert meta["spec_accepted_drafts"] == meta["spec_num_correct_drafts"] == 0
    real_log = (REAL / "server.log").read_text()
    real_decode = next(ln for ln in real_log.splitlines() if "Decode batch" in ln)
    ours = [ln for ln in log.splitlines() if "Decode batch" in ln]
    assert ours and _decode_labels(ours[0]) == _decode_labels(real_decode)
    # the same start-up phases in the same order, the CUDA graph ones skipped as the real server skips them

    def phases(text: str) -> list[str]:
        order = [(text.find(fragment), name) for fragment, name in startup.PHASES if fragment in text]
        return [name for _, name in sorted(order)]
    assert phases(log) == phases(real_log)
    assert "Disable prefill CUDA graph because cuda_graph_config resolved prefill.backend='disabled'" in real_log
    assert "Disable prefill CUDA graph because cuda_graph_config resolved prefill.backend='disabled'" in log


@pytest.mark.parametrize("version", VERSIONS)
def test_the_simulated_meta_info_keys_are_the_releases_own(tmp_path, version):
    source = set(json.loads((fix(version) / "meta_info_keys.json").read_text())["keys"])
    sim, port, _ = _sim_server(tmp_path, version)
    try:
        meta = _generate(port, 32)["meta_info"]
    finally:
        sim.stop_all()
    spec = {k for k in meta if k.startswith("spec_")}
    assert spec and spec <= source
    aliases = {"spec_accepted_drafts", "spec_proposed_drafts", "spec_accept_histogram"}
    assert (aliases <= source, aliases <= spec) == ((True, True) if version == "0.5.17" else (False, False))


@pytest.mark.parametrize("version", VERSIONS)
def test_weights_beyond_the_mem_fraction_budget_crash_with_the_releases_own_line(tmp_path, version):
    sim = Sim(tmp_path, version)
    p = sim.spec_server(free_port(), "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                        "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.001")
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 1
    fatal = release.find_fatal(out)
    source = " ".join(x["text"] for x in _log_lines(version)["fatal_kv_budget"])
    assert fatal and fatal.startswith("ValueError: Loaded weights leave no GPU memory for the KV cache under "
                                      "--mem-fraction-static=0.001. Raise --mem-fraction-static above ")
    assert "Loaded weights leave no GPU memory for the KV cache under" in source
    assert "Scheduler hit an exception:" in out and "Received sigquit from a child process" in out
