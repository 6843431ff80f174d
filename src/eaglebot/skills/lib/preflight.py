"""What server.launch checks on the host before anything is stopped: the GPUs a launch needs are
there and given to it, its port is free or held by the server the bot launched, and the address
it binds is the host's own (SGLang's parser takes any string; the bind fails only after the stop).

Each refusal is one sentence and a usage failure (exit 2): `relaunch` runs this in its first step,
so the server that is running keeps serving.
"""
from __future__ import annotations

import json
import shlex

from eaglebot.errors import StepFailed
from eaglebot.sdk import SkillContext

from eaglebot.facts.gpu import nvsmi
from eaglebot.facts.host import ports, procs
from eaglebot.facts.sglang import cmdline
from eaglebot.skills.lib import processes, server

KEEPS = "refused before anything was stopped or started"


def _listed(gpus: list[int]) -> str:
    return ",".join(str(g) for g in gpus) or "none"


async def check_gpus(ctx: SkillContext, launch_args: list[str], gpus: object,
                     env: dict[str, str]) -> list[str]:
    """The GPUs `gpus` names exist, and there are as many as tp × dp asks; the warnings (what
    could not be checked). Raises StepFailed(usage) for a launch that cannot start."""
    try:
        given = nvsmi.parse_gpu_selection(gpus)  # type: ignore[arg-type]
    except ValueError as e:
        raise StepFailed(f"gpus: {e}", usage=True) from None
    warnings: list[str] = []
    try:
        present: list[int] | None = sorted(await nvsmi.GPU_MEMORY.gather(ctx.host, ctx.vars))
    except nvsmi.NvsmiError as e:
        present = None
        warnings.append(f"the GPUs were not checked before the launch: {e}")
    if given is not None and present is not None:
        gone = [g for g in given if g not in present]
        if gone:
            raise StepFailed(f"GPU {_listed(gone)} does not exist on {ctx.host_name} (nvidia-smi lists "
                             f"{_listed(present)}): fix `gpus`; {KEEPS}", usage=True)
    need = cmdline.gpu_need(launch_args)
    if need is None:
        ctx.log("a launch over several nodes (--nnodes > 1): the GPUs of this node are not counted")
        return warnings
    if given is not None:
        have, what = len(given), f"gpus={_listed(given)} gives {len(given)}"
    elif env.get("CUDA_VISIBLE_DEVICES", "").strip():
        seen = [d for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
        have, what = len(seen), f"CUDA_VISIBLE_DEVICES={','.join(seen)} gives {len(seen)}"
    elif present is not None:
        have, what = len(present), f"{ctx.host_name} has {len(present)}"
    else:
        return warnings
    if need.last >= have:
        asked = f"{need.why} needs {need.count} GPU{'s' if need.count != 1 else ''}"
        if need.last + 1 > need.count:
            asked += f" (GPU ids up to {need.last}, from --base-gpu-id/--gpu-id-step)"
        raise StepFailed(f"{asked} but {what}: give it as many GPUs (-e gpus=...) or a smaller tp/dp; {KEEPS}",
                         usage=True)
    return warnings


async def check_port(ctx: SkillContext, port: int) -> str:
    """The port is free, or only the bot's own server listens there (server.stop will stop it);
    raises StepFailed(usage) naming the process otherwise. Returns what was found, for the log."""
    lis = await ports.listeners(ctx.host, port)
    if not lis.busy:
        return f"port {port} is free"
    if lis.unseen:
        raise StepFailed(f"port {port} is held by a process this login user cannot see (another user's): ask its "
                         f"owner to stop it, or use another port (-e port=...); {KEEPS}", usage=True)
    sessions = await processes.our_sessions(ctx)
    infos = await procs.proc_info(ctx.host, sorted(lis.pids))
    foreign = [infos[p] for p in sorted(lis.pids) if p in infos and not processes.is_ours(infos[p], sessions)]
    if foreign:
        raise StepFailed(f"port {port} is held by {server.describe(foreign[0])}, which the bot did not start: stop "
                         f"it yourself (or with the `stop` playbook, which asks first) or use another port "
                         f"(-e port=...); {KEEPS}", usage=True)
    return f"port {port} is held by the server the bot launched (pid {', '.join(map(str, sorted(lis.pids)))})"


WILDCARDS = ("0.0.0.0", "::")
# Run by the host's Python (stdlib only): what the name resolves to there, and which of those
# addresses a socket can bind (the kernel's answer to "is this one of mine": EADDRNOTAVAIL if not).
_BIND_SCRIPT = """
import json, socket, sys
try:
    found = sorted({i[4][0] for i in socket.getaddrinfo(sys.argv[1], None, 0, socket.SOCK_STREAM)})
except (OSError, UnicodeError) as e:
    print(json.dumps({"error": str(e)})); sys.exit(0)
own = []
for a in found:
    s = socket.socket(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((a, 0)); own.append(a)
    except OSError:
        pass
    finally:
        s.close()
print(json.dumps({"addresses": found, "own": own}))
"""


async def check_bind(ctx: SkillContext, python: str, bind: str, launch_args: list[str]) -> list[str]:
    """The bind address is a wildcard or one of the host's own (a name must resolve there to
    one); raises StepFailed(usage) naming the fix otherwise. A wildcard without `--api-key` is
    a warning: SGLang's API has no authentication of its own."""
    if bind in WILDCARDS:
        if any(a == "--api-key" or a.startswith("--api-key=") for a in launch_args):
            return []
        return [f"bind {bind} serves SGLang's API, which has no authentication without --api-key, on every "
                f"address of {ctx.host_name}: add --api-key to `args`, or bind a private address (-e bind=...)"]
    res = await ctx.host.run(f"{shlex.quote(python)} -c {shlex.quote(_BIND_SCRIPT)} {shlex.quote(bind)}", timeout=30)
    try:
        found = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [f"the bind address {bind} was not checked on {ctx.host_name} ({python} exited "
                f"{res.exit_status}: {(res.stderr or res.stdout).strip()[:200]})"]
    if not isinstance(found, dict):
        return [f"the bind address {bind} was not checked on {ctx.host_name}"]
    if "error" in found:
        raise StepFailed(f"the bind address {bind!r} does not resolve on {ctx.host_name} ({found['error']}): set "
                         f"-e bind= to one of its addresses, or 0.0.0.0 for all; {KEEPS}", usage=True)
    if not found.get("own"):
        addrs = ", ".join(map(str, found.get("addresses") or [])) or bind
        what = bind if addrs == bind else f"{bind} ({addrs})"
        raise StepFailed(f"the bind address {what} is not an address of {ctx.host_name}, so SGLang could not "
                         f"listen on it: set -e bind= to one of its addresses (`ip -brief addr` there), "
                         f"or 0.0.0.0 for all; {KEEPS}", usage=True)
    return []
