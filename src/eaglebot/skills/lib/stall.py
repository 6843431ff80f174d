"""Diagnostics of a server start-up that stopped making progress (server.launch's watchdog).

Collected BEFORE the server is stopped: GPU memory and utilisation, the server's process
tree (its session), and `py-spy dump` of its Python processes where py-spy is installed.
Each probe is bounded and best effort: a diagnostic that cannot be had is said, never fatal.
"""
from __future__ import annotations

import shlex

from eaglebot.sdk import SkillContext
from eaglebot.facts.gpu import nvsmi

PYSPY_MAX = 4


async def gpu_lines(ctx: SkillContext) -> list[str]:
    try:
        rows = await nvsmi.GPU_TABLE.gather(ctx.host, ctx.vars, timeout=20)
    except nvsmi.NvsmiError as e:
        return [f"GPU memory: not available ({e})"]
    out = [f"GPU {r.index}: {r.used_mib} / {r.total_mib} MiB used, utilization {r.utilization} %" for r in rows]
    return out or ["GPU memory: nvidia-smi printed nothing"]


async def process_tree(ctx: SkillContext, sid: int) -> tuple[list[str], list[int]]:
    """`ps` lines of the server's session (pid ppid state elapsed command) and their pids."""
    res = await ctx.host.run(f"ps -ww -e -o sid=,pid=,ppid=,stat=,etime=,args= 2>/dev/null | "
                             f"awk '$1 == {int(sid)}'", timeout=20)
    lines, pids = [], []
    for line in res.stdout.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[1].isdigit():
            pids.append(int(parts[1]))
            lines.append(f"pid {parts[1]} ppid {parts[2]} {parts[3]} up {parts[4]}: {parts[5][:300]}")
    return lines or [f"no process left in session {sid}"], pids


async def py_spy(ctx: SkillContext, pids: list[int]) -> list[str]:
    found = await ctx.host.run("command -v py-spy", timeout=20)
    if found.exit_status != 0:
        return [f"py-spy is not installed on {ctx.host_name}: no Python stacks (pip install py-spy to get them)"]
    out: list[str] = []
    for pid in pids[:PYSPY_MAX]:
        res = await ctx.host.run(shlex.join(["py-spy", "dump", "--pid", str(pid)]), timeout=30)
        out.append(f"--- py-spy dump --pid {pid} (exit {res.exit_status})")
        out += (res.stdout.strip() or res.stderr.strip() or "no output").splitlines()[:80]
    return out


async def diagnose(ctx: SkillContext, sid: int) -> list[str]:
    lines = ["== GPUs", *await gpu_lines(ctx)]
    tree, pids = await process_tree(ctx, sid)
    lines += ["== server processes (session %d)" % sid, *tree]
    lines += ["== Python stacks", *await py_spy(ctx, pids)]
    return lines
