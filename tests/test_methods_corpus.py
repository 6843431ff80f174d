"""Issue 44's corpus (tests/data/methods/corpus.json): every speculative method SGLang serves, each with
the silent failures the field reports and the combinations SGLang refuses, half of the cases healthy,
run through the SHIPPED relaunch playbook over the local transport against the SIMULATED SGLang
(src/eaglebot/sim/sglang_pkg/sglang/_methods.py), then, where a case says `then`, the event and the health
watch's next probe of the host. Every fault must be flagged where the case says (before the stop, at
the launch, by the closing benchmark, or by the watch's next probe) with the words it names, and no
healthy case may raise an alarm. The confusion counts are printed (`pytest -s`)."""
from __future__ import annotations

import asyncio
import json
import os
import re
import select
import struct
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from eaglebot.engine import health_watch
from eaglebot.frontends.cli.demo import _stop_everything
from eaglebot.engine.runner import RunRequest
from eaglebot.sim import gpu_state, install_sim_bin
from support.sglang_source import real_sglang
from test_server_skills import FAST, PY, free_port

CORPUS = json.loads((Path(__file__).parent / "data" / "methods" / "corpus.json").read_text())["cases"]
# Where a failed step of relaunch flags a fault: the steps before `stop old server`, the launch, the
# closing probe and benchmark.
STAGE = {"check the launch": "before_stop", "check the draft's inputs": "before_stop",
         "plan the relaunch": "before_stop", "launch SGLang": "launch",
         "probe the draft's acceptance": "bench", "benchmark": "bench"}
TOKENIZER_A = {"model": {"type": "BPE", "vocab": {f"t{i}": i for i in range(1000)}}}
TOKENIZER_B = {"model": {"type": "BPE", "vocab": {f"u{i}": i for i in range(1000)}}}
LLAMA = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 61, "hidden_size": 64, "vocab_size": 1000}
MTP = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "num_nextn_predict_layers": 1,
       "hidden_size": 64, "vocab_size": 1000}
DRAFTS: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    "eagle3": ({"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {
        "eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True}}, None),
    "dflash": ({"architectures": ["DFlashDraftModel"], "num_hidden_layers": 5, "hidden_size": 64, "vocab_size": 1000,
                "dflash_config": {"block_size": 8, "num_target_layers": 61, "target_layer_ids": [1, 15, 29, 43, 57]}},
               None),
    "standalone": ({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "hidden_size": 32,
                    "vocab_size": 1000}, TOKENIZER_A),
    "standalone-other-tokenizer": ({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4,
                                    "hidden_size": 32, "vocab_size": 1000}, TOKENIZER_B),
    "standalone-other-vocab": ({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "hidden_size": 32,
                                "vocab_size": 32000}, TOKENIZER_B),
}


def _write(folder: Path, config: dict[str, Any], tokenizer: dict[str, Any] | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    if tokenizer is not None:
        (folder / "tokenizer.json").write_text(json.dumps(tokenizer))


def _safetensors_header(path: Path, tensors: dict[str, list[int]]) -> None:
    """A safetensors file of these tensor shapes (header only: no tensor has bytes)."""
    header = json.dumps({k: {"dtype": "BF16", "shape": v, "data_offsets": [0, 0]} for k, v in tensors.items()})
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode())


def write_case_models(root: Path, case: dict[str, Any]) -> tuple[Path, Path | None]:
    target = root / "target"
    _write(target, MTP if case["target"].startswith("mtp") else LLAMA, TOKENIZER_A)
    if case["target"].startswith("mtp"):
        names = [f"model.layers.{i}.mlp.gate_up_proj.weight" for i in range(61)]
        if case["target"] == "mtp":      # the MTP head: the layer after the last decoder layer
            names += ["model.layers.61.eh_proj.weight", "model.layers.61.enorm.weight"]
        (target / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {}, "weight_map": {n: "model-00001.safetensors" for n in names}}))
    if case["draft"] is None:
        return target, None
    config, tokenizer = DRAFTS[case["draft"]]
    draft = root / "draft"
    _write(draft, {**config, **case.get("draft_config", {})}, tokenizer)
    if case["draft"] == "dflash":
        _safetensors_header(draft / "model.safetensors", {"fc.weight": [64, case.get("fc_width", 5 * 64)]})
    return target, draft


