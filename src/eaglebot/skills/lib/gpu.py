"""What holds the GPUs: nvidia-smi's compute apps joined with /proc, fuser as the fallback.

Shared by gpu.processes, gpu.cleanup and gpu.verify. `snapshot` is the probe; the
formatting helpers are pure.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, field_validator

from eaglebot.errors import StepFailed
from eaglebot.sdk import SkillContext, SkillParams
from eaglebot.facts.gpu import nvsmi
from eaglebot.facts.host.procs import ProcInfo, proc_info

DEFAULT_TOLERANCE_MIB = 64

# GPU daemons that keep /dev/nvidia* open without holding a workload: fuser names them,
# but they neither explain used memory nor may be killed.
PROTECTED_COMMS = frozenset({
    "nvidia-persistenced", "nv-hostengine", "nvidia-fabricmanager", "nv-fabricmanager", "nvidia-powerd",
    "dcgm-exporter", "dcgmi", "nvidia-smi", "Xorg", "Xwayland", "gdm", "gnome-shell",
})


class GpuParams(SkillParams):
    """Fields every GPU skill takes."""

    gpus: list[int] | None = Field(
        None, description='GPU indices to look at: a list [0, 1] or a string "0,1" (default: all GPUs)')
    expected_gpus: int | None = Field(
        None, ge=1, description="fail when nvidia-smi sees fewer GPUs than this (default: the host var expected_gpus)")

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, v: int | str | list[int] | None) -> list[int] | None:
        return nvsmi.parse_gpu_selection(v)


@dataclass
class Holder:
    pid: int
    per_gpu: dict[int, int | None]          # GPU index -> MiB (None: unknown, found by fuser)
    name: str                               # nvidia-smi's process name or fuser's command
    source: str                             # "nvidia-smi" or "fuser"
    proc: ProcInfo

    @property
    def gpus(self) -> list[int]:
        return sorted(self.per_gpu)

    @property
    def mib(self) -> int | None:
        vals = list(self.per_gpu.values())
        return None if any(v is None for v in vals) else sum(v for v in vals if v is not None)

    @property
    def user(self) -> str:
        return self.proc.user

    @property
    def cmdline(self) -> str:
        return self.proc.cmdline

    @property
    def protected(self) -> bool:
        return self.proc.comm in PROTECTED_COMMS or self.pid <= 1

    def line(self) -> str:
        gpus = ",".join(str(g) for g in self.gpus)
        mib = "? MiB" if self.mib is None else f"{self.mib} MiB"
        via = " (found by fuser)" if self.source == "fuser" else ""
        return f"pid {self.pid} user {self.user} GPU {gpus} {mib}: {self.cmdline[:200]}{via}"

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "user": self.user, "gpus": self.gpus, "mib": self.mib,
                "per_gpu_mib": {str(k): v for k, v in self.per_gpu.items()}, "command": self.cmdline,
                "name": self.name, "source": self.source, "session": self.proc.session}


@dataclass
class Snapshot:
    host: str
    selected: list[int]                     # GPU indices looked at, in order
    used: dict[int, int]                    # MiB used per selected GPU
    holders: list[Holder] = field(default_factory=list)
    unexplained: dict[int, int] = field(default_factory=dict)   # GPU -> MiB nobody visible holds
    hidden_pids: list[int] = field(default_factory=list)        # listed by nvidia-smi, not in our /proc
    via_fuser: bool = False
    notes: list[str] = field(default_factory=list)

    def killable(self) -> list[Holder]:
        return [h for h in self.holders if not h.protected]


def expected_count(ctx: SkillContext, params: GpuParams) -> int | None:
    raw = params.expected_gpus if params.expected_gpus is not None else ctx.vars.get("expected_gpus")
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise StepFailed(f"host var expected_gpus={raw!r} is not a number") from None


def select(ctx: SkillContext, params: GpuParams, present: list[int]) -> list[int]:
    """Check the GPU count and the `gpus` selection against what nvidia-smi sees."""
    want = expected_count(ctx, params)
    if want is not None and len(present) < want:
        raise StepFailed(
            f"{ctx.host_name}: expected {want} GPUs but nvidia-smi sees {len(present)} "
            f"({', '.join(map(str, present)) or 'none'}); a GPU may have fallen off the bus")
    sel = params.gpus
    if sel is None:
        return list(present)
    missing = [i for i in sel if i not in present]
    if missing:
        raise StepFailed(f"GPU {', '.join(map(str, missing))} does not exist on {ctx.host_name} "
                         f"(GPUs: {', '.join(map(str, present)) or 'none'})")
    return sel


async def snapshot(ctx: SkillContext, params: GpuParams, *, tolerance_mib: int = DEFAULT_TOLERANCE_MIB,
                   use_fuser: bool = True) -> Snapshot:
    """Probe: memory per GPU and the processes that hold it."""
    host = ctx.host_name
    # Both queries at once: each nvidia-smi call initialises NVML (~30 ms on an H200 host), and
    # the sooner cleanup has its snapshot, the sooner its kill frees the memory.
    rows, apps = await asyncio.gather(nvsmi.GPU_TABLE.gather(ctx.host, ctx.vars),
                                      nvsmi.COMPUTE_APPS.gather(ctx.host, ctx.vars), return_exceptions=True)
    if isinstance(rows, BaseException):      # the GPU query's error first, as when they ran in turn
        raise rows
    if isinstance(apps, BaseException):
        raise apps
    sel = select(ctx, params, [r.index for r in rows])
    by_uuid = {r.uuid: r.index for r in rows}
    on_selected = [a.pid for a in apps if a.gpu_uuid is not None and by_uuid.get(a.gpu_uuid) in sel]
    infos = await proc_info(ctx.host, on_selected)
    snap = assemble(host, sel, rows, apps, infos, tolerance_mib)
    if snap.unexplained and use_fuser:
        await _fuser_fallback(ctx, snap, tolerance_mib)
    for gpu, mib in snap.unexplained.items():
        snap.notes.append(f"GPU {gpu}: {mib} MiB used but neither nvidia-smi nor fuser names a process "
                          f"that holds it")
    return snap


def assemble(host: str, sel: list[int], rows: list[nvsmi.GpuRow], apps: list[nvsmi.ComputeApp],
             infos: dict[int, ProcInfo], tolerance_mib: int = DEFAULT_TOLERANCE_MIB) -> Snapshot:
    """The snapshot nvidia-smi's answers and /proc make, before any fuser fallback (pure:
    the cleanup cases in tests/fixtures/cleanup_cases are built with it from real captures)."""
    by_uuid = {r.uuid: r.index for r in rows}
    snap = Snapshot(host, sel, {r.index: r.used_mib for r in rows if r.index in sel})
    apps = [a for a in apps if a.gpu_uuid is not None and by_uuid.get(a.gpu_uuid) in sel]
    holders: dict[int, Holder] = {}
    for a in apps:
        p = infos.get(a.pid)
        if p is None or p.zombie:       # a zombie holds no memory; an unknown pid lives elsewhere
            if p is None and a.pid not in snap.hidden_pids:
                snap.hidden_pids.append(a.pid)
            continue
        assert a.gpu_uuid is not None   # apps were filtered on it above
        h = holders.setdefault(a.pid, Holder(a.pid, {}, a.process_name, "nvidia-smi", p))
        h.per_gpu[by_uuid[a.gpu_uuid]] = a.used_mib
    snap.holders = list(holders.values())
    if snap.hidden_pids:
        snap.notes.append(f"nvidia-smi lists pid {', '.join(map(str, snap.hidden_pids))}, not visible on "
                          f"{host} (another PID namespace, e.g. a container)")
    snap.unexplained = _unexplained(snap, tolerance_mib)
    return snap


def _unexplained(snap: Snapshot, tolerance_mib: int) -> dict[int, int]:
    held = {g for h in snap.holders if not h.protected for g in h.gpus}
    return {g: m for g, m in snap.used.items() if m > tolerance_mib and g not in held}


async def _fuser_fallback(ctx: SkillContext, snap: Snapshot, tolerance_mib: int) -> None:
    gpus = ", ".join(map(str, snap.unexplained))
    entries, why = await nvsmi.FUSER.gather(ctx.host, ctx.vars)
    snap.via_fuser = True
    if why:
        snap.notes.append(f"GPU {gpus}: memory held with no visible process and {why}")
        return
    ctx.log(f"GPU {gpus}: memory held with no visible process; asked fuser -v /dev/nvidia*")
    wanted = [e for e in entries if e.gpu in snap.unexplained and e.pid not in {h.pid for h in snap.holders}]
    infos = await proc_info(ctx.host, [e.pid for e in wanted])
    found: dict[int, Holder] = {}
    for e in wanted:
        p, gpu = infos.get(e.pid), e.gpu
        if p is None or p.zombie or gpu is None:   # (gpu is one of snap.unexplained's)
            continue
        h = found.setdefault(e.pid, Holder(e.pid, {}, e.command, "fuser", p))
        h.per_gpu[gpu] = None
    snap.holders.extend(found.values())
    if found:
        snap.notes.append(f"nvidia-smi names no process for the memory on GPU {gpus}; "
                          f"fuser -v /dev/nvidia* found pid {', '.join(map(str, found))}")
    snap.unexplained = _unexplained(snap, tolerance_mib)


def memory_line(used: dict[int, int]) -> str:
    return ", ".join(f"GPU {g} {m} MiB" for g, m in used.items())


def table(holders: list[Holder]) -> str:
    """One line per process, for the step output."""
    rows = [f"{'PID':>8}  {'USER':<12} {'GPU':<7} {'MiB':>8}  COMMAND"]
    for h in holders:
        mib = "?" if h.mib is None else str(h.mib)
        tag = "  [fuser]" if h.source == "fuser" else ""
        tag += "  [protected]" if h.protected else ""
        rows.append(f"{h.pid:>8}  {h.user:<12} {','.join(map(str, h.gpus)):<7} {mib:>8}  {h.cmdline[:300]}{tag}")
    return "\n".join(rows)
