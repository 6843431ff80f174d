"""Wait until every selected GPU's memory is back under a tolerance; optionally a CUDA smoke test.

Queries `nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits`; while
memory is still held in the first second, ONE nvidia-smi looping every 20 ms (`--loop-ms`)
watches it (fresh calls re-initialise NVML each time and see freed memory late); then it
polls every `poll_s`, backing off 1.5x per poll up to `poll_max_s`, until each GPU uses at
most `max_used_mib` (a GPU can read a few MiB with no process on it) or `timeout_s`
passes; on failure it names the processes still holding memory. `cuda_smoke: true` then
runs a short PyTorch check with the host's Python (host var `python`): allocate on every
selected GPU and compare a matmul with the CPU.
Records the metric `gpu_free_s` (seconds until the GPUs read free; lower is better).

```yaml
- skill: gpu.verify
  with: {max_used_mib: 64, timeout_s: 60, gpus: "0,1", cuda_smoke: true}
```
Registers `memory` (MiB per GPU at the end), `seconds` and, with cuda_smoke, `smoke`
(one line per GPU).
"""
from __future__ import annotations

import asyncio
import shlex
import time
from typing import Any, NoReturn

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import Metric, Plan, SkillContext, StepResult
from eaglebot.skills.lib import free_memory, gpu
from eaglebot.facts.gpu import nvsmi, nvsmi_watch

NAME = "gpu.verify"

# Runs on the GPU host. Indices are nvidia-smi's: PCI order, every GPU visible.
SMOKE = r'''
import os, sys, time
os.environ.pop("CUDA_VISIBLE_DEVICES", None)
os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
def fail(msg, code):
    print("EAGLE-SMOKE-ERROR " + msg, flush=True)
    sys.exit(code)
try:
    import torch
except Exception as e:
    fail("PyTorch is not installed for %s (%s: %s)" % (sys.executable, type(e).__name__, e), 3)
if not torch.cuda.is_available():
    fail("PyTorch %s cannot use CUDA (torch.cuda.is_available() is False)" % torch.__version__, 4)
gpus = [int(x) for x in sys.argv[1].split(",") if x]
n = torch.cuda.device_count()
missing = [g for g in gpus if g >= n]
if missing:
    fail("PyTorch sees %d GPUs, GPU %s is missing" % (n, ",".join(map(str, missing))), 5)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
bad = 0
for g in gpus:
    t0 = time.perf_counter()
    try:
        dev = torch.device("cuda", g)
        block = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device=dev)   # 64 MiB
        a = torch.randn(512, 512, dtype=torch.float32)
        b = torch.randn(512, 512, dtype=torch.float32)
        got = (a.to(dev) @ b.to(dev)).cpu()
        torch.cuda.synchronize(dev)
        err = (got - a @ b).abs().max().item()
        ok = err < 1e-2
        del block
        torch.cuda.empty_cache()
        print("EAGLE-SMOKE gpu=%d %s max_abs_err=%.2e ms=%.1f name=%s" % (
            g, "ok" if ok else "WRONG", err, (time.perf_counter() - t0) * 1000, torch.cuda.get_device_name(dev)),
            flush=True)
        bad += 0 if ok else 1
    except Exception as e:
        print("EAGLE-SMOKE gpu=%d FAILED %s: %s" % (g, type(e).__name__, str(e).splitlines()[0][:200]), flush=True)
        bad += 1
sys.exit(1 if bad else 0)
'''


class Params(gpu.GpuParams):
    max_used_mib: int = Field(64, ge=0, description="a GPU counts as free at or below this many MiB used")
    timeout_s: float = Field(60.0, ge=0, le=3600, description="how long to wait for the memory to be freed")
    poll_s: float = Field(0.05, gt=0, le=10, description="seconds between two nvidia-smi queries in the first second")
    poll_max_s: float = Field(1.0, gt=0, le=60, description="after the first second the interval grows 1.5x up to this")
    cuda_smoke: bool = Field(False, description="also allocate and run a matmul on every selected GPU with PyTorch")
    smoke_timeout_s: float = Field(300.0, gt=0, le=3600, description="time limit of the CUDA smoke test")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    # In a dry run the cleanup before it killed nothing: the GPUs are as busy as they were.
    return await ctx.carry_out(Plan(
        [f"poll nvidia-smi until GPU memory <= {params.max_used_mib} MiB (timeout {params.timeout_s:g}s)"
         + ("; run a CUDA smoke test" if params.cuda_smoke else "")],
        "would verify that the GPUs are free", lambda: _verify(ctx, params)))


