"""The draft-contract gate on a REAL SGLang (0.5.17, staged by scripts/gpu/real-sglang.sh: host
var `python` is /tmp/sgpy, the tiny dummy-weight Llama and its EAGLE-3 draft in /tmp/sgmodel).

1. `draft-check` reads the host's INSTALLED SGLang source (no torch import) for the target's
   architecture and says what the draft will be fed; declared training layers give `ok`, a planned
   wrong list `mismatch` with exit 2 (and 0.5.17's forward crashes on an embedding capture: a finding);
2. `relaunch` launches the real server, then `draft.probe` reads its real per-request stats: with
   dummy weights nothing is accepted, which the probe reports as `unknown` (load_format=dummy), never
   as a crash or a false `wrong inputs`.
What each step measured goes to $OUT/real-draft-gate.json (docs/gpu-validation.md).

    EAGLE_REAL_SGLANG_PYTHON=/tmp/sgpy EAGLE_REAL_SGLANG_MODELS=/tmp/sgmodel pytest -o addopts="" -m gpu \
        tests/gpu/test_real_draft_gate.py
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.gpu

SGPY = os.environ.get("EAGLE_REAL_SGLANG_PYTHON", "/tmp/sgpy")
MODELS = Path(os.environ.get("EAGLE_REAL_SGLANG_MODELS", "/tmp/sgmodel"))
# What the staged tree can run (scripts/gpu/real-sglang.sh): no CUDA graphs, triton attention.
EXTRA = ["--load-format", "dummy", "--attention-backend", "triton", "--sampling-backend", "pytorch",
         "--disable-cuda-graph", "--dtype", "bfloat16"]
OUT = Path(os.environ.get("OUT", "/tmp/eagle-gpu-out"))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eagle(cfg: Path, *argv: str, timeout: float = 400) -> tuple[int, dict, float]:
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "eaglebot", "--config", str(cfg), "run", *argv, "-H", "gpu", "--json"],
                         capture_output=True, text=True, timeout=timeout, cwd=cfg.parent, input="")
    try:
        doc = json.loads(res.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"eagle run {' '.join(argv)}: no JSON\n{res.stdout}\n{res.stderr[-3000:]}") from None
    return res.returncode, doc, time.monotonic() - t0


def step(doc: dict, name: str) -> dict:
    [s] = [s for s in doc["steps"] if s["name"] == name]
    return s


def why(doc: dict) -> str:
    return "\n".join(f"{s['name']} [{s['status']}] {s['summary']}" for s in doc["steps"])


def test_the_gate_and_the_probe_on_a_real_sglang(tmp_path):
    for p in (SGPY, MODELS / "target" / "config.json", MODELS / "draft" / "config.json"):
        assert Path(p).exists(), f"{p} is missing: run scripts/gpu/real-sglang.sh (it stages the real SGLang)"
    port = _port()
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({"audit_db": "eagle.db", "hosts": {"gpu": {"transport": "local", "vars": {
        "python": SGPY, "model": str(MODELS / "target"), "draft": str(MODELS / "draft"), "port": port}}}}))
    ids = json.loads((MODELS / "draft" / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    record: dict = {}

    rc, doc, secs = eagle(cfg, "draft-check")
    check = step(doc, "check the draft's inputs")
    assert rc == 0 and check["data"]["resolved_by"].startswith("read from the host's SGLang 0.5.17 source"), why(doc)
    assert check["data"]["verdict"] == "unknown" and check["data"]["server_points"] == ids, check
    record["first_check"] = {"seconds": round(secs, 2), "data": check["data"]}

    rc, doc, secs = eagle(cfg, "draft-check", "-e", f"draft_train_layers={','.join(map(str, ids))}")
    assert rc == 0 and step(doc, "check the draft's inputs")["data"]["verdict"] == "ok", why(doc)
    record["declared_check_s"] = round(secs, 2)

    rc, doc, secs = eagle(cfg, "draft-check", "-e", f"aux_layers=-1,{ids[0]},{ids[1]}")
    check = step(doc, "check the draft's inputs")
    assert rc == 2 and check["data"]["verdict"] == "mismatch", why(doc)
    assert "embedding_crash" in [f["kind"] for f in check["data"]["findings"]], check   # 0.5.17's forward
    record["mismatch"] = {"seconds": round(secs, 2), "summary": check["summary"]}

    rc, doc, secs = eagle(cfg, "relaunch", "-e", "spec_steps=3", "-e", "spec_topk=1", "-e", "spec_draft_tokens=4",
                          "-e", "mem_fraction=0.5", "-e", "bench_prompts=0", "-e", "ready_timeout_s=300",
                          "-e", f"extra_args={json.dumps(EXTRA)}")
    try:
        assert rc == 0, why(doc)
        check, probe = step(doc, "check the draft's inputs"), step(doc, "probe the draft's acceptance")
        assert check["data"]["verdict"] == "ok", check           # first seen in the draft-check above
        assert probe["status"] == "ok" and probe["data"]["verdict"] == "unknown", probe
        assert "dummy weights" in probe["summary"]
        record["relaunch"] = {"seconds": round(secs, 2), "probe": probe["data"], "probe_summary": probe["summary"]}
    finally:
        eagle(cfg, "stop", "--yes")
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "real-draft-gate.json").write_text(json.dumps(record, indent=1) + "\n")
