"""SIMULATED `sglang::scheduler_TP<rank>`: the child process that holds a GPU.

Like SGLang's scheduler it shares the launcher's session and is what nvidia-smi lists
as the GPU holder. It registers itself with the simulated nvidia-smi; where PyTorch and
a GPU are present it really allocates memory (capped at 8 GiB unless EAGLE_SIM_FULL_MEM),
so cleanup and verify work against real memory on a GPU machine.
Usage: python -m sglang._sim_scheduler sglang::scheduler_TP<rank> RANK GPU MIB LOCAL_INDEX
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy checks this package as eaglebot.sim.sglang_pkg.sglang; it runs as `sglang`
    from ._simulated import gpu_state_module, log, state_dir
else:
    from sglang._simulated import gpu_state_module, log, state_dir

PR_SET_NAME, PR_SET_PDEATHSIG = 15, 1


def _prctl(option: int, arg: Any) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, arg, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _real_alloc(local_index: int, mib: int) -> tuple[Any, int] | None:
    """Hold real GPU memory when PyTorch and a GPU are here; None otherwise."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch
    except Exception:
        return None
    if not torch.cuda.is_available() or local_index >= torch.cuda.device_count():
        return None
    cap = mib if os.environ.get("EAGLE_SIM_FULL_MEM") else min(mib, 8192)
    buf = torch.empty(cap * 1024 * 1024, dtype=torch.uint8, device=f"cuda:{local_index}")
    buf.fill_(1)
    torch.cuda.synchronize(local_index)
    return buf, cap


def main(argv: list[str]) -> int:
    # stdout is the pipe on which the launcher waits for READY; logs go to stderr.
    rank, gpu, mib, local_index = (int(a) for a in argv[-4:])
    title = f"sglang::scheduler_TP{rank}"
    _prctl(PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]))
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    gs, sd, me = gpu_state_module(), state_dir(), os.getpid()

    def bye(*_a: object) -> None:
        # A second SIGTERM (the launcher's own terminate() after the group's) must not run
        # this again while the first holds the state lock: flock on a new descriptor would
        # wait for ourselves until SIGKILL.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if gs is not None and sd:
            try:
                # hard_exit: die as SGLang's kill_process_tree SIGKILLs a scheduler, leaving the
                # teardown (and its Xid 45 lines) to the driver; else unregister, as a clean exit
                if not gs.load_state(sd).get("hard_exit"):
                    gs.remove_holder(sd, me)
            except Exception:
                pass
        os._exit(0)

    signal.signal(signal.SIGTERM, bye)
    signal.signal(signal.SIGINT, bye)
    held = None
    try:
        held = _real_alloc(local_index, mib)
    except Exception as e:  # a real CUDA error is what the real scheduler would die of
        log(f"Scheduler hit an exception: {type(e).__name__}: {e}", f"TP{rank}", sys.stderr)
        return 1
    if held is not None:
        log(f"SIMULATED scheduler holds {held[1]} MiB of REAL memory on cuda:{local_index}", f"TP{rank}",
            sys.stderr)
    if gs is not None and sd:
        gs.add_holder(sd, me, gpu, mib)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    sys.stdout.close()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
