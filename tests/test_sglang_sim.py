"""The SIMULATED SGLang server and bench_serving, run as real processes."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from eaglebot.sim import gpu_state, install_sim_bin
from eaglebot.facts.sglang import release as sg
from support.sshd import free_port

PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else None




def write_models(root: Path, arch: str = "LlamaForCausalLM", layers=(2, 30, 58)) -> tuple[Path, Path]:
    target, draft = root / "target", root / "draft"
    target.mkdir(parents=True, exist_ok=True)
    draft.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps({"architectures": [arch], "num_hidden_layers": 61}))
    (draft / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {
        "eagle_aux_hidden_state_layer_ids": list(layers), "use_aux_hidden_state": True}}, indent=2))
    return target, draft


class Sim:
    """A sandbox with the simulated tools and the server processes a test started."""

    def __init__(self, root: Path, version: str | None = None):
        self.root = root
        self.state = root / "gpu-state"
        self.vars = install_sim_bin(root / "bin", self.state, python=PY, version=version)
        gpu_state.init_state(self.state, 2)
        self.target, self.draft = write_models(root)
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        e = dict(os.environ, EAGLE_SIM_LOAD_S="0.05", EAGLE_SIM_WARMUP_S="0.05", **(env or {}))
        p = subprocess.Popen([self.vars["python"], "-m", "sglang.launch_server", *args],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def spec_server(self, port: int, *extra: str, env: dict | None = None) -> subprocess.Popen:
        return self.start("--model", str(self.target), "--speculative-algorithm", "eagle3",
                          "--speculative-draft-model-path", str(self.draft), "--port", str(port), *extra, env=env)

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            if p.stdout:
                p.stdout.close()


@pytest.fixture
def sim(tmp_path):
    s = Sim(tmp_path)
    yield s
    s.stop_all()


def get(port: int, path: str) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def wait_status(port: int, path: str, want: int, proc: subprocess.Popen, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while get(port, path)[0] != want:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, f"{path} never returned {want}"
        time.sleep(0.05)


def finish(p: subprocess.Popen) -> tuple[int, str]:
    out, _ = p.communicate(timeout=60)
    return p.returncode, out


def test_removed_and_unknown_flags_are_argparse_errors(sim):
    rc, out = finish(sim.start("--model", str(sim.target), "--cuda-graph-max-bs", "64"))
    assert rc == 2 and "ambiguous option: --cuda-graph-max-bs could match" in out
    rc, out = finish(sim.start("--model-path", str(sim.target), "--no-such-flag"))
    assert rc == 2 and "unrecognized arguments: --no-such-flag" in out


def test_spec_flags_sglang_refuses_end_the_process_with_its_error(sim):
    rc, out = finish(sim.spec_server(free_port(), "--speculative-eagle-topk", "1"))
    assert rc == 1 and out.rstrip().endswith("AssertionError")
    rc, out = finish(sim.spec_server(free_port(), "--speculative-num-steps", "3"))
    assert rc == 1 and "TypeError: '>' not supported" in out


def test_health_is_503_until_warm_then_server_info_shows_the_16_to_2_override(sim, tmp_path):
    port, gate = free_port(), tmp_path / "warm"
    p = sim.spec_server(port, "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
                        "--speculative-num-draft-tokens", "16", "--mem-fraction-static", "0.5",
                        env={"EAGLE_SIM_WARMUP_UNTIL_FILE": str(gate), "CUDA_VISIBLE_DEVICES": "1"})
    wait_status(port, "/ready", 503, p)
    assert get(port, "/health")[0] == 503 and get(port, "/health_generate")[0] == 503
    gate.touch()
    wait_status(port, "/health", 200, p)
    code, body = get(port, "/server_info")
    info = json.loads(body)
    assert code == 200 and info["version"] == "0.5.23" and info["speculative_num_draft_tokens"] == 2
    assert info["speculative_algorithm"] == "EAGLE3" and info["max_running_requests"] == 48
    assert "--speculative-num-draft-tokens 16" in info["launch_command"]
    assert "avg_spec_accept_length" not in info["internal_states"][0]     # before 40 decode steps
    assert json.loads(get(port, "/get_server_info")[1])["port"] == port
    models = json.loads(get(port, "/v1/models")[1])
    assert models["object"] == "list" and models["data"][0]["owned_by"] == "sglang"
    assert get(port, "/flush_cache")[1].startswith(b"Cache flushed.")
    # the scheduler child holds the GPU CUDA_VISIBLE_DEVICES names, in the launcher's session
    [holder] = gpu_state.live_holders(gpu_state.load_state(sim.state))
    assert holder["gpu"] == 1 and holder["mib"] == int(0.5 * 143771) and holder["pid"] != p.pid
    stat = Path(f"/proc/{holder['pid']}/stat").read_text()
    assert int(stat[stat.rindex(")") + 2:].split()[3]) == p.pid        # same session as the launcher
    assert "sglang::scheduler_TP0" in Path(f"/proc/{holder['pid']}/cmdline").read_text()
    os.killpg(p.pid, signal.SIGTERM)
    rc, out = finish(p)
    assert "SIMULATED" in out.splitlines()[0]
    assert sg.DRAFT_TOKENS_WARNING in out and sg.READY_LINE in out
    assert gpu_state.live_holders(gpu_state.load_state(sim.state)) == []


def test_fatal_line_knob_kills_the_server_after_loading(sim):
    line = "Capture cuda graph failed: CUDA error: out of memory"
    rc, out = finish(sim.spec_server(free_port(), env={"EAGLE_SIM_FAIL": line}))
    assert rc == 1 and "Load weight begin" in out and sg.find_fatal(out).endswith(line)
    assert sg.READY_LINE not in out


def test_busy_port_is_reported_only_after_the_model_loaded(sim):
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        rc, out = finish(sim.spec_server(port))
    assert rc == 1
    assert out.index("Load weight end") < out.index(
        f"[Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): address already in use")
    rc, out = finish(sim.spec_server(free_port(), env={"EAGLE_SIM_PORT_BUSY": "1"}))
    assert rc == 1 and "[Errno 98]" in out


def test_bench_serving_prints_the_real_table_and_appends_jsonl(sim, tmp_path):
    port = free_port()
    p = sim.spec_server(port)
    wait_status(port, "/health", 200, p)
    out_file = tmp_path / "bench.jsonl"
    argv = [sim.vars["python"], "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url",
            f"http://127.0.0.1:{port}", "--dataset-name", "random-ids", "--random-input-len", "256",
            "--random-output-len", "64", "--random-range-ratio", "1.0", "--num-prompts", "12",
            "--max-concurrency", "4", "--flush-cache", "--output-file", str(out_file)]
    for _ in range(2):
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
    table = sg.parse_bench_table(res.stdout)
    assert table["completed"] == 12 and table["max_concurrency"] == 4 and table["accept_length"] > 1
    assert "Output token throughput (tok/s):         " in res.stdout
    lines = out_file.read_text().splitlines()
    assert len(lines) == 2
    last = json.loads(lines[-1])
    for key in ("output_throughput", "request_throughput", "accept_length", "median_ttft_ms", "median_itl_ms",
                "p99_ttft_ms", "mean_e2e_latency_ms", "completed", "duration", "server_info"):
        assert key in last
    assert last["completed"] == 12 and last["server_info"]["version"] == "0.5.23"
    assert last["output_throughput"] == pytest.approx(table["output_throughput"], abs=0.01)
    info = json.loads(get(port, "/server_info")[1])
    assert info["internal_states"][0]["avg_spec_accept_length"] > 1


FAKE_TORCH = '''
"""Stands in for PyTorch with one CUDA device (this machine has no GPU)."""
uint8 = "uint8"


class _Buf:
    def fill_(self, v):
        return self


def empty(n, dtype=None, device=None):
    return _Buf()


class cuda:
    @staticmethod
    def is_available():
        return True

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def synchronize(i=None):
        return None
'''


def test_a_scheduler_holding_real_gpu_memory_still_reports_ready(sim, tmp_path):
    """Where PyTorch sees a GPU the scheduler logs its real allocation: the launcher must
    not take that log line for its READY signal (it hung on the H200 before)."""
    fake = tmp_path / "faketorch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_TORCH)
    port = free_port()
    p = sim.spec_server(port, "--mem-fraction-static", "0.05",
                        env={"PYTHONPATH": f"{tmp_path / 'faketorch'}", "CUDA_VISIBLE_DEVICES": "0"})
    wait_status(port, "/health", 200, p, limit=20)
    os.killpg(p.pid, signal.SIGTERM)
    out, _ = p.communicate(timeout=30)
    assert "SIMULATED scheduler holds 7188 MiB of REAL memory on cuda:0" in out


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_ngram_refuses_enable_dp_attention_only_with_a_dp_size_above_1(tmp_path, version):
    """Both releases drop a lone --enable-dp-attention at DP size 1 before the NGRAM check (0.5.17's
    overrides.py _data_parallelism_defaults; 0.5.23's parallel_hook.py): a real 0.5.17 on an H200 served it."""
    s = Sim(tmp_path, version)
    try:
        ngram = ("--model-path", str(s.target), "--speculative-algorithm", "NGRAM", "--enable-dp-attention")
        rc, out = finish(s.start(*ngram, "--dp-size", "2", "--tp-size", "2", "--port", str(free_port())))
        assert rc == 1 and out.rstrip().splitlines()[-1] == (
            "ValueError: Currently ngram speculative decoding does not support dp attention."), out[-2000:]
        port = free_port()
        p = s.start(*ngram, "--port", str(port))
        wait_status(port, "/health", 200, p)
        info = json.loads(get(port, "/server_info")[1])
        assert info["speculative_algorithm"] == "NGRAM" and info["dp_size"] == 1, info
    finally:
        s.stop_all()