async def _verify(ctx: SkillContext, params: Params) -> StepResult:
    t0 = time.monotonic()
    sel: list[int] | None = None
    polls = slow_polls = 0
    watched = False
    while True:
        used_all = await nvsmi.GPU_MEMORY.gather(ctx.host, ctx.vars)
        polls += 1
        if sel is None:
            sel = gpu.select(ctx, params, list(used_all))
        check = free_memory.check_memory(used_all, sel, params.max_used_mib)
        if check.gone:
            raise StepFailed(f"GPU {', '.join(map(str, check.gone))} disappeared from nvidia-smi on {ctx.host_name} "
                             f"while waiting; a GPU may have fallen off the bus")
        used, over = check.used, check.over
        elapsed = time.monotonic() - t0
        if over and not watched and elapsed < min(1.0, params.timeout_s):
            watched = True   # once: one nvidia-smi looping every 20 ms for the rest of the first second
            used, rounds = await _watch(ctx, params, sel, used, min(1.0, params.timeout_s) - elapsed)
            polls += rounds
            over = free_memory.over_limit(used, params.max_used_mib)
            elapsed = time.monotonic() - t0
        if not over or elapsed >= params.timeout_s:
            break
        slow_polls += elapsed >= 1.0
        await asyncio.sleep(_interval(params, elapsed, slow_polls))
    data = {"memory": dict(used), "seconds": round(elapsed, 3), "polls": polls}
    mem = gpu.memory_line(used)
    if over:
        await _still_held(ctx, params, over, used, elapsed, data)
    ctx.log(f"free after {elapsed:.2f}s ({polls} polls): {mem}")
    metrics = [Metric("gpu_free_s", round(elapsed, 3), "s", "lower")]
    summary = f"{len(used)} GPU{'s' if len(used) != 1 else ''} free (<= {params.max_used_mib} MiB) after {elapsed:.1f}s: {mem}"
    if not params.cuda_smoke:
        return StepResult.ok(summary, metrics=metrics, data=data, output=mem + "\n")
    ok, lines, why = await _smoke(ctx, params, sel)
    data["smoke"] = lines
    out = mem + "\n" + "\n".join(lines) + "\n"
    if not ok:
        raise StepFailed(f"CUDA smoke test failed on {ctx.host_name}: {why}", metrics=metrics, data=data,
                         output=out)
    return StepResult.ok(f"{summary}; CUDA smoke test passed on GPU {', '.join(map(str, sel))}",
                         metrics=metrics, data=data, output=out)


async def _watch(ctx: SkillContext, params: Params, sel: list[int], used: dict[int, int],
                 window_s: float) -> tuple[dict[int, int], int]:
    """Watch with one looping nvidia-smi; (MiB per GPU, rounds). Unchanged readings if it cannot run."""
    w = nvsmi_watch.Watch(sel, params.max_used_mib)
    freed = asyncio.Event()
    window_s = max(0.2, window_s)

    def on_line(_stream: str, line: str) -> None:
        if w.feed(line) and w.pid is not None:
            freed.set()

    cmd = nvsmi_watch.watch_command(nvsmi.nvsmi_path(ctx.vars), sel, window_s)
    run = asyncio.ensure_future(ctx.host.run(cmd, timeout=window_s + 30, on_output=on_line))
    stop = asyncio.ensure_future(freed.wait())
    try:
        await asyncio.wait({run, stop}, return_when=asyncio.FIRST_COMPLETED)
        if freed.is_set() and not run.done():
            # The watcher is the `timeout` this command started (its pid came first); it passes TERM on.
            await ctx.host.run(f"kill {int(w.pid or 0)} 2>/dev/null; true", timeout=10)
        res = await run
    finally:
        stop.cancel()
    if not w.last:
        ctx.log(f"nvidia-smi --loop-ms gave no readings ({(res.stdout.strip().splitlines() or ['no output'])[-1][:120]}); "
                f"polling instead")
        return used, 0
    return w.last, w.rounds


def _interval(params: Params, elapsed: float, slow_polls: int) -> float:
    """Poll fast while the driver is still freeing a killed holder's memory (it takes ~0.18 s on an
    H200), then back off: every poll_s for the first second, then 1.5x per poll up to poll_max_s."""
    if elapsed < 1.0:
        return params.poll_s
    return max(params.poll_s, min(params.poll_max_s, params.poll_s * 1.5 ** slow_polls))


async def _still_held(ctx: SkillContext, params: Params, over: dict[int, int], used: dict[int, int],
                      elapsed: float, data: dict[str, Any]) -> NoReturn:
    """Fail the step naming what still holds the memory."""
    gpus = ", ".join(f"GPU {g} uses {m} MiB" for g, m in over.items())
    head = f"{gpus} (limit {params.max_used_mib} MiB) after {elapsed:.1f}s"
    try:
        snap = await gpu.snapshot(ctx, params.model_copy(update={"gpus": list(over)}),
                                   tolerance_mib=params.max_used_mib)
    except StepFailed as e:
        raise StepFailed(f"{head}; could not list the holders: {e}", data=data) from None
    data["holders"] = [h.as_dict() for h in snap.holders]
    out = gpu.memory_line(used) + "\n" + (gpu.table(snap.holders) + "\n" if snap.holders else "")
    out += "".join(n + "\n" for n in snap.notes)
    if snap.holders:
        who = "; ".join(h.line() for h in snap.holders[:4])
        more = f"; and {len(snap.holders) - 4} more" if len(snap.holders) > 4 else ""
        raise StepFailed(f"{head}; still held by {who}{more}", data=data, output=out)
    raise StepFailed(f"{head}; no process found holding it (nvidia-smi and fuser name none)",
                     data=data, output=out)


async def _smoke(ctx: SkillContext, params: Params, gpus: list[int]) -> tuple[bool, list[str], str]:
    python = str(ctx.vars.get("python") or "python3")
    cmd = shlex.join([python, "-c", SMOKE, ",".join(map(str, gpus))])
    res = await ctx.host.run(cmd, timeout=params.smoke_timeout_s, on_output=lambda _s, line: ctx.log(line))
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("EAGLE-SMOKE")]
    if res.timed_out:
        return False, lines, f"no answer within {params.smoke_timeout_s:g}s"
    if res.exit_status in (126, 127):
        return False, lines, f"{python} not found (set the host var python)"
    err = next((ln[len("EAGLE-SMOKE-ERROR "):] for ln in lines if ln.startswith("EAGLE-SMOKE-ERROR")), None)
    if err:
        return False, lines, err
    bad = [ln for ln in lines if " ok " not in ln]
    if res.exit_status != 0 or bad:
        last = (bad[:1] or res.stderr.strip().splitlines()[-1:] or [f"exit status {res.exit_status}"])[0]
        return False, lines, last.replace("EAGLE-SMOKE ", "")
    return True, lines, ""
