"""SIMULATED running batch and adaptive speculative steps of the fake launch_server.

Standard library only (it runs on the GPU host with whatever Python is there). The running batch
is the peak number of /generate requests in flight over the last 0.25 s, padded to a CUDA-graph
batch size as SGLang pads it. With `--speculative-adaptive`, a decode thread runs SGLang's own tier
rule (_adaptive.py) on accepted-draft counts drawn from the acceptance by position, switches the
server's `speculative_num_steps` (so /server_info reports the tier in use) and logs each switch
with SGLang's words (`Adaptive spec params updated: steps 3 -> 5 (ema_accept_len=3.61)`).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import random
import threading
import time
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:  # mypy checks this package as eaglebot.sim.sglang_pkg.sglang; it runs as `sglang`
    from . import _adaptive, _landscape
    from ._simulated import PerfModel, log
else:
    from sglang import _adaptive, _landscape
    from sglang._simulated import PerfModel, log


class Batches:
    def __init__(self, args: argparse.Namespace, perf: PerfModel):
        self.args, self.perf = args, perf
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peaks: list[tuple[float, int]] = []
        self.stopped = False
        self.policy = (_adaptive.Policy(args.speculative_num_steps, args.speculative_adaptive_config,
                                        list(_landscape.CUDA_GRAPH_BS))
                       if getattr(args, "speculative_adaptive", False) else None)
        self.rng = random.Random(int(os.environ.get("EAGLE_SIM_SEED", "0") or 0))

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """One request in flight for the duration of the block."""
        with self.lock:
            self.in_flight += 1
            self.peaks.append((time.monotonic(), self.in_flight))
        try:
            yield
        finally:
            with self.lock:
                self.in_flight -= 1

    def running_batch(self) -> int:
        """Peak requests in flight over the last 0.25 s, padded to a CUDA-graph batch size (0: idle)."""
        now = time.monotonic()
        with self.lock:
            self.peaks = [(t, n) for t, n in self.peaks if now - t < 0.25]
            peak = max([self.in_flight, *(n for _, n in self.peaks)])
        return _landscape.pad_batch(peak) if peak else 0

    def route(self, batch: int) -> None:
        """The tier of this batch size's slot (SGLang's activate_step_by_batch)."""
        if self.policy is not None:
            self.set_steps(self.policy.route(batch).current_steps, f"batch {batch}")

    def set_steps(self, steps: int, why: str) -> None:
        """Switch the speculative tier (SGLang's apply_runtime_state and its log line)."""
        a = self.args
        if steps == a.speculative_num_steps:
            return
        log(f"Switch adaptive runtime state: steps {a.speculative_num_steps} -> {steps}, draft_tokens "
            f"{a.speculative_num_draft_tokens} -> {steps + 1} ({why})", "TP0")
        a.speculative_num_steps, a.speculative_num_draft_tokens = steps, steps + 1
        self.perf.refresh()

    def decode_loop(self) -> None:
        """SIMULATED decode batches while requests run: each feeds its slot's EMA, as SGLang's
        worker does after every verify (on_verify_complete), and the batch routes the tier."""
        assert self.policy is not None
        tick = float(os.environ.get("EAGLE_SIM_DECODE_TICK_S", "0.01"))
        while not self.stopped:
            time.sleep(tick)
            batch = self.running_batch()
            if not batch:
                continue
            slot = self.policy.route(batch)
            self.set_steps(slot.current_steps, f"batch {batch}")
            pos = self.perf.positions() if slot.current_steps > 0 else []
            counts = []
            for _ in range(batch):
                k = 0
                while k < len(pos) and self.rng.random() < pos[k]:
                    k += 1
                counts.append(k)
            switched = slot.update(counts)
            if switched:
                log(f"Adaptive spec params updated: steps {switched[0]} -> {switched[1]} "
                    f"(ema_accept_len={slot.ema_accept_len:.2f})", "TP0")
                self.set_steps(switched[1], "adaptive")
