"""The bed of tests/gpu/test_real_sglang.py: the host that runs a REAL SGLang (or, rehearsing, the
SIMULATED one speaking the same release), an eagle.yaml with that host over the local transport and
over SSH on loopback, the real `eagle` CLI, and the record of what was measured.

Real (on the GPU machine, after scripts/gpu/real-sglang.sh staged the tree): host var `python` is
/tmp/sgpy (the staged SGLang 0.5.17 alone on its path), `model`/`draft` the tiny dummy-weight Llama
and its EAGLE-3 draft in /tmp/sgmodel, real nvidia-smi. Rehearsal (EAGLE_GPU_REHEARSAL=1, any
machine): the simulated SGLang (src/eaglebot/sim, EAGLE_SIM_SGLANG_VERSION=0.5.17), the simulated nvidia-smi
and dmesg, model folders with the real tiny model's config.json. Everything else is the same: the
shipped playbooks, the default state_dir (~/.eaglebot), the same inputs.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from asyncssh_server import AsyncSSHServer, start_asyncssh_server
from real_gpu import kill_leftover_servers

REHEARSAL = os.environ.get("EAGLE_GPU_REHEARSAL") == "1"
SGPY = os.environ.get("EAGLE_REAL_SGLANG_PYTHON", "/tmp/sgpy")
MODELS = Path(os.environ.get("EAGLE_REAL_SGLANG_MODELS", "/tmp/sgmodel"))
RELEASE = "0.5.17"      # the staged tree's SGLang (sg_stage.sh), and the one the rehearsal simulates
# What the staged tree can run (sg_stage.sh): no CUDA graphs (deep_gemm not carried), no FA3.
EXTRA_ARGS = ["--load-format", "dummy", "--attention-backend", "triton", "--sampling-backend", "pytorch",
              "--disable-cuda-graph", "--dtype", "bfloat16"]
FREE_MIB = 1024
STATE = Path.home() / ".eaglebot"     # the default state_dir, on the one machine both hosts are

# The staged model's config.json (sg_tiny_model.py): the rehearsal's folders carry the same, so the
# simulated server sizes the same weights (0.3 GB).
TINY_TARGET = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
               "intermediate_size": 2816, "num_hidden_layers": 8, "num_attention_heads": 8,
               "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 32000, "torch_dtype": "bfloat16",
               "max_position_embeddings": 8192}
TINY_DRAFT = {**TINY_TARGET, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
              "draft_vocab_size": 32000,
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "use_aux_hidden_state": True}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadedSSH:
    """asyncssh's in-process server on its own event loop thread, so the tests can run the CLI with
    plain blocking calls while the server answers it."""

    def __init__(self, root: Path):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="asyncssh-server", daemon=True)
        self.thread.start()
        self.server: AsyncSSHServer = asyncio.run_coroutine_threadsafe(
            start_asyncssh_server(root), self.loop).result(60)

    def close(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)


@dataclass(repr=False)
class Run:
    """One `eagle run --json`: its exit status, document, wall time and the bed to explain it with."""
    argv: list[str]
    rc: int
    doc: dict[str, Any]
    seconds: float
    stderr: str
    bed: "Bed"

    def __repr__(self) -> str:   # pytest prints it beside every failed assertion: why() says the rest
        return f"Run(eagle {' '.join(self.argv[:4])} -> {self.rc})"

    def step(self, name: str) -> dict[str, Any]:
        found = [s for s in self.doc.get("steps", []) if s["name"] == name]
        assert len(found) == 1, f"no single step {name!r} in the run\n{self.why()}"
        return found[0]

    def data(self, name: str) -> dict[str, Any]:
        """The step's registered data, from the audit DB (the --json document does not carry it)."""
        row = self.bed.step_row(self.doc["run_id"], name)
        return json.loads(row["data"] or "{}")

    def metrics(self) -> dict[str, float]:
        return {m["name"]: m["value"] for m in self.doc.get("metrics", [])}

    def why(self) -> str:
        """Everything a person needs to see what went wrong without another device run."""
        lines = [f"$ {' '.join(self.argv)}  -> exit {self.rc} in {self.seconds:.1f}s"]
        for s in self.doc.get("steps", []):
            lines.append(f"  {s['name']} [{s['status']}] {s['duration_ms']} ms: {s['summary']}")
        lines += [f"  warning: {w}" for w in self.doc.get("warnings", [])]
        run_id = self.doc.get("run_id")
        if run_id is not None:
            for row in self.bed.step_rows(run_id):
                if row["status"] == "failed" and row["output"]:
                    lines.append(f"  -- output of {row['name']!r} (tail):")
                    lines += ["    " + ln for ln in row["output"].splitlines()[-40:]]
        lines += ["  -- eagle stderr (tail):", *("    " + ln for ln in self.stderr.splitlines()[-25:])]
        lines += ["  -- server log (tail):", *("    " + ln for ln in self.bed.server_log_tail(40))]
        return "\n".join(lines)


