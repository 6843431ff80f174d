"""SGLang facts as pure functions: speculative resolution, log lines, bench output."""
from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from eaglebot.facts.sglang import release as sg
from eaglebot.facts.sglang import cmdline, startup
from eaglebot.skills.bench_compare import judge
from eaglebot.skills.server_launch import Params as LaunchParams
from eaglebot.skills.server_launch import build_args



def _sim_module():
    import eaglebot.sim as sim_pkg

    path = Path(sim_pkg.__file__).parent / "sglang_pkg" / "sglang" / "_simulated.py"
    spec = importlib.util.spec_from_file_location("sim_simulated_for_tests", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- speculative resolution --------------------------------------------------------------

def test_unset_spec_flags_are_chosen_from_the_target_architecture():
    llama = sg.resolve_speculative("EAGLE3", None, None, None, "LlamaForCausalLM")
    assert (llama.num_steps, llama.topk, llama.num_draft_tokens, llama.auto_chosen) == (5, 4, 8, True)
    assert sg.resolve_speculative("eagle", None, None, None, "Grok1ForCausalLM").effective()[
        "speculative_num_draft_tokens"] == 8
    for arch in ("DeepseekV3ForCausalLM", "GptOssForCausalLM", "Glm4MoeForCausalLM", None):
        r = sg.resolve_speculative("EAGLE3", None, None, None, arch)
        assert (r.num_steps, r.topk, r.num_draft_tokens) == (3, 1, 4)


def test_topk_1_silently_turns_16_draft_tokens_into_steps_plus_1_with_the_exact_warning():
    r = sg.resolve_speculative("EAGLE3", 1, 1, 16, "LlamaForCausalLM")
    assert r.error is None and r.num_draft_tokens == 2
    assert r.adjusted == {"speculative_num_draft_tokens": (16, 2)}
    assert ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
            "speculative_eagle_topk == 1") in r.log_warnings
    ok = sg.resolve_speculative("EAGLE3", 3, 4, 16)
    assert ok.num_draft_tokens == 16 and not ok.adjusted


def test_draft_tokens_without_steps_is_an_assertion_error_and_steps_without_topk_a_type_error():
    a = sg.resolve_speculative("EAGLE3", None, 1, None)
    assert a.error == "AssertionError" and "set all three or none" in a.error_reason
    t = sg.resolve_speculative("EAGLE3", 3, None, 4)
    assert t.error == "TypeError" and "--speculative-eagle-topk" in t.error_reason


def test_algorithm_names_are_case_insensitive_and_nextn_means_eagle():
    assert sg.resolve_speculative("nextn", None, None, None).algorithm == "EAGLE"
    assert sg.resolve_speculative("Eagle3", None, None, None).algorithm == "EAGLE3"
    ngram = sg.resolve_speculative("NGRAM", 3, None, None)
    assert ngram.error is None and not ngram.log_warnings
    assert sg.MAX_RUNNING_WARNING in sg.resolve_speculative("EAGLE3", 2, 2, 4).log_warnings
    assert not sg.resolve_speculative("EAGLE3", 2, 2, 4, max_running_requests=32).log_warnings


def test_the_simulator_resolves_exactly_like_the_bot():
    sim = _sim_module()
    values = [None, 1, 2, 5]
    for steps, topk, draft, arch in itertools.product(values, values, [None, 2, 16], ["LlamaForCausalLM", None]):
        ours = sg.resolve_speculative("EAGLE3", steps, topk, draft, arch)
        args = SimpleNamespace(speculative_algorithm="eagle3", speculative_num_steps=steps,
                               speculative_eagle_topk=topk, speculative_num_draft_tokens=draft,
                               max_running_requests=None)
        try:
            warnings = sim.resolve_speculative(args, arch)
        except sim.SpecError as e:
            assert ours.error == e.kind, (steps, topk, draft, arch)
            continue
        assert ours.error is None, (steps, topk, draft, arch)
        assert (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens) == \
            (ours.num_steps, ours.topk, ours.num_draft_tokens)
        assert warnings == ours.log_warnings


