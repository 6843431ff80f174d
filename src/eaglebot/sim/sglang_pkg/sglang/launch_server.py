"""SIMULATED `python -m sglang.launch_server`: the flags, log lines and endpoints of the SGLang release
it simulates (EAGLE_SIM_SGLANG_VERSION, 0.5.17 or 0.5.23; what differs is in _releases.py).

Like the real server: `--load-format dummy` (random weights) gives a draft that accepts nothing (accept
length 1.00, every verify step keeps only the target's token); weights larger than the budget
`--mem-fraction-static` leaves crash the scheduler with the real release's KV-budget ValueError.

Test knobs (environment):
  EAGLE_SIM_FAIL=<fatal line>   die after "Load weight begin" printing that line
  EAGLE_SIM_LOAD_S=<s>          simulated model loading time (default 0.3)
  EAGLE_SIM_WARMUP_S=<s>        /health answers 503 this long after binding (default 0.3)
  EAGLE_SIM_WARMUP_UNTIL_FILE=<path>  ... and until that file exists (deterministic tests)
  EAGLE_SIM_PORT_BUSY=1         print the Errno 98 bind error after loading, then exit
  EAGLE_SIM_ACCEPT_LEN=<x>      force the acceptance length (SGLANG_SIMULATE_ACC_LEN also does)
  EAGLE_SIM_TIME_SCALE=<f>      wall-clock seconds per simulated second in /generate (0.001)
  EAGLE_SIM_COMPLETE_FRACTION=<f>  answer only that share of /generate requests after the first
                                (the others get HTTP 500), as a server that drops requests
  EAGLE_SIM_STALL_AT=<phase>    hang silently (until killed) in that start-up phase: nccl, load,
                                cuda_graph or warmup (a hang SGLang users report)
  EAGLE_SIM_LOSSY_DRAFT=<f>     a broken draft: with speculative decoding, that share of greedy
                                (temperature 0) outputs differ from the target's own from some token
                                on (also the draft config key `eagle_sim_lossy_fraction`, as a wrong
                                draft config would); a faithful draft (the default) changes none
  EAGLE_SIM_LANDSCAPE=<seed>    the per-batch-size landscape (_landscape.py) instead of the old model
  EAGLE_SIM_DECODE_TICK_S=<s>   seconds between simulated decode batches of adaptive steps (0.01)

The running batch and adaptive steps: _sim_batches.py. The SIMULATED bench_serving says its
concurrency in the X-Eagle-Sim-Batch header, because its requests are replayed on a virtual clock
(they take milliseconds here).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy checks this package as eaglebot.sim.sglang_pkg.sglang; it runs as `sglang`
    from . import _greedy_ties, _landscape, _methods, _sim_http
    from . import _releases as releases
    from ._sim_batches import Batches
    from ._simulated import (BANNER, H200_MIB, VERSION, PerfModel, SpecError, aux_layer_ids, log, read_json,
                             resolve_speculative, visible_gpus, weights_gb)
    from .srt.server_args import ServerArgs
else:
    from sglang import _greedy_ties, _landscape, _methods, _sim_http
    from sglang import _releases as releases
    from sglang._sim_batches import Batches
    from sglang._simulated import (BANNER, H200_MIB, VERSION, PerfModel, SpecError, aux_layer_ids,
                                   log, read_json, resolve_speculative, visible_gpus, weights_gb)
    from sglang.srt.server_args import ServerArgs


def build_parser() -> argparse.ArgumentParser:
    """SGLang 0.5.23's own launch parser, built from the captured table (sglang/srt/server_args.py)."""
    p = argparse.ArgumentParser(prog="launch_server.py")
    ServerArgs.add_cli_args(p)
    return p


def _fail_traceback(kind: str, message: str) -> None:
    sys.stdout.write("Traceback (most recent call last):\n"
                     '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
                     '  File "sglang/srt/server_args.py", line 612, in __post_init__\n'
                     '    self._handle_speculative_decoding()\n'
                     f"{kind}{': ' + message if message else ''}\n")
    sys.stdout.flush()