@dataclass(repr=False)
class Bed:
    work: Path
    port: int
    ssh: ThreadedSSH
    host_vars: dict[str, Any]
    config: Path
    nvidia_smi: str
    results: dict[str, Any] = field(default_factory=dict)
    out_file: Path | None = None

    def __repr__(self) -> str:
        return f"Bed(port {self.port}, {self.work})"

    # -- the CLI ---------------------------------------------------------------------------------
    def eagle(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """One real `eagle` command with the bed's config, in its folder, as a user runs it."""
        env = {k: v for k, v in os.environ.items() if k != "EAGLE_CONFIG"}
        return subprocess.run([sys.executable, "-m", "eaglebot", *args, "--config", str(self.config)],
                              capture_output=True, text=True, timeout=timeout, env=env, cwd=self.work,
                              stdin=subprocess.DEVNULL)

    def run(self, playbook: str, host: str, *inputs: str, timeout: float = 280) -> Run:
        args = ["run", playbook, "-H", host, "--json"]
        for kv in inputs:   # key=value inputs; an option (`--yes`) as it is
            args += [kv] if kv.startswith("--") else ["-e", kv]
        t0 = time.monotonic()
        try:
            res = self.eagle(*args, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            tail = "\n".join(["  -- eagle stderr (tail):", *("    " + ln for ln in err.splitlines()[-40:]),
                              "  -- server log (tail):", *("    " + ln for ln in self.server_log_tail(60))])
            raise AssertionError(f"`eagle run {playbook} -H {host}` did not end within {timeout:g}s\n{tail}") from None
        seconds = time.monotonic() - t0
        try:
            doc = json.loads(res.stdout)
        except json.JSONDecodeError:
            doc = {}
        run = Run([*args, "--config", str(self.config)], res.returncode, doc, seconds, res.stderr, self)
        assert doc, f"`eagle run {playbook}` printed no JSON document\nstdout: {res.stdout[-3000:]}\n{run.why()}"
        return run

    # -- the audit DB (read only) ----------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(f"file:{self.work / 'eagle.db'}?mode=ro", uri=True, timeout=30)
        db.row_factory = sqlite3.Row
        return db

    def step_rows(self, run_id: int) -> list[sqlite3.Row]:
        with self._db() as db:
            return list(db.execute("select * from steps where run_id = ? order by id", [run_id]))

    def step_row(self, run_id: int, name: str) -> sqlite3.Row:
        rows = [r for r in self.step_rows(run_id) if r["name"] == name]
        assert len(rows) == 1, f"run {run_id} has {len(rows)} steps named {name!r}"
        return rows[0]

    # -- the host --------------------------------------------------------------------------------
    def memory(self) -> dict[int, int]:
        out = subprocess.run([self.nvidia_smi, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True, timeout=60).stdout
        return {int(a): int(b) for a, b in (ln.split(", ") for ln in out.splitlines() if ln.strip())}

    def wait_free(self, timeout: float = 60, mib: int = FREE_MIB) -> dict[int, int]:
        deadline = time.monotonic() + timeout
        used = self.memory()
        while max(used.values()) > mib and time.monotonic() < deadline:
            time.sleep(0.2)
            used = self.memory()
        return used

    def health(self) -> int:
        """GET /health of the server on the port, from here (0: no answer)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"http://127.0.0.1:{self.port}/health", timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    def pid(self) -> int | None:
        try:
            tok = (STATE / "run" / f"server-{self.port}.pid").read_text().split()
        except OSError:
            return None
        return int(tok[0]) if tok and tok[0].isdigit() else None

    def server_log_tail(self, n: int) -> list[str]:
        logs = sorted((STATE / "logs").glob(f"server-{self.port}-*.log"), key=lambda p: p.stat().st_mtime)
        if not logs:
            return ["(no server log on this port yet)"]
        try:
            return [f"[{logs[-1].name}]", *logs[-1].read_text(errors="replace").splitlines()[-n:]]
        except OSError as e:
            return [f"(cannot read {logs[-1]}: {e})"]

    def host_sglang_version(self) -> str:
        """The SGLang release installed in the host's Python, asked without importing it (the real tree
        has its dist-info; the simulated package answers its __version__)."""
        code = ("import importlib.metadata as m\ntry:\n print(m.version('sglang'))\n"
                "except m.PackageNotFoundError:\n import sglang; print(sglang.__version__)")
        return subprocess.run([self.host_vars["python"], "-c", code], capture_output=True, text=True,
                              timeout=120, check=True).stdout.strip().splitlines()[-1]

    # -- the record --------------------------------------------------------------------------------
    def record(self, key: str, value: Any) -> None:
        """Keep a measurement and write the whole record at once (a killed run still leaves it)."""
        self.results[key] = value
        if self.out_file is not None:
            self.out_file.write_text(json.dumps(self.results, indent=1, default=str) + "\n")

    def keep_audit_trail(self) -> None:
        """A copy of the audit DB beside the record (sqlite's backup: the CLI runs have all ended)."""
        if self.out_file is None or not (self.work / "eagle.db").exists():
            return
        dst = sqlite3.connect(self.out_file.with_suffix(".db"))
        with self._db() as src:
            src.backup(dst)
        dst.close()

    def stop_leftovers(self) -> list[int]:
        """Kill what this bed's port still runs (pid file first, then whoever listens there)."""
        killed = kill_leftover_servers(STATE, self.port)
        pid = self.pid()
        if pid is not None and pid not in killed:
            try:
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        return killed


def write_models(root: Path) -> tuple[Path, Path]:
    target, draft = root / "target", root / "draft"
    for folder, cfg in ((target, TINY_TARGET), (draft, TINY_DRAFT)):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    return target, draft


def host_setup(work: Path) -> tuple[dict[str, Any], str]:
    """(host vars, nvidia-smi path) of the bed's host."""
    if REHEARSAL:
        from eaglebot.sim import gpu_state, install_sim_bin
        tools = install_sim_bin(work / "sim-bin", work / "sim-state", version=RELEASE)
        gpu_state.init_state(work / "sim-state", 1)
        target, draft = write_models(work / "models")
        return ({"python": tools["python"], "nvidia_smi": tools["nvidia_smi"], "dmesg": tools["dmesg"],
                 "model": str(target), "draft": str(draft)}, tools["nvidia_smi"])
    missing = [p for p in (SGPY, str(MODELS / "target" / "config.json"), str(MODELS / "draft" / "config.json"))
               if not os.path.exists(p)]
    assert not missing, (f"the real SGLang is not staged ({', '.join(missing)} missing): run the GPU suite with "
                         f"scripts/gpu/real-sglang.sh (it unpacks .sgstage/ and writes {SGPY})")
    return {"python": SGPY, "model": str(MODELS / "target"), "draft": str(MODELS / "draft")}, "nvidia-smi"


def make_bed(work: Path) -> Bed:
    host_vars, smi = host_setup(work)
    port = free_port()
    host_vars.update(port=port, extra_args=list(EXTRA_ARGS))
    ssh = ThreadedSSH(work / "assh")
    cfg = work / "eagle.yaml"
    # No state_dir, no output_dir: the defaults a new user gets (the state lands in ~/.eaglebot).
    cfg.write_text(yaml.safe_dump({"audit_db": "eagle.db", "hosts": {
        "gpu": {"transport": "local", "vars": dict(host_vars)},
        "gpu-ssh": ssh.server.host_config(vars=dict(host_vars))}}, sort_keys=False))
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else work
    out_dir.mkdir(parents=True, exist_ok=True)
    bed = Bed(work, port, ssh, host_vars, cfg, smi, out_file=out_dir / "real-sglang.json")
    bed.record("mode", "rehearsal (SIMULATED SGLang)" if REHEARSAL else "real SGLang on a GPU")
    bed.record("port", port)
    return bed
