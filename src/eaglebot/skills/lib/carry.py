"""The running server's own launch: the audit trail's record of it, confirmed against the live server.

A relaunch that exists to measure or repair (`draft-repair`, `tune`, `sweep`) must start from what
runs now and change only what it tests: a tp=8 server relaunched without `--tp-size 8` cannot load
its model, and a measurement of a config that never ran compares nothing. The record is the newest
`server.launch` step on the host and port that came up ready (its launch args and env, as checked
and launched); the live server's `/server_info` confirms it (tp, dp, the speculative settings, the
memory fraction). Where the two differ, the live value is carried and the difference named.
"""
from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from eaglebot.sdk import SkillContext

from eaglebot.facts.sglang import cmdline
from eaglebot.skills.lib import server

# (launch parameter, its flag, the /server_info key): what a relaunch carries as a parameter.
CARRIED = (("tp", "--tp-size", "tp_size"),
           ("spec_steps", "--speculative-num-steps", "speculative_num_steps"),
           ("spec_topk", "--speculative-eagle-topk", "speculative_eagle_topk"),
           ("spec_draft_tokens", "--speculative-num-draft-tokens", "speculative_num_draft_tokens"),
           ("mem_fraction", "--mem-fraction-static", "mem_fraction_static"))
# Confirmed against the live server too, carried as an argument (dp) or named only (the algorithm:
# the launch's own `spec_algorithm` says which one it tests).
CONFIRMED = (("--dp-size", "dp_size"), ("--speculative-algorithm", "speculative_algorithm"))
# Flags the launch builds from its own parameters: never carried among the extra arguments.
STRUCTURED = frozenset({"--model-path", "--speculative-algorithm", "--speculative-draft-model-path", "--host",
                        "--port", "--speculative-adaptive", "--speculative-adaptive-config",
                        *(flag for _, flag, _ in CARRIED)})
DEFAULTS = {"tp_size": 1, "dp_size": 1}
GOOD = "changed"     # a server.launch step that came up ready


async def last_launch(ctx: SkillContext, port: int) -> dict[str, Any] | None:
    """The newest launch on this host and port that came up ready, as its step recorded it (with
    `run_id`); None when the audit trail has none."""
    if ctx.audit is None:
        return None
    rows = await ctx.audit.step_data_history(ctx.host_name, ["server.launch"], '"launch_args"', limit=100,
                                             newest_first=True)
    for row in rows:
        if row["status"] != GOOD:
            continue
        try:
            data = json.loads(row["data"])
        except (TypeError, ValueError):
            continue
        if isinstance(data, dict) and data.get("port") == port and isinstance(data.get("launch_args"), list):
            return {**data, "run_id": row["run_id"]}
    return None


async def live_info(ctx: SkillContext, python: str, port: int) -> dict[str, Any] | None:
    """The live server's /server_info on port (None: nothing answers there)."""
    code, body = await server.http_get(ctx, python, port, "/server_info")
    if code != 200:
        code, body = await server.http_get(ctx, python, port, "/get_server_info")
    if code != 200:
        return None
    try:
        info = json.loads(body)
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def _audited(record: Mapping[str, Any], flag: str, key: str) -> Any:
    """What the record says about one setting: the flag it was launched with, else what the server
    reported at launch (`effective`: SGLang's own choice of the speculative settings)."""
    flags = cmdline.flag_values(record.get("launch_args") or [])
    if flag in flags:
        return flags[flag]
    eff = record.get("effective") or {}
    if key in eff and eff[key] is not None:
        return eff[key]
    return DEFAULTS.get(key)


@dataclass
class Carried:
    """What a launch takes from the running server: `values` (launch parameters), `args` (extra
    arguments), `env`, `gpus`; where they came from and what disagreed."""

    values: dict[str, Any] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    gpus: str | None = None
    source: str = ""
    run_id: int | None = None
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def compare(record: Mapping[str, Any], live: Mapping[str, Any]) -> list[tuple[str, str, Any, Any]]:
    """(flag, key, audited, live) of every confirmed setting on which the two disagree."""
    out = []
    for flag, key in [(f, k) for _, f, k in CARRIED] + list(CONFIRMED):
        audited, now = _audited(record, flag, key), live.get(key)
        if audited is None or now is None:
            continue
        if not cmdline.same_value(str(audited), now):
            out.append((flag, key, audited, now))
    return out


