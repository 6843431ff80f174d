"""The speculative methods beside EAGLE-3 that the staged REAL SGLang 0.5.17 tree can run with the tiny
models (issue 44 item 6): NGRAM, which needs no draft, and STANDALONE. The SHIPPED relaunch playbook through the real
`eagle` CLI, the local transport, the default state_dir, on the bed of tests/gpu/test_real_sglang.py
(the staged tree in /tmp/site, the dummy-weight Llama in /tmp/sgmodel, EXTRA_ARGS):
  1. `relaunch -e spec_algorithm=NGRAM`: no draft passed; the real /server_info reports NGRAM with
     SGLang's own resolution (topk := the max BFS breadth 10, 12 draft tokens, steps 12 // 10 = 1), as
     the simulator predicts; the log has the release's NGRAM warning; the launch's "speculation is
     really on" check read the real per-request histogram (`unknown (dummy weights)`: random weights
     say nothing about acceptance, no alarm);
  2. `relaunch -e spec_algorithm=STANDALONE` with the staged target as its own draft (a small Llama
     with the target's tokenizer): SGLang's (3, 1, 4), the real histogram read;
  3. NGRAM with attention DP (--enable-dp-attention --dp-size 2 --tp-size 2: 0.5.17 drops the flag alone
     at dp size 1), launched directly: the real SGLang refuses it in ServerArgs with the words the
     simulator uses (relaunch's gate refuses it before the stop);
  4. `stop`: the GPU free.
Run by scripts/gpu/real-sglang.sh with the rest of tests/gpu (or alone: EAGLE_GPU_TESTS=
tests/gpu/test_real_methods.py). What it measured goes to $OUT/real-methods.json. EAGLE_GPU_REHEARSAL=1
runs it against the SIMULATED SGLang speaking 0.5.17 (tests/test_methods_corpus.py does, e2e).
"""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from real_sglang_bed import EXTRA_ARGS, RELEASE, Bed, free_port, make_bed

pytestmark = pytest.mark.gpu

READY = "300"           # ready_timeout_s: a real start took 78-109 s
MEM = "0.5"
NGRAM_EFFECTIVE = ["NGRAM", 1, 10, 12]     # _handle_ngram: topk := max BFS breadth, 12 tokens, steps 12 // 10
NGRAM_WARNING = "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding"
DP_REFUSAL = "Currently ngram speculative decoding does not support dp attention."


@pytest.fixture(autouse=True)
def gpus_free_between_tests(per_test_timeout):
    """The server lives from one test to the next: `bed` checks the GPUs free at its start and end."""
    yield


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    b = make_bed(tmp_path_factory.mktemp("real-methods"))
    b.out_file = (Path(os.environ["OUT"]) if os.environ.get("OUT") else b.work) / "real-methods.json"
    b.record("port", b.port)
    b.stop_leftovers()
    used = b.wait_free(30)
    assert max(used.values()) <= 1024, f"GPUs busy before the methods sequence (MiB per GPU: {used})"
    b.record("sglang", b.host_sglang_version())
    try:
        yield b
    finally:
        b.record("teardown", {"killed_leftover_pids": b.stop_leftovers(), "gpu_mib": b.wait_free(60)})
        b.ssh.close()