def _model_architecture(model_path: str) -> tuple[str | None, int, str | None]:
    """(architecture, num_hidden_layers, error) of the TARGET model."""
    p = Path(os.path.expanduser(model_path))
    if p.exists():
        cfg = read_json(p / "config.json")
        archs = cfg.get("architectures") or []
        arch = archs[0] if archs and isinstance(archs[0], str) else None
        n = cfg.get("num_hidden_layers")
        layers = n if isinstance(n, int) else 61
        return arch, layers, None
    if model_path.startswith(("/", ".", "~")):
        return None, 61, (f"OSError: {model_path} is not a local folder and is not a valid model identifier "
                          f"listed on 'https://huggingface.co/models'")
    return ("LlamaForCausalLM" if "llama" in model_path.lower() else None), 61, None


class Server:
    def __init__(self, args: argparse.Namespace, argv: list[str], perf: PerfModel, arch: str | None):
        self.args, self.argv, self.perf, self.arch = args, argv, perf, arch
        self.ready_at: float | None = None
        self.lock = threading.Lock()
        self.decode_steps = 0
        self.accepted_tokens = 0
        self.generate_calls = 0
        self.last_decode_log = 0.0
        self.children: list[subprocess.Popen[bytes]] = []
        self.shutting_down = False
        self.time_scale = float(os.environ.get("EAGLE_SIM_TIME_SCALE", "0.001"))
        self.batches = Batches(args, perf)
        self.policy = self.batches.policy
        self.overrides: dict[str, Any] = {}     # POST /set_internal_state: internal_states shows them
        self.served = 0                         # /generate requests answered (EAGLE_SIM_CRASH_AFTER_REQUESTS)

    def set_internal_state(self, asked: dict[str, Any]) -> list[bool]:
        """What a caller set at runtime (no API key: SGLang's ADMIN_OPTIONAL lets anyone): all of it or,
        with a key off the allow-list, nothing; SGLang answers one `updated` per DP rank."""
        bad = next((k for k in asked if k not in releases.SETTABLE), None)
        if bad is not None:
            log(f"Updating {bad} is not supported.")
            return [False]
        with self.lock:
            self.overrides.update(asked)
            self.decode_steps = self.accepted_tokens = 0     # reset_metrics, as a success does
        log(f"Config updated via context override: {asked}")
        return [True]

    # -- /server_info --------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        fields = releases.server_info_fields(VERSION, dict(vars(self.args)))
        info: dict[str, Any] = dict(fields)
        info.update(releases.server_info_top(
            VERSION, shlex.join(["python3", "-m", "sglang.launch_server", *self.argv]), 1024000,
            self.args.context_length or 131072))
        info["version"] = VERSION
        info["simulated"] = True
        state: dict[str, Any] = releases.internal_state(VERSION, fields, self.args.speculative_num_draft_tokens)
        with self.lock:
            state.update(self.overrides)
        state.update({"last_gen_throughput": round(self.perf.accept_len / self.perf.step_s(), 2),
                      "memory_usage": {"weight": 15.0, "kvcache": 98.2, "token_capacity": 1024000}})
        with self.lock:
            if self.args.speculative_algorithm and self.decode_steps >= 40:
                state["avg_spec_accept_length"] = round(self.accepted_tokens / self.decode_steps, 4)
        info["internal_states"] = [state]
        return info

    def flush(self) -> None:
        with self.lock:
            self.decode_steps = 0
            self.accepted_tokens = 0
            self.perf.next_epoch()

    # -- /generate -------------------------------------------------------------------
    def drops_request(self) -> bool:
        """EAGLE_SIM_COMPLETE_FRACTION=f: after the first request (the benchmark's warm-up), drop all but f."""
        frac = os.environ.get("EAGLE_SIM_COMPLETE_FRACTION")
        with self.lock:
            self.generate_calls += 1
            m = self.generate_calls - 1
        return bool(frac) and m > 0 and int(m * float(frac or 1)) == int((m - 1) * float(frac or 1))

    def generate(self, body: dict[str, Any], batch_hint: int | None = None) -> dict[str, Any]:
        with self.batches.running():
            out = self._generate(body, batch_hint)
        self.crash_if_due()
        return out

    def crash_if_due(self) -> None:
        """EAGLE_SIM_CRASH_AFTER_REQUESTS=n: the n-th request ends the server as an illegal memory access in
        the scheduler does (its traceback, then the launcher's sigquit handler takes the tree down)."""
        limit = _methods.crash_after()
        with self.lock:
            self.served += 1
            due = limit is not None and self.served >= limit
        if not due:
            return
        log("Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "sglang/srt/managers/scheduler.py", line 4931, in run_scheduler_process\n'
            '  File "sglang/srt/speculative/ngram_worker.py", line 486, in forward_batch_generation\n'
            f"{_methods.ILLEGAL_ACCESS}\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
            "below might be incorrect.", "TP0")
        log("Received sigquit from a child process. It usually means the child failed.")
        self.stop_children()
        os._exit(1)

    def _generate(self, body: dict[str, Any], batch_hint: int | None) -> dict[str, Any]:
        sp = body.get("sampling_params") or {}
        out_len = int(sp.get("max_new_tokens", 128))
        if "input_ids" in body:
            ids = body["input_ids"]
            in_len = len(ids[0]) if ids and isinstance(ids[0], list) else len(ids)
        else:
            text = body.get("text") or ""
            text = text[0] if isinstance(text, list) and text else text
            in_len = max(1, len(str(text).split()))
        perf = self.perf
        batch = batch_hint or self.batches.running_batch() or 1
        self.batches.route(batch)
        prompt = json.dumps(body.get("input_ids") or body.get("text"))[:4096]
        if self.args.speculative_algorithm and (perf.landscape is not None or perf.method is not None):
            accept = max(1.0, _landscape.accept_length(perf.positions(prompt)))  # this prompt's own
            verify_ct = max(1, math.ceil(max(0, out_len - 1) / accept))
        elif self.args.speculative_algorithm:
            verify_ct = perf.verify_ct(out_len)
        else:
            verify_ct = max(0, out_len - 1)
        ttft, itl = perf.ttft_s(in_len), perf.itl_s(batch)
        e2e = ttft + max(0, out_len - 1) * itl
        # benchmark requests (a few hundred tokens) take milliseconds; a long one holds its place in
        # the running batch for a while, as it would on a real server
        time.sleep(min(0.25, e2e * self.time_scale))
        with self.lock:
            self.decode_steps += verify_ct
            self.accepted_tokens += max(0, out_len - 1)
            steps, acc = self.decode_steps, self.accepted_tokens
            now = time.monotonic()
            log_it = now - self.last_decode_log > 0.2
            if log_it:
                self.last_decode_log = now
        if log_it:
            al = acc / steps if steps else 1.0
            rate = (al - 1) / max(1, (self.args.speculative_num_draft_tokens or 2) - 1)
            spec = (f"accept len: {al:.2f}, accept rate: {rate:.2f}, "
                    if self.args.speculative_algorithm else "")
            graphs = not self.args.disable_cuda_graph
            log(f"Decode batch, #running-req: {batch}, #token: {in_len + out_len}, token usage: 0.00, {spec}"
                f"cuda graph: {graphs}, gen throughput (token/s): {batch / itl:.2f}, #queue-req: 0", "TP0")
        meta: dict[str, Any] = {"id": uuid.uuid4().hex, "finish_reason": {"type": "length", "length": out_len},
                "prompt_tokens": in_len, "weight_version": "default", "num_retractions": 0,
                "reasoning_tokens": 0, "completion_tokens": out_len, "cached_tokens": 0,
                "cached_tokens_details": None, "dp_rank": None, "e2e_latency": e2e,
                "simulated_ttft": ttft, "simulated_itl": itl}
        if self.args.speculative_algorithm:
            # the first token comes from the prefill; beyond one per verify step, from accepted drafts; the
            # per-position histogram is the acceptance model's (a forced length, random weights, the
            # landscape, a draft that declares its training, else the perf model)
            fitted = perf.spec_meta(out_len, verify_ct, prompt)
            correct = int(fitted.get("spec_num_correct_drafts", max(0, out_len - 1 - verify_ct)))
            meta.update(releases.spec_meta(VERSION, out_len, verify_ct, self.args.speculative_num_draft_tokens or 2,
                                           correct))
            if "spec_correct_drafts_histogram" in fitted:
                meta["spec_correct_drafts_histogram"] = fitted["spec_correct_drafts_histogram"]
                if "spec_accept_histogram" in meta:
                    meta["spec_accept_histogram"] = fitted["spec_correct_drafts_histogram"]
        meta["response_sent_to_client_ts"] = time.time()
        if float(sp.get("temperature", 1.0)) == 0.0:
            ids, top = self.greedy(json.dumps(body.get("input_ids") or body.get("text")), out_len)
            if body.get("return_logprob"):
                # SGLang's shape: per output position [logprob, token id, text (None unless asked)]
                meta["output_token_logprobs"] = [[row[0][0], t, None] for row, t in zip(top, ids)]
                meta["output_top_logprobs"] = [[[lp, i, None] for lp, i in row[:max(0, int(
                    body.get("top_logprobs_num") or 0))]] for row in top]
            return {"text": " ".join(f"t{i}" for i in ids), "output_ids": ids, "meta_info": meta}
        return {"text": " simulated" * min(out_len, 64), "output_ids": list(range(out_len)), "meta_info": meta}

    def lossy_fraction(self) -> float:
        """EAGLE_SIM_LOSSY_DRAFT, else the draft config's `eagle_sim_lossy_fraction` (0: faithful)."""
        if not self.args.speculative_algorithm:
            return 0.0
        if self.perf.method is not None and self.perf.method.lossy:
            return self.perf.method.lossy
        env = os.environ.get("EAGLE_SIM_LOSSY_DRAFT")
        if env:
            return float(env)
        draft = self.args.speculative_draft_model_path
        return float(read_json(Path(draft) / "config.json").get("eagle_sim_lossy_fraction") or 0.0) if draft else 0.0

    def greedy(self, prompt: str, n: int) -> tuple[list[int], list[list[tuple[float, int]]]]:
        """The greedy tokens for a prompt and, at each position, the (logprob, id) of the token emitted and
        of the runner-up. The target's are a function of the prompt alone, as temperature 0 is. Where its
        top-2 are tied in bf16 (_greedy_ties.py: at the rates a real pair measured) a speculative server
        may emit the runner-up, as a real verify pass does; a lossy draft changes a fixed share of
        prompts' outputs from a token where the target's choice was clear."""
        seed = hashlib.sha256(prompt.encode()).digest()
        rng = random.Random(seed)
        ids = [rng.randrange(32000) for _ in range(n)]
        top = _greedy_ties.top2(seed, ids)
        if not self.args.speculative_algorithm:
            return ids, top
        k = _greedy_ties.flip_at(seed, top)
        token = top[k][1][1] if k is not None else 0
        lossy = random.Random(seed + b"draft")
        forced = self.perf.forced() is not None
        if n and (forced or lossy.random() < self.lossy_fraction()):
            # SGLANG_SIMULATE_ACC_LEN accepts drafts the target rejected: every output changes early
            at = lossy.randrange(min(n, 8) if forced else n)
            clear = next((j for j in range(at, n) if not _greedy_ties.is_tie(top[j])), None)
            if clear is not None and (k is None or clear < k):
                k, token = clear, (ids[clear] + 1 + lossy.randrange(31999)) % 32000
        if k is None:
            return ids, top
        after = _greedy_ties.branch(seed, k, token, n - k)
        rest = _greedy_ties.top2(seed + k.to_bytes(4, "big"), after)
        return ids[:k] + after, top[:k] + rest

    # -- lifecycle ---------------------------------------------------------------------
    def stop_children(self) -> None:
        self.shutting_down = self.batches.stopped = True
        for c in self.children:
            if c.poll() is None:
                try:
                    c.terminate()
                except OSError:
                    pass
        for c in self.children:
            try:
                c.wait(5)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait()

    def watch_child(self, c: subprocess.Popen[bytes]) -> None:
        c.wait()
        if not self.shutting_down:
            log("Received sigquit from a child process. It usually means the child failed.")
            self.stop_children()
            os._exit(1)


