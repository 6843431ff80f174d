"""`eagle demo`: the relaunch story on a SIMULATED GPU host, on any machine.

No config, no Slack, no GPU: a sandbox folder gets the simulated tools (nvidia-smi,
an SGLang that speaks the real flags, log lines and endpoints), a fake target model,
an EAGLE-3 draft, an `eagle.yaml` with one host `sim-gpu-01` (local transport) and
an audit DB. A forgotten server the bot launched earlier holds the simulated GPU.
Then, through the real `eagle` command code:

1. `eagle run relaunch` with topk 1 and 16 draft tokens: the stale server is killed,
   the GPU verified free, SGLang relaunched, benchmarked; the bot warns that SGLang
   silently turns 16 draft tokens into 4; the draft-contract gate sees the draft for
   the first time (what its config makes the server capture is recorded) and the probe
   finds its acceptance per position as its training (SpecForge's best_meta.json) predicts;
2. `eagle run bench`: the reference throughput;
3. `eagle run relaunch -e aux_layers=[-1,2,30]` (the seeds' wrong "fix"): the gate refuses
   it with exit code 2, naming what the server would feed the draft and what training used,
   before the running server is touched (it keeps serving);
4. the same with `-e draft_mismatch=allow`: patched (diff and backup recorded), relaunched,
   and the probe says `wrong inputs`, naming the capture list;
5. `eagle run bench -e baseline_tok_s=<run 2>`: the drop is flagged (exit code 3),
   naming the config change since the last good run;
6. `eagle run draft-repair --yes`: candidate capture lists tried as relaunches, the one that
   restores acceptance kept (the draft's config is byte for byte as trained again);
7. `eagle bisect` names the change that cost the throughput, then `eagle history` and `eagle show`.
The draft declares what it was trained on in SIMULATED-training.json (the sim's truth).
Every process the demo started is stopped at the end.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import AbstractSet, Callable, Sequence

import yaml

EagleMain = Callable[[Sequence[str]], int]

HOST = "sim-gpu-01"
BANNER = "=" * 78


def _say(text: str = "") -> None:
    print(text, flush=True)


def _free_port(avoid: AbstractSet[int] = frozenset()) -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in avoid and port + 1 not in avoid:
            return port


def _write_models(root: Path) -> tuple[Path, Path]:
    models = root / "models"
    target, draft = models / "Llama-3.1-8B-Instruct-SIMULATED", models / "EAGLE3-LLaMA3.1-8B-SIMULATED"
    target.mkdir(parents=True)
    draft.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 61, "num_attention_heads": 32, "vocab_size": 128256,
        "_comment": "SIMULATED model for the eaglebot demo: there are no weights"}, indent=2) + "\n")
    (draft / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 4096,
        "num_hidden_layers": 1, "draft_vocab_size": 32000,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True},
        "_comment": "SIMULATED EAGLE-3 draft for the eaglebot demo"}, indent=2) + "\n")
    accuracy = [0.747, 0.71, 0.68]
    # the sim's truth: what this draft learned from (a real draft's weights know it)
    (draft / "SIMULATED-training.json").write_text(json.dumps({"trained_layer_outputs": [2, 30, 58],
                                                               "per_position_acc": accuracy}) + "\n")
    # what its trainer wrote beside it: SpecForge's CheckpointManager best_meta.json
    (models / "llama31-8b-eagle3.best_meta.json").write_text(json.dumps({
        "run_id": "llama31-8b-eagle3", "step": 12000, "score": 2.41, "metric": "eval/simulated_acc_len",
        "metrics": {"eval/avg_acc": accuracy[0], "eval/per_position_acc": accuracy,
                    "eval/simulated_acc_len": 2.41}}, indent=2) + "\n")
    return target, draft


def _wait_health(port: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < deadline:
        try:
            with opener.open(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def _start_stale_server(python: str, target: Path, draft: Path, state_dir: Path, port: int, log_dir: Path) -> int:
    """A server 'the bot launched last week' and forgot: same pid-file convention as server.launch."""
    import asyncio

    from eaglebot.transport import LocalTransport

    (state_dir / "run").mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    argv = [python, "-m", "sglang.launch_server", "--model-path", str(target),
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft),
            "--mem-fraction-static", "0.6", "--host", "127.0.0.1", "--port", str(port)]
    return asyncio.run(LocalTransport().spawn_detached(
        argv, log_path=str(log_dir / f"server-{port}-stale.log"),
        pid_path=str(state_dir / "run" / f"server-{port}.pid")))


def _stop_everything(state_dir: Path) -> list[int]:
    """SIGTERM then SIGKILL each session the demo's pid files name (servers and their schedulers)."""
    leaders = []
    for pf in (state_dir / "run").glob("*.pid"):
        try:
            leaders.append(int(pf.read_text().split()[0]))
        except (ValueError, IndexError, OSError):
            continue
    stopped = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in leaders:
            try:
                os.killpg(pgid, sig)
                stopped.append(pgid)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_group_alive(g) for g in leaders):
            time.sleep(0.05)
    for pf in (state_dir / "run").glob("*.pid"):
        pf.unlink(missing_ok=True)
    return sorted(set(stopped))


