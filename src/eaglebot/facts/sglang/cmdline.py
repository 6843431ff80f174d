"""What an `sglang.launch_server` command line asks for: its flags, read as SGLang reads them.

Pure functions over argv lists. server.launch checks a launch with them before it
starts anything, compares them with what /server_info reports afterwards, and the
history module fingerprints runs by them (so a renamed spelling such as `--tp 2`
vs `--tp-size 2` is not a change).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# argparse accepts unambiguous prefixes; these are the spellings we recognise.
FLAG_ALIASES = {"--model": "--model-path", "--tp": "--tp-size", "--dp": "--dp-size",
                "--tensor-parallel-size": "--tp-size", "--data-parallel-size": "--dp-size",
                "--pipeline-parallel-size": "--pp-size"}


def flag_values(args: list[str]) -> dict[str, str | None]:
    """`--flag value` / `--flag=value` pairs of a launch command (a bare flag maps to None)."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a.split("=", 1)
                out[FLAG_ALIASES.get(k, k)] = v
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                out[FLAG_ALIASES.get(a, a)] = args[i + 1]
                i += 1
            else:
                out[FLAG_ALIASES.get(a, a)] = None
        i += 1
    return out


def flag_to_key(flag: str) -> str:
    """`--speculative-num-steps` -> `speculative_num_steps`, the name /server_info uses."""
    return flag.lstrip("-").replace("-", "_")


def int_value(v: str | None) -> int | None:
    """A flag's value as an int; None when absent or not a number (SGLang would refuse it)."""
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        return None


def same_value(asked: Any, effective: Any) -> bool:
    """Compare a flag's text with the server's typed value (`16` == 16, `eagle3` == "EAGLE3")."""
    if effective is None:
        return asked is None
    if isinstance(effective, bool):
        return str(asked).lower() in (("true", "1") if effective else ("false", "0"))
    if isinstance(effective, (int, float)):
        try:
            return float(asked) == float(effective)
        except (TypeError, ValueError):
            return False
    return str(asked).strip().upper() == str(effective).strip().upper() or str(asked) == str(effective)


def launch_flags(args: list[str]) -> dict[str, str | list[str] | bool]:
    """Every flag of a launch command with ALL its values, read with SGLang's argparse grammar:
    `--flag=value`, a multi-value flag (`--cuda-graph-bs-decode 1 2 4` keeps 1, 2 and 4: argparse's
    nargs="+" takes words until the next option), and a boolean flag (True). One value stays a
    string; several become a list. Aliases map to their canonical spelling."""
    out: dict[str, str | list[str] | bool] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--"):
            i += 1
            continue
        if "=" in a:
            k, v = a.split("=", 1)
            out[FLAG_ALIASES.get(k, k)] = v
            i += 1
            continue
        vals: list[str] = []
        j = i + 1
        while j < len(args) and not args[j].startswith("--"):
            vals.append(args[j])
            j += 1
        out[FLAG_ALIASES.get(a, a)] = True if not vals else (vals[0] if len(vals) == 1 else vals)
        i = j
    return out


def build_launch_args(flags: dict[str, str | list[str] | bool]) -> list[str]:
    """The inverse of `launch_flags`: an argv list (booleans as bare flags; False drops it)."""
    out: list[str] = []
    for k, v in flags.items():
        if v is True:
            out.append(k)
        elif v is False:
            continue
        elif isinstance(v, list):
            out += [k, *v]
        else:
            out += [k, str(v)]
    return out


@dataclass(frozen=True)
class GpuNeed:
    """The GPUs of one node a launch uses: `count` of them, the visible indexes base_gpu_id,
    base + step, ... up to `last` (SGLang's own assignment), and the flags that ask (`why`)."""

    count: int
    last: int
    why: str


def gpu_need(args: list[str]) -> GpuNeed | None:
    """What a launch needs, as SGLang counts it: tp × pp GPUs per data-parallel replica, and dp
    replicas unless DP attention shares the tp GPUs (`--enable-dp-attention`). None for a launch
    over several nodes (`--nnodes` > 1: each node's share is not its own to check)."""
    flags = flag_values(args)

    def size(flag: str) -> int:
        n = int_value(flags.get(flag))
        return n if n is not None and n > 0 else 1

    if size("--nnodes") > 1:
        return None
    tp, pp, dp = size("--tp-size"), size("--pp-size"), size("--dp-size")
    dp_attention = "--enable-dp-attention" in flags
    count = tp * pp * (1 if dp_attention else dp)
    parts = [f"tp {tp}"] + ([f"pp {pp}"] if pp > 1 else []) + ([f"dp {dp}"] if dp > 1 and not dp_attention else [])
    why = " × ".join(parts) + (f" (dp {dp} shares them: DP attention)" if dp > 1 and dp_attention else "")
    base = int_value(flags.get("--base-gpu-id")) or 0
    step = int_value(flags.get("--gpu-id-step")) or 1
    return GpuNeed(count, max(0, base) + (count - 1) * max(1, step), why)
