"""How long the method-aware pre-flight reads a host for (a script, not a test).

The host program (`facts.spec.methods.program()`) through `python3 -`, one process per check as the
launch pre-flight pays it, over model folders laid out as the real checkpoints (tests/support/spec_models.py:
DeepSeek-V3's 91k-name safetensors index for NEXTN; Qwen3-8B and its DFlash draft, whose fc shape
is read from a safetensors header, for DFLASH), with the REAL SGLang 0.5.23 source as the host's
sglang; for DFLASH also the capture probe (`set_dflash_layers_to_capture` run from that source).
Prints p50 / max wall time per method (process start to parsed answer).

    .venv/bin/python tests/bench/bench_method_gate.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support import spec_models as sm  # noqa: E402
from support.sglang_source import real_sglang  # noqa: E402

from eaglebot.facts.spec import eagle3, methods  # noqa: E402


def timed(argv: list[str], program: str, env: dict[str, str]) -> float:
    t0 = time.monotonic()
    res = subprocess.run(argv, input=program, capture_output=True, text=True, env=env)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    return took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(real_sglang("0.5.23", full=True).parent)}
    root = Path(tempfile.mkdtemp())
    ds, q, df = sm.deepseek_v3(root / "ds"), sm.qwen3_8b(root / "q"), sm.dflash_draft(root / "df")
    cases = {
        "NEXTN (DeepSeek-V3 index)": [json.dumps({"model": str(ds), "draft": None, "what": ["weights"]})],
        "DFLASH (configs, fc header)": [json.dumps({"model": str(q), "draft": str(df), "what": ["weights"]})],
    }
    for name, args in cases.items():
        walls = [timed([sys.executable, "-", *args], methods.program(), env) for _ in range(a.repeat)]
        print(f"{name}: p50 {statistics.median(walls):.3f} s, max {max(walls):.3f} s")
    probe = eagle3.probe_command(sys.executable, ["Qwen3ForCausalLM"], 36, [[1, 9, 17, 25, 33]],
                                 method="set_dflash_layers_to_capture")
    walls = [timed(["sh", "-c", probe], eagle3.probe_program(), env) for _ in range(a.repeat)]
    print(f"DFLASH capture probe (the target's own hook): p50 {statistics.median(walls):.3f} s, "
          f"max {max(walls):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