def _stall_if(stall: bool) -> None:
    """Hang silently, as a start-up stuck in NCCL init or CUDA graph capture does (SIGTERM still ends it)."""
    while stall:
        time.sleep(3600)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    log(BANNER)
    arch, num_layers, model_err = _model_architecture(args.model_path)
    if model_err:
        log(model_err)
        return 1
    try:
        warnings = resolve_speculative(args, arch)
    except SpecError as e:
        _fail_traceback(e.kind, str(e))
        return 1
    if args.mem_fraction_static is None:
        args.mem_fraction_static = 0.88
    if args.chunked_prefill_size is None:
        args.chunked_prefill_size = 8192
    for w in warnings:
        log(w)
    aux_ids = None
    if args.speculative_draft_model_path:
        dp = Path(os.path.expanduser(args.speculative_draft_model_path))
        if not dp.exists():
            log(f"OSError: {args.speculative_draft_model_path} is not a local folder and is not a valid model "
                f"identifier listed on 'https://huggingface.co/models'")
            return 1
    method = _methods.load(args, read_json(Path(os.path.expanduser(args.model_path)) / "config.json"), arch,
                           num_layers) if args.speculative_algorithm else None
    if args.speculative_draft_model_path and method is None:
        aux_ids = aux_layer_ids(read_json(Path(os.path.expanduser(args.speculative_draft_model_path)) / "config.json"))
    fields = ", ".join(f"{k}={v!r}" for k, v in vars(args).items())
    log(f"server_args=ServerArgs({fields})")
    perf = PerfModel(args, num_layers, aux_ids, method)
    server = Server(args, argv, perf, arch)

    def on_term(*_a: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second SIGTERM must not re-enter
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server.stop_children()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    mib = int(args.mem_fraction_static * H200_MIB)
    stall_at = os.environ.get("EAGLE_SIM_STALL_AT", "")
    pre_gb = 139.21
    weights = weights_gb(read_json(Path(os.path.expanduser(args.model_path)) / "config.json"))
    log("Init torch distributed begin.", "TP0")
    _stall_if(stall_at == "nccl")
    log("Init torch distributed ends. mem usage=0.00 GB", "TP0")
    log(f"Load weight begin. avail mem={pre_gb:.2f} GB", "TP0")
    _stall_if(stall_at == "load")
    time.sleep(float(os.environ.get("EAGLE_SIM_LOAD_S", "0.3")))
    for w in method.warnings if method is not None else []:
        log(w, "TP0")       # the model runner's warnings, e.g. DFLASH's num_target_layers (it goes on)
    if method is not None and method.fatal:   # the draft worker's load, in the scheduler process
        log("Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "sglang/srt/managers/scheduler.py", line 4931, in run_scheduler_process\n'
            f"{method.fatal}", "TP0")
        log("Received sigquit from a child process. It usually means the child failed.")
        return 1
    fatal = os.environ.get("EAGLE_SIM_FAIL")
    if fatal:
        if fatal == "1":
            fatal = "Not enough memory. Please try to increase --mem-fraction-static."
        log(fatal, "TP0")
        log("Received sigquit from a child process. It usually means the child failed.")
        return 1
    budget_error = releases.kv_budget_error(args.mem_fraction_static, pre_gb, pre_gb - weights)
    if budget_error:   # the scheduler's traceback, then the launcher's sigquit handler (engine.py)
        log(f"Load weight end. type={arch or 'LlamaForCausalLM'}, dtype=torch.bfloat16, "
            f"avail mem={pre_gb - weights:.2f} GB, mem usage={weights:.2f} GB.", "TP0")
        log("Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "sglang/srt/managers/scheduler.py", line 4931, in run_scheduler_process\n'
            '  File "sglang/srt/mem_cache/kv_cache_configurator.py", line 1646, in _profile_available_bytes\n'
            f"{budget_error}", "TP0")
        log("Received sigquit from a child process. It usually means the child failed.")
        return 1
    gpus = visible_gpus(args.tp_size)
    for rank, gpu in enumerate(gpus):
        c = subprocess.Popen([sys.executable, "-m", "sglang._sim_scheduler", f"sglang::scheduler_TP{rank}",
                              str(rank), str(gpu), str(mib), str(rank)],
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        server.children.append(c)
    for rank, c in enumerate(server.children):
        # Wait for READY; end of file means the scheduler exited before it got there.
        assert c.stdout is not None  # Popen(stdout=PIPE)
        ready = any(b"READY" in line for line in iter(c.stdout.readline, b""))
        if not ready:
            server.stop_children()
            log(f"Rank {rank} scheduler died during initialization (exit code: {c.wait()})")
            return 1
        threading.Thread(target=server.watch_child, args=(c,), daemon=True).start()
    log(f"Load weight end. type={arch or 'LlamaForCausalLM'}, dtype=torch.bfloat16, "
        f"avail mem={pre_gb - weights:.2f} GB, mem usage={weights:.2f} GB.", "TP0")
    if aux_ids is not None:
        log(f"EAGLE-3 draft capture layers (eagle_aux_hidden_state_layer_ids): {aux_ids}", "TP0")
    log("KV Cache is allocated. #tokens: 1024000, K size: 49.22 GB, V size: 49.22 GB", "TP0")
    # sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py:759 and :788 (0.5.23)
    graph = "target verify" if args.speculative_algorithm else "target decode"
    per_req = (args.speculative_num_draft_tokens or 1) if args.speculative_algorithm else 1
    if args.disable_cuda_graph:   # 0.5.17's own words for it (tests/fixtures/sglang/0.5.17/h200-real/server.log)
        log("Disable prefill CUDA graph because cuda_graph_config resolved prefill.backend='disabled' (e.g. via "
            "--cuda-graph-backend-prefill=disabled or auto-disable rules).", "TP0")
    else:
        log(f"Capture {graph} CUDA graph begin. backend=full, num_tokens_per_req={per_req}, avail mem=25.52 GB",
            "TP0")
        _stall_if(stall_at == "cuda_graph")
        log(f"Capture {graph} CUDA graph end. bs=[1, 2, 4, 8], elapsed=0.00 s, mem usage=0.61 GB, "
            f"avail mem=24.91 GB.", "TP0")
    log(f"max_total_num_tokens=1024000, chunked_prefill_size={args.chunked_prefill_size}, "
        f"max_prefill_tokens={args.max_prefill_tokens}, max_running_requests={args.max_running_requests or 2048}, "
        f"context_len={args.context_length or 131072}, available_gpu_mem=24.91 GB", "TP0")
    if os.environ.get("EAGLE_SIM_PORT_BUSY"):
        httpd = None
    else:
        try:
            # uvicorn's backlog is 2048; http.server's default of 5 resets concurrent clients
            ThreadingHTTPServer.request_queue_size = 2048
            httpd = ThreadingHTTPServer((args.host, args.port), _sim_http.handler(server))
        except OSError:
            httpd = None
    if httpd is None:
        log(f"ERROR:    [Errno 98] error while attempting to bind on address ('{args.host}', {args.port}): "
            f"address already in use")
        server.stop_children()
        return 1
    httpd.daemon_threads = True
    log(f"INFO:     Started server process [{os.getpid()}]")
    log("INFO:     Waiting for application startup.")
    log("INFO:     Application startup complete.")
    log(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")

    def warmup() -> None:
        time.sleep(float(os.environ.get("EAGLE_SIM_WARMUP_S", "0.3")))
        _stall_if(stall_at == "warmup")
        gate = os.environ.get("EAGLE_SIM_WARMUP_UNTIL_FILE")
        while gate and not os.path.exists(gate):
            time.sleep(0.05)
        log("Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
            "#running-req: 0, #queue-req: 0, ", "TP0")
        server.ready_at = time.monotonic()
        log("The server is fired up and ready to roll!")

    threading.Thread(target=warmup, daemon=True).start()
    if server.policy is not None:
        slot = server.policy.slots[server.policy.bs_list[0]]
        log(f"AdaptiveSpeculativeParams initialized: steps={slot.current_steps}, "
            f"candidate_steps={slot.candidate_steps}", "TP0")
        threading.Thread(target=server.batches.decode_loop, daemon=True).start()
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        server.stop_children()
    return 0


if __name__ == "__main__":
    sys.exit(main())