def _group_alive(pgid: int) -> bool:
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            text = (d / "stat").read_text()
        except OSError:
            continue
        rest = text[text.rindex(")") + 2:].split()
        if int(rest[2]) == pgid and rest[0] not in ("Z", "X"):
            return True
    return False


def _server_pid(state_dir: Path, port: int) -> int | None:
    try:
        return int((state_dir / "run" / f"server-{port}.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _eagle(eagle: EagleMain, cfg: Path, *argv: str) -> int:
    _say(f"\n$ eagle {' '.join(argv)}")
    sys.stdout.flush()
    rc = eagle(["--config", str(cfg), *argv])
    sys.stdout.flush()
    sys.stderr.flush()
    _say(f"(exit code {rc})")
    return rc


def _last_metric(db: Path, run_id: int, name: str) -> float | None:
    from eaglebot.store import Store

    store = Store(db)
    try:
        return store.metric_value(run_id, name)
    finally:
        store.close()


def _last_run_id(db: Path) -> int:
    from eaglebot.store import Store

    store = Store(db)
    try:
        return store.last_run_id() or 0
    finally:
        store.close()


def demo_main(eagle: EagleMain, workdir: str | os.PathLike[str] | None = None, keep: bool = False) -> int:
    """The demo, each step through `eagle` (the CLI's `main`, passed in: this module is
    imported by the CLI, never the other way round)."""
    from eaglebot.sim import gpu_state, install_sim_bin

    root = Path(workdir).resolve() if workdir else Path(tempfile.mkdtemp(prefix="eagle-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    state_dir, sim_state, bin_dir = root / "state", root / "gpu-state", root / "bin"
    _say(BANNER)
    _say("eaglebot demo: SIMULATED GPU host. Nothing here touches a real GPU or a real SGLang server;")
    _say("the tools are real eaglebot code paths, the GPU, nvidia-smi and SGLang are SIMULATED.")
    _say(f"sandbox: {root}")
    _say(BANNER)
    host_vars = install_sim_bin(bin_dir, sim_state)
    gpu_state.init_state(sim_state, 1)
    target, draft = _write_models(root)
    port = _free_port()
    stale_port = port + 1
    cfg = root / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({
        "audit_db": "eagle.db",
        "state_dir": str(state_dir),
        "default_hosts": [HOST],
        "hosts": {HOST: {"transport": "local", "vars": {
            "python": host_vars["python"], "nvidia_smi": host_vars["nvidia_smi"],
            "model": str(target), "draft": str(draft), "port": port}}},
    }, sort_keys=False))
    draft_cfg = draft / "config.json"
    original = draft_cfg.read_bytes()
    codes: dict[str, int] = {}
    ok = False
    old_env = os.environ.get("EAGLE_SIM_STATE")
    os.environ["EAGLE_SIM_STATE"] = str(sim_state)
    try:
        _say(f"\nA server the bot launched earlier is still up on port {stale_port}, holding the SIMULATED GPU ...")
        _start_stale_server(host_vars["python"], target, draft, state_dir, stale_port, state_dir / "logs")
        if not _wait_health(stale_port):
            _say("the stale SIMULATED server did not start; see " + str(state_dir / "logs"))
            return 1
        apps = subprocess.run([host_vars["nvidia_smi"], "--query-compute-apps=pid,process_name,used_memory",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
        _say(f"SIMULATED nvidia-smi compute apps: {apps.stdout.strip() or '(none)'}")

        spec = ["-e", "spec_steps=3", "-e", "spec_topk=1", "-e", "spec_draft_tokens=16",
                "-e", "bench_prompts=32", "-e", "bench_output_len=128"]
        _say("\n--- 1. relaunch (asking for 16 draft tokens with topk 1: watch the warning) ---")
        codes["relaunch"] = _eagle(eagle, cfg, "run", "relaunch", "-H", HOST, *spec)
        relaunched = _last_run_id(root / "eagle.db")

        bench = ["run", "bench", "-H", HOST, "-e", "num_prompts=32", "-e", "output_len=128"]
        _say("\n--- 2. benchmark it: the reference throughput ---")
        codes["bench-good"] = _eagle(eagle, cfg, *bench)
        good = _last_run_id(root / "eagle.db")
        base = _last_metric(root / "eagle.db", good, "output_throughput")

        wrong = ["-e", "aux_layers=[-1,2,30]"]
        _say("\n--- 3. relaunch with the draft's capture layers 'fixed' to [-1,2,30]: the gate refuses it ---")
        serving = _server_pid(state_dir, port)
        codes["relaunch-refused"] = _eagle(eagle, cfg, "run", "relaunch", "-H", HOST, *spec, *wrong)
        still = serving is not None and _server_pid(state_dir, port) == serving and _wait_health(port, 5)
        _say(f"the server from step 1 (pid {serving}) is still serving, untouched: {still}")

        _say("\n--- 4. the same, allowed (-e draft_mismatch=allow): the probe names the capture list ---")
        codes["relaunch-allowed"] = _eagle(eagle, cfg, "run", "relaunch", "-H", HOST, *spec, *wrong,
                                           "-e", "draft_mismatch=allow")
        patched = _last_run_id(root / "eagle.db")

        _say(f"\n--- 5. benchmark again against run {good}'s throughput (a regression exits 3 and says what changed) ---")
        codes["bench"] = _eagle(eagle, cfg, *bench, "-e", f"baseline_tok_s={base if base is not None else 0:.2f}")

        _say("\n--- 6. repair: candidate capture lists tried as relaunches (approved with --yes), the best kept ---")
        codes["repair"] = _eagle(eagle, cfg, "run", "draft-repair", "-H", HOST, "--yes")
        restored = draft_cfg.read_bytes() == original
        _say(f"draft config.json restored byte for byte: {restored}")

        _say(f"\n--- 7. which change cost it? bisect relaunch #{relaunched} (good) against #{patched} (bad) ---")
        codes["bisect"] = _eagle(eagle, cfg, "bisect", str(relaunched), str(patched), "-H", HOST, "--repeats", "1",
                                 "--prompts", "16", "--yes")

        _say("\n--- 8. the audit trail ---")
        _eagle(eagle, cfg, "history")
        _eagle(eagle, cfg, "show", str(patched))
        ok = (codes == {"relaunch": 0, "bench-good": 0, "relaunch-refused": 2, "relaunch-allowed": 0, "bench": 3,
                        "repair": 0, "bisect": 0} and restored and still)
    finally:
        stopped = _stop_everything(state_dir)
        if old_env is None:
            os.environ.pop("EAGLE_SIM_STATE", None)
        else:
            os.environ["EAGLE_SIM_STATE"] = old_env
        _say(f"\nstopped the SIMULATED server session(s): {', '.join(map(str, stopped)) or 'none left'}")
        if not keep and workdir is None:
            shutil.rmtree(root, ignore_errors=True)
        elif keep or workdir is not None:
            _say(f"sandbox kept: {root} (try: eagle --config {cfg} history)")
    _say(BANNER)
    _say(f"eaglebot demo finished ({'as expected' if ok else 'NOT as expected: ' + json.dumps(codes)}). "
         "Everything above was SIMULATED.")
    _say(BANNER)
    return 0 if ok else 1