@dataclass
class Outcome:
    case: dict[str, Any]
    caught: str | None = None                  # where it was flagged (None: nowhere)
    said: str = ""
    alarms: list[str] = field(default_factory=list)    # anything a healthy case must not raise
    # simulated seconds between the server's readiness and the flag, where a benchmark came first (the
    # launch step's own check reads two greedy prompts right after readiness, within its 120 s budget)
    after_launch_s: float = 0.0

    @property
    def ok(self) -> bool:
        want = self.case["expect"]
        if want["caught"] is None:
            return self.caught is None and not self.alarms
        return self.caught == want["caught"] and want["says"] in self.said and self.after_launch_s < 120


def _post(port: int, path: str, body: dict[str, Any]) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with opener.open(req, timeout=30) as r:
        return json.loads(r.read())


def _serve_until_gone(port: int, pid: int, requests: int) -> None:
    """Serve `requests` greedy prompts, as hours of traffic would; a server that dies on one ends
    it (the request's connection drops), and its process is waited for."""
    for _ in range(requests):
        try:
            _post(port, "/generate", {"text": "def f(x): return x", "sampling_params": {"max_new_tokens": 32}})
        except (urllib.error.URLError, ConnectionError, OSError):
            break
    else:
        return                # it served them all
    try:                      # the launcher exits right after its sigquit handler: wait for that event
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [], 60)
    finally:
        os.close(fd)


async def run_case(svc: Any, state_dir: str, name: str, port: int, case: dict[str, Any],
                   overridden: bool = False) -> Outcome:
    """One case through relaunch (`overridden`: with the method-aware gate overridden, -e method_check=warn,
    judged by the case's `overridden` expectation)."""
    out = Outcome(dict(case, expect=case["overridden"]) if overridden else case)
    inputs = {"bench_prompts": 4, "bench_concurrency": 4, "bench_input_len": 64, "bench_output_len": 32,
              **case["inputs"], **({"method_check": "warn"} if overridden else {})}
    inputs["env"] = dict(FAST, **case.get("env", {}))
    res = await svc.engine.run(RunRequest(playbook="relaunch", hosts=[name],
                                          inputs={k: json.dumps(v) if isinstance(v, (dict, list)) else str(v)
                                                  for k, v in inputs.items()}))
    steps = svc.store.sync.steps(res.run_id)
    failed = [s for s in steps if s["status"] == "failed"]
    if failed:
        out.caught, out.said = STAGE.get(failed[0]["name"], failed[0]["name"]), failed[0]["summary"]
        if out.caught == "bench":   # flagged after the benchmark's own (simulated) duration
            records = json.loads(failed[0]["data"] or "{}").get("records") or []
            out.after_launch_s = sum(float(r.get("duration") or 0) for r in records)
        return out
    launch = next(s for s in steps if s["name"] == "launch SGLang")
    data = json.loads(launch["data"] or "{}")
    if (data.get("speculation") or {}).get("verdict") != "on":
        out.alarms.append(f"speculation {data.get('speculation')}")
    out.alarms += [w for w in res.warnings if "not really on" in w or "lossless" in w or "lossy" in w]
    then = case.get("then")
    if then is None:
        return out
    if then == "lower_threshold":
        assert _post(port, "/set_internal_state", {"server_args": {"speculative_accept_threshold_single": 0.3}}) == [True]
    else:
        await asyncio.to_thread(_serve_until_gone, port, int(data["pid"]), 6)
    host = svc.pool.get(name)
    probe = await health_watch.probe_host(host, svc.settings.hosts[name].vars, None, 60, state_dir=state_dir)
    server = [f.reason for f in probe.findings if "server" in f.reason]
    if server:
        out.caught, out.said = "watch", "; ".join(server)
    else:
        out.said = f"the watch's probe found {[f.reason for f in probe.findings]}"
    return out