def test_patching_capture_layers_to_minus_1_2_30_lowers_simulated_acceptance():
    sim = _sim_module()
    args = SimpleNamespace(speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
                           speculative_num_draft_tokens=4, tp_size=1,
                           speculative_draft_model_path=None)   # a draft folder that declares no training
    good = sim.PerfModel(args, 61, [2, 30, 58])
    bad = sim.PerfModel(args, 61, [-1, 2, 30])
    default = sim.PerfModel(args, 61, None)
    assert good.accept_len == default.accept_len > bad.accept_len
    assert bad.itl_s() > good.itl_s()
    assert sim.aux_layer_ids({"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}) is None  # top level is ignored


def test_launch_args_refuse_a_port_in_args_and_a_flag_given_twice():
    _, err = build_args(LaunchParams(model="/m", args=["--port=31000"]))
    assert err == "pass the port as `-e port=...` (or host var port), not --port in extra_args"
    _, err = build_args(LaunchParams(model="/m", args=["--host", "0.0.0.0"]))
    assert err == "pass the address as `-e bind=...` (or host var bind), not --host in extra_args"
    _, err = build_args(LaunchParams(model="/m", spec_steps=3, args=["--speculative-num-steps", "4"]))
    assert "given twice" in err
    args, err = build_args(LaunchParams(model="/m", draft="/d", spec_algorithm="EAGLE3", spec_steps=1, spec_topk=1,
                                        spec_draft_tokens=16, gpus=[0, 1], port=31000,
                                        args=["--cuda-graph-max-bs-decode", "64", "--trust-remote-code"]))
    assert err is None
    assert args[:2] == ["--model-path", "/m"] and args[-3:] == ["--cuda-graph-max-bs-decode", "64", "--trust-remote-code"]
    f = cmdline.flag_values(args)
    assert f["--port"] == "31000" and f["--speculative-num-draft-tokens"] == "16" and f["--trust-remote-code"] is None
    assert cmdline.flag_values(["--model", "x", "--tp=2"]) == {"--model-path": "x", "--tp-size": "2"}


def test_target_architecture_reads_config_json():
    assert sg.target_architecture(json.dumps({"architectures": ["DeepseekV3ForCausalLM"]})) == "DeepseekV3ForCausalLM"
    assert sg.target_architecture("not json") is None
    assert sg.target_architecture("{}") is None


def test_same_value_compares_flag_text_with_typed_server_values():
    assert cmdline.same_value("16", 16) and not cmdline.same_value("16", 2)
    assert cmdline.same_value("eagle3", "EAGLE3") and cmdline.same_value("0.85", 0.85)
    assert cmdline.same_value("true", True) and not cmdline.same_value("16", None)


# -- server log ------------------------------------------------------------------------------

LOG = """\
[2026-11-30 04:44:58] server_args=ServerArgs(model_path='/models/llama', tokenizer_path='/models/llama', port=30000)
[2026-11-30 04:44:58] Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests.
[2026-11-30 04:44:58] speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1
[2026-11-30 04:45:02 TP0] Load weight begin. avail mem=139.21 GB
[2026-11-30 04:45:31 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=123.96 GB, mem usage=15.25 GB.
[2026-11-30 04:46:10] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[2026-11-30 04:46:12] The server is fired up and ready to roll!
[2026-11-30 04:47:01 TP0] Decode batch, #running-req: 8, #token: 4520, token usage: 0.01, accept len: 3.21, accept rate: 0.64, cuda graph: True, gen throughput (token/s): 612.34, #queue-req: 0, 
[2026-11-30 04:47:05 TP0] Decode batch, #running-req: 6, #token: 3100, token usage: 0.01, accept len: 3.05, accept rate: 0.61, cuda graph: True, gen throughput (token/s): 580.10, #queue-req: 2, 
"""

# Each is a real 0.5.23 message (file and line in tests/fixtures/sglang/0.5.23/log_lines.json; the
# fidelity test holds the product's patterns to them), shown as the server's log prints it.
FATALS = [
    "[2026-11-30 04:45:40 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    "[2026-11-30 04:45:41] Received sigquit from a child process. It usually means the child failed.",
    "[2026-11-30 04:45:41] Rank 0 scheduler died during initialization (exit code: -9)",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.5",
    "[2026-11-30 04:45:40 TP0] Capture cuda graph failed: CUDA error: out of memory",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB",
    "[2026-11-30 04:46:10] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use",
]


# A start-up crash as the real scheduler logs it (scheduler.py: `Scheduler hit an exception: {traceback}`,
# kv_cache_configurator.py's ValueError; engine.py's sigquit line from the launcher after it).
CRASH = """[2026-12-02 10:01:12 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/tmp/site/sglang/srt/managers/scheduler.py", line 4931, in run_scheduler_process
    scheduler = Scheduler(
  File "/tmp/site/sglang/srt/mem_cache/kv_cache_configurator.py", line 1646, in _profile_available_bytes
    raise ValueError(
ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.001. Raise --mem-fraction-static above 0.004 (minimum viable = 1 - available/pre = 0.0036). If using speculative decoding, draft weights are now counted.

[2026-12-02 10:01:12] Received sigquit from a child process. It usually means the child failed.
"""


def test_a_crash_is_reported_by_the_line_that_says_why_not_by_the_process_that_died():
    assert sg.find_fatal(LOG + CRASH) == CRASH.splitlines()[5]
    hints = startup.hints(CRASH, startup.phase(CRASH), stalled=False)
    assert hints and hints[0].startswith("the weights leave too little memory for the KV cache: INCREASE")


def test_a_scheduler_exception_of_no_known_cause_names_the_exception_its_traceback_ends_in():
    crash = CRASH.replace(CRASH.splitlines()[5], "RuntimeError: CUDA error: an illegal memory access was encountered")
    assert sg.find_fatal(crash) == ("[2026-12-02 10:01:12 TP0] Scheduler hit an exception: Traceback (most recent "
                                    "call last): ... RuntimeError: CUDA error: an illegal memory access was encountered")


def test_a_healthy_log_has_no_fatal_line():
    assert sg.find_fatal(LOG) is None


@pytest.mark.parametrize("line", FATALS)
def test_each_fatal_line_is_found_in_a_log(line):
    assert sg.find_fatal(LOG + line + "\nmore\n") == line.strip()


# -- /server_info and bench_serving -----------------------------------------------------------

def test_server_info_gives_effective_spec_settings_version_and_mean_acceptance():
    body = json.dumps({"model_path": "/m", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 1,
                       "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 2, "version": "0.5.23",
                       "internal_states": [{"avg_spec_accept_length": 1.5}, {"avg_spec_accept_length": 1.7},
                                           {"last_gen_throughput": 3.0}]})
    info = sg.parse_server_info(body)
    assert info["version"] == "0.5.23" and info["effective"]["speculative_num_draft_tokens"] == 2
    assert info["avg_spec_accept_length"] == pytest.approx(1.6)
    assert sg.parse_server_info(json.dumps({"internal_states": [{}]}))["avg_spec_accept_length"] is None


TABLE = """\
#Input tokens: 204800
#Output tokens: 51200
Starting warmup with 1 sequences...
Warmup completed with 1 sequences. Starting main benchmark run...

============ Serving Benchmark Result ============
Backend:                                 sglang    
Traffic request rate:                    inf       
Max request concurrency:                 8         
Successful requests:                     200       
Benchmark duration (s):                  131.52    
Total input tokens:                      204800    
Total input text tokens:                 204800    
Total generated tokens:                  51200     
Total generated tokens (retokenized):    51183     
Request throughput (req/s):              1.52      
Input token throughput (tok/s):          1557.18   
Output token throughput (tok/s):         389.29    
Peak output token throughput (tok/s):    472.00    
Peak concurrent requests:                10        
Total token throughput (tok/s):          1946.47   
Concurrency:                             7.98      
Accept length:                           3.12      
----------------End-to-End Latency----------------
Mean E2E Latency (ms):                   5246.06   
Median E2E Latency (ms):                 5233.87   
P90 E2E Latency (ms):                    5391.17   
P95 E2E Latency (ms):                    5420.90   
P99 E2E Latency (ms):                    5467.61   
---------------Time to First Token----------------
Mean TTFT (ms):                          131.47    
Median TTFT (ms):                        118.06    
P90 TTFT (ms):                           190.35    
P95 TTFT (ms):                           212.96    
P99 TTFT (ms):                           276.17    
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          20.06     
Median TPOT (ms):                        20.05     
P90 TPOT (ms):                           20.63     
P95 TPOT (ms):                           20.78     
P99 TPOT (ms):                           21.00     
---------------Inter-Token Latency----------------
Mean ITL (ms):                           20.06     
Median ITL (ms):                         17.69     
P90 ITL (ms):                            41.46     
P95 ITL (ms):                            42.22     
P99 ITL (ms):                            44.06     
Max ITL (ms):                            136.36    
==================================================
"""


def test_bench_table_parser_reads_every_section():
    t = sg.parse_bench_table(TABLE)
    assert t["completed"] == 200 and t["output_throughput"] == 389.29 and t["accept_length"] == 3.12
    assert t["median_ttft_ms"] == 118.06 and t["p99_ttft_ms"] == 276.17 and t["median_itl_ms"] == 17.69
    assert t["mean_e2e_latency_ms"] == 5246.06 and t["max_itl_ms"] == 136.36 and t["backend"] == "sglang"
    nums = sg.bench_numbers(t)
    assert set(nums) == {"output_throughput", "request_throughput", "accept_length", "median_ttft_ms",
                         "p99_ttft_ms", "median_itl_ms", "mean_e2e_latency_ms", "completed"}
    assert sg.parse_bench_table("Traceback (most recent call last):\nValueError: boom") == {}


def test_bench_jsonl_takes_the_last_object_of_an_appended_file():
    # the real 0.5.23 record (tests/fixtures/sglang/0.5.23/bench_serving.jsonl, 49 keys), appended after an older run
    real = (Path(__file__).parent / "fixtures" / "sglang" / "0.5.23" / "bench_serving.jsonl").read_text()
    first = dict(json.loads(real), completed=10, output_throughput=100.0, accept_length=None)
    text = json.dumps(first) + "\n" + real + "\n"
    assert sg.parse_bench_jsonl(text) == json.loads(real)
    assert sg.bench_numbers({"completed": 10, "output_throughput": 100.0, "accept_length": None}) == {
        "completed": 10.0, "output_throughput": 100.0}
    assert sg.parse_bench_jsonl("") is None
    assert sg.median_numbers([{"a": 1.0}, {"a": 5.0}, {"a": 2.0}]) == {"a": 2.0}


def test_bench_compare_honours_each_metrics_direction():
    assert judge("output_throughput", 85.0, 90.0, 5, "higher")[0] == "regression"
    assert judge("output_throughput", 87.0, 90.0, 5, "higher")[0] == "pass"
    assert judge("output_throughput", 99.0, 90.0, 5, "higher")[0] == "improvement"
    verdict, delta = judge("median_ttft_ms", 130.0, 100.0, 5, "lower")
    assert verdict == "regression" and delta == pytest.approx(30.0)
    assert judge("median_ttft_ms", 80.0, 100.0, 5, "lower")[0] == "improvement"
    assert sg.metric_direction("p99_ttft_ms") == "lower" and sg.metric_direction("output_throughput") == "higher"