def from_sources(record: Mapping[str, Any] | None, live: Mapping[str, Any] | None, port: int) -> Carried:
    """Decide what to carry, pure: the record's own flags (the live value where they differ), or
    without a record the live server's settings, or nothing."""
    c = Carried()
    if record is None and live is None:
        c.notes.append(f"no audited launch on port {port} and nothing answers there: nothing carried")
        return c
    if record is None:
        assert live is not None
        c.source = f"the live server's /server_info (no audited launch on port {port})"
        for param, flag, key in CARRIED:
            v = live.get(key)
            if v is not None and not (key in DEFAULTS and v == DEFAULTS[key]) and \
                    (not param.startswith("spec_") or live.get("speculative_algorithm")):
                c.values[param] = v
        if (dp := live.get("dp_size")) not in (None, 1):
            c.args = ["--dp-size", str(dp)]
        return c
    c.run_id = record.get("run_id")
    c.source = f"run #{c.run_id}'s audited launch"
    flags = cmdline.flag_values(record["launch_args"])
    diffs = compare(record, live) if live is not None else []
    live_over = {flag: now for flag, _, _, now in diffs}
    for flag, key, audited, now in diffs:
        c.differences.append(f"{key}: {audited} in {c.source}, {now} on the live server")
    if live is None:
        c.notes.append(f"nothing answers /server_info on port {port}: {c.source} carried unconfirmed")
    for param, flag, _ in CARRIED:
        if flag in live_over:
            c.values[param] = live_over[flag]
        elif flags.get(flag) is not None:
            c.values[param] = _typed(param, flags[flag])
    rest = {k: v for k, v in cmdline.launch_flags(record["launch_args"]).items() if k not in STRUCTURED}
    if "--dp-size" in live_over:
        rest["--dp-size"] = str(live_over["--dp-size"])
    c.args = cmdline.build_launch_args(rest)
    env = dict(record.get("env") or {})
    c.gpus = env.pop("CUDA_VISIBLE_DEVICES", None)
    c.env = {str(k): str(v) for k, v in env.items()}
    return c


def _typed(param: str, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return float(text) if param == "mem_fraction" else int(text)
    except ValueError:
        return text     # SGLang's parser, asked next, says what is wrong with it


def merge_args(carried: list[str], given: list[str]) -> list[str]:
    """The carried extra arguments with the given ones on top (a flag given replaces the carried one)."""
    flags = cmdline.launch_flags(carried)
    for k, v in cmdline.launch_flags(given).items():
        flags.pop(k, None)
        flags[k] = v
    return cmdline.build_launch_args(flags)


def shown(values: Mapping[str, Any], args: list[str], gpus: str | None) -> str:
    """The carried settings as the flags they become, for the plan and the summary."""
    words = [f"{flag} {values[p]}" for p, flag, _ in CARRIED if values.get(p) is not None]
    words += [" ".join(args)] if args else []
    words += [f"CUDA_VISIBLE_DEVICES={gpus}"] if gpus else []
    return " ".join(words) or "nothing"


# -- the draft's config, kept with each launch so a rollback restores its bytes --------------

async def draft_config(ctx: SkillContext, draft: str | None) -> dict[str, Any]:
    """`{draft_config_b64, draft_config_sha256}` of the draft's config.json now (empty: none readable)."""
    if not draft:
        return {}
    try:
        data = await ctx.host.read_file(f"{draft.rstrip('/')}/config.json")
    except Exception:   # a model id, not a folder; an unreadable file: nothing to restore later
        return {}
    return {"draft_config_b64": base64.b64encode(data).decode("ascii"),
            "draft_config_sha256": hashlib.sha256(data).hexdigest()}


def words(c: Carried) -> str:
    """What was carried, as the check step's summary says it."""
    return shown(c.values, c.args, c.gpus) + (f" (env {', '.join(sorted(c.env))})" if c.env else "")
