"""A SIMULATED GPU host for tuning tests: the demo's sandbox (local transport, simulated
nvidia-smi and SGLang) with model loading and warm-up set to zero, so a relaunch + bench
point takes a fraction of a second."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import yaml

from support.sshd import free_port

from eaglebot.frontends.cli.demo import _stop_everything, _write_models
from eaglebot.sim import gpu_state, install_sim_bin

HOST = "sim-gpu-01"
# EAGLE_SIM_TIME_SCALE: the flap test's long requests (4096 tokens) hold their place in the running
# batch for 0.25 s instead of ~30 ms, as a long generation does on a real server; at the default, a
# busy machine's clients re-send too slowly to keep 64 in flight and the batch wavers through the
# slots' boundaries (flapping that is the test bed's, not the config's). The benchmarks' numbers
# are the model's, so only their wall time changes (milliseconds).
FAST_ENV = {"EAGLE_SIM_LOAD_S": "0", "EAGLE_SIM_WARMUP_S": "0", "EAGLE_SIM_SEED": "7",
            "EAGLE_SIM_NOISE_PCT": "1.0", "EAGLE_SIM_TIME_SCALE": "0.01"}


@contextmanager
def sim_host(root: Path) -> Iterator[dict[str, Path]]:
    state_dir, sim_state, bin_dir = root / "state", root / "gpu-state", root / "bin"
    host_vars = install_sim_bin(bin_dir, sim_state)
    gpu_state.init_state(sim_state, 1)
    target, draft = _write_models(root)
    cfg = root / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({
        "audit_db": "eagle.db", "state_dir": str(state_dir), "default_hosts": [HOST],
        "hosts": {HOST: {"transport": "local", "vars": {
            "python": host_vars["python"], "nvidia_smi": host_vars["nvidia_smi"],
            "model": str(target), "draft": str(draft), "port": free_port()}}},
    }, sort_keys=False))
    old = {k: os.environ.get(k) for k in [*FAST_ENV, "EAGLE_SIM_STATE"]}
    os.environ.update(FAST_ENV)
    os.environ["EAGLE_SIM_STATE"] = str(sim_state)
    try:
        yield {"cfg": cfg, "db": root / "eagle.db", "draft": draft, "target": target, "state": state_dir}
    finally:
        _stop_everything(state_dir)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