def _host(root: Path, case: dict[str, Any]) -> tuple[dict[str, Any], int]:
    state = root / "gpu-state"
    vars_ = install_sim_bin(root / "bin", state, python=PY, version=case["release"])
    gpu_state.init_state(state, 2)
    target, draft = write_case_models(root / "models", case)
    port = free_port()
    host_vars = {"python": vars_["python"], "nvidia_smi": vars_["nvidia_smi"], "model": str(target), "port": port}
    if draft is not None:
        host_vars["draft"] = str(draft)
    return {"transport": "local", "vars": host_vars}, port


METHODS = sorted({c["method"] for c in CORPUS})


def test_the_corpus_covers_every_method_with_its_faults_and_half_of_it_is_healthy():
    faults = [c for c in CORPUS if c["expect"]["caught"] is not None]
    assert len(CORPUS) >= 30 and 2 * (len(CORPUS) - len(faults)) >= len(CORPUS) - 2
    assert set(METHODS) == {"DFLASH", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"}
    for m in METHODS:      # each method healthy and broken, on both releases the simulator speaks
        mine = [c for c in CORPUS if c["method"] == m]
        assert {c["expect"]["caught"] is None for c in mine} == {True, False}, m
        assert {c["release"] for c in mine} == {"0.5.17", "0.5.23"}, m


# One test per method, so that the default run's workers share the corpus (each case is a real relaunch
# of simulated processes: about a second).
@pytest.mark.e2e  # 44 whole relaunches (~55 s of CPU): CI's end-to-end step runs them
@pytest.mark.parametrize("method", METHODS)
async def test_every_fault_is_flagged_where_it_must_be_and_no_healthy_case_alarms(services, tmp_path, method):
    only = os.environ.get("EAGLE_CORPUS_ONLY")        # one case by id, to look at it alone
    cases = [c for c in CORPUS if c["method"] == method and (not only or c["id"] == only)]
    # A host each, with its own state folder and audit file, as separate machines have: relaunch's
    # GPU cleanup stops what the state folder's pid files name.
    opened = []
    for case in cases:
        root = tmp_path / case["id"]
        host, port = _host(root, case)
        svc = await services({case["id"]: host}, state_dir=str(root / "botstate"), audit_db=str(root / "eagle.db"))
        opened.append((svc, str(root / "botstate"), port, case))
    outcomes: list[Outcome] = []
    runtime: list[Outcome] = []      # the static faults again, the gate overridden: what the runtime checks see
    try:
        # One case at a time: on one machine with one cgroup, a step's leftover sweep would take a server
        # another case's step spawned meanwhile (transport/leftovers.py, rule 3).
        for svc, state_dir, port, case in opened:
            for overridden in (False, True) if "overridden" in case else (False,):
                try:
                    got = await run_case(svc, state_dir, case["id"], port, case, overridden)
                except Exception as e:      # one broken case is reported with the others, not alone
                    got = Outcome(case, "error", f"{type(e).__name__}: {e}")
                (runtime if overridden else outcomes).append(got)
    finally:
        for _, state_dir, _, _ in opened:
            _stop_everything(Path(state_dir))
    faults = [o for o in outcomes if o.case["expect"]["caught"] is not None]
    healthy = [o for o in outcomes if o.case["expect"]["caught"] is None]
    counts = Counter(("fault" if o in faults else "healthy", "flagged" if o.caught or o.alarms else "quiet")
                     for o in outcomes)
    print(f"\ncorpus {method}: {len(outcomes)} cases ({len(faults)} faults, {len(healthy)} healthy): "
          f"true alarms {counts['fault', 'flagged']}, missed {counts['fault', 'quiet']}, "
          f"false alarms {counts['healthy', 'flagged']}, quiet healthy {counts['healthy', 'quiet']}; "
          f"faults flagged {dict(Counter(o.caught for o in faults))}")
    print(f"  the gate overridden: {len(runtime)} static faults, flagged at runtime "
          f"{dict(Counter(o.caught for o in runtime))}")
    for o in outcomes + runtime:
        tag = " (gate overridden)" if o in runtime else ""
        print(f"  {o.case['id']}{tag}: {o.caught or 'quiet'}{': ' + o.said[:240] if o.said else ''}")
    wrong = [(o.case["id"], o.caught, o.said[:300], o.alarms) for o in outcomes + runtime if not o.ok]
    assert wrong == []


SIM = Path(__file__).resolve().parents[1] / "src" / "eaglebot" / "sim" / "sglang_pkg" / "sglang"
# What the simulator says for each method, as the real release's source says it (a literal of that file).
WORDS = [
    ("srt/arg_groups/speculative_hook.py", "Currently DFLASH speculative decoding only supports pp_size == 1.", "both"),
    ("srt/arg_groups/speculative_hook.py", "DFLASH with dp attention requires --enable-dp-lm-head.", "0.5.23"),
    ("srt/arg_groups/speculative_hook.py", "Currently DFLASH speculative decoding does not support dp attention.",
     "0.5.17"),
    ("srt/arg_groups/speculative_hook.py", "DFLASH speculative decoding requires setting --speculative-draft-model-path.",
     "both"),
    ("srt/arg_groups/speculative_hook.py", "For DFLASH they must match. ", "both"),
    ("srt/arg_groups/speculative_hook.py", "Currently ngram speculative decoding does not support dp attention.", "both"),
    ("srt/arg_groups/speculative_hook.py", "Currently standalone speculative decoding does not support dp attention.",
     "both"),
    ("srt/arg_groups/speculative_hook.py", "This combination is only supported for the 'flashinfer' backend.", "both"),
    ("srt/arg_groups/speculative_hook.py", "speculative_num_draft_tokens is set to 12 by default for ngram speculative "
                                           "decoding. ", "both"),
    ("srt/arg_groups/speculative_hook.py", "DeepSeek MTP does not require setting speculative_draft_model_path.",
     "both"),
    ("srt/model_executor/model_runner_components/spec_aux_hidden_state.py",
     "selecting capture layers based on the runtime target model.", "both"),
    ("srt/speculative/dflash_utils.py", "DFLASH target_layer_ids contains an out-of-range layer id. ", "both"),
    ("srt/speculative/standalone_worker_v2.py", "different token-to-id mappings even though their vocab sizes match. ",
     "both"),
    ("srt/speculative/spec_info.py", "Unknown speculative algorithm name: ", "both"),
]


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_the_simulators_refusals_and_warnings_are_the_releases_own_words(version):
    # adjacent string literals of the simulator's source joined, as Python joins them
    sim = re.sub(r'"\s*\n\s*f?"', "", (SIM / "_methods.py").read_text())
    for rel, words, where in WORDS:
        if where not in ("both", version):
            continue
        assert words in (real_sglang(version, full=True) / rel).read_text(), (version, rel, words)
        assert words in sim, words


@pytest.mark.e2e  # the GPU module in rehearsal: a pytest process of its own
def test_the_real_methods_gpu_module_passes_in_rehearsal(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("EAGLE_CONFIG", "PYTEST_ADDOPTS")}
    env.update(EAGLE_GPU_REHEARSAL="1", OUT=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-m", "gpu", "-q",
                        "tests/gpu/test_real_methods.py"], cwd=Path(__file__).resolve().parents[1], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and re.search(r"\b4 passed\b", p.stdout), p.stdout[-6000:] + p.stderr[-2000:]
    rec = json.loads((tmp_path / "real-methods.json").read_text())
    assert rec["mode"] == "rehearsal (SIMULATED SGLang)" and rec["1_ngram"]["speculation"]["algorithm"] == "NGRAM"