def test_1_ngram_relaunch_runs_without_a_draft_and_is_judged_on_the_real_histogram(bed: Bed):
    run = bed.run("relaunch", "gpu", "spec_algorithm=NGRAM", "bench_prompts=0", f"mem_fraction={MEM}",
                  f"ready_timeout_s={READY}")
    assert run.rc == 0, run.why()
    data = run.data("launch SGLang")
    assert data["sglang_version"] == bed.results["sglang"] == RELEASE, run.why()
    assert "--speculative-draft-model-path" not in data["launch_args"], run.why()
    eff = data["effective"]            # read back from the real /server_info
    got = [eff["speculative_algorithm"], eff["speculative_num_steps"], eff["speculative_eagle_topk"],
           eff["speculative_num_draft_tokens"]]
    assert got == NGRAM_EFFECTIVE, run.why()
    assert run.step("check the draft's inputs")["status"] == "skipped", run.why()
    sp = data["speculation"]
    assert sp["verdict"] == "unknown (dummy weights)" and sp["failures"] == [], run.why()
    assert sp["algorithm"] == "NGRAM" and sp["steps"] == 1, run.why()
    assert sum(sp["histogram"]) > 0, run.why()      # the per-request histogram reached the bot
    log = Path(data["log_path"]).read_text(errors="replace")
    assert NGRAM_WARNING in log, run.why()
    bed.record("1_ngram", {"ready_s": data["ready_s"], "effective": eff, "speculation": sp,
                           "relaunch_s": round(run.seconds, 1), "gpu_mib": bed.memory()})


def test_2_standalone_with_the_target_as_its_own_draft(bed: Bed):
    """STANDALONE: a draft that is a small Llama with the target's tokenizer; the staged target itself is
    one. SGLang's own resolution (STANDALONE's auto params are (3, 1, 4) whatever the architecture)."""
    run = bed.run("relaunch", "gpu", "spec_algorithm=STANDALONE", f"draft={bed.host_vars['model']}", "bench_prompts=0",
                  f"mem_fraction={MEM}", f"ready_timeout_s={READY}")
    assert run.rc == 0, run.why()
    data = run.data("launch SGLang")
    eff = data["effective"]
    got = [eff["speculative_algorithm"], eff["speculative_num_steps"], eff["speculative_eagle_topk"],
           eff["speculative_num_draft_tokens"]]
    assert got == ["STANDALONE", 3, 1, 4], run.why()
    sp = data["speculation"]
    assert sp["verdict"] == "unknown (dummy weights)" and sp["failures"] == [] and sum(sp["histogram"]) > 0, run.why()
    bed.record("2_standalone", {"ready_s": data["ready_s"], "effective": eff, "speculation": sp,
                                "relaunch_s": round(run.seconds, 1)})


def test_3_ngram_with_attention_dp_is_refused_by_sglang_in_the_simulators_words(bed: Bed):
    """The host's own launch_server, not relaunch: the method-aware gate refuses this before the stop, so
    only a direct launch shows SGLang's own refusal. `--dp-size 2 --tp-size 2` makes it attention DP: 0.5.17
    drops a lone --enable-dp-attention at dp size 1 (overrides.py _data_parallelism_defaults) and then serves
    NGRAM (a real H200 run, 2026-12-03). With dp 2, ServerArgs.__post_init__ reaches the NGRAM check
    (speculative_hook.py) after _handle_data_parallelism's tp % dp assert holds, and raises before any model
    or GPU worker is started. A hang is killed with its whole process group, never left to the next test."""
    argv = [bed.host_vars["python"], "-m", "sglang.launch_server", "--model-path", bed.host_vars["model"],
            "--port", str(free_port()), *EXTRA_ARGS, "--speculative-algorithm", "NGRAM", "--enable-dp-attention",
            "--dp-size", "2", "--tp-size", "2"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"launch_server neither refused nor exited in 240 s (killed): {out[-3000:]}")
    finally:
        if p.poll() is None:       # an error in the wait itself: the group still goes
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    said = out.strip().splitlines()
    assert p.returncode != 0 and said and said[-1] == f"ValueError: {DP_REFUSAL}", said[-30:]
    bed.record("3_ngram_dp_refused", {"rc": p.returncode, "last_line": said[-1]})


def test_4_stop_frees_the_gpu(bed: Bed):
    run = bed.run("stop", "gpu", "--yes")
    assert run.rc == 0, run.why()
    used = bed.wait_free(60)
    assert max(used.values()) <= 1024, used
    bed.record("4_stop", {"gpu_mib_after": used})
