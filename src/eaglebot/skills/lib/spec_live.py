"""server.launch's and bench.serving's "speculation is really on" and lossless checks of a running
server (facts/spec/live.py judges): a few greedy prompts through /generate for the per-request
histogram, the server process's environment, and this draft's own history in the audit trail."""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from eaglebot.errors import StepFailed
from eaglebot.facts.host import procs
from eaglebot.facts.spec import draft_accept, live
from eaglebot.sdk import SkillContext, path_for_shell
from eaglebot.skills.lib import server

PROMPTS = 2            # enough verify passes for a histogram; the launch waits for them
MAX_TOKENS = 64
TIMEOUT_S = 120.0


async def probe(ctx: SkillContext, python: str, base: str, version: str | None) -> draft_accept.Stats | None:
    """A few greedy prompts' per-request speculative stats; None when none came back."""
    argv = [python, "-c", draft_accept.GENERATE_PY, base, str(MAX_TOKENS), str(TIMEOUT_S / 2), str(PROMPTS)]
    res = await ctx.host.run(shlex.join(argv), timeout=TIMEOUT_S, stdin=json.dumps(list(draft_accept.PROMPTS)))
    try:
        stats = draft_accept.parse_generate(res.stdout, version)
    except ValueError:
        return None
    return stats if stats.answered else None


# The readings come from the same greedy prompts in both skills: their accept lengths compare.
SKILLS = ["server.launch", "bench.serving"]


async def own_accept(ctx: SkillContext, key: dict[str, Any]) -> float | None:
    """This draft's newest earlier `speculation` reading on this host under the same settings (`key`:
    draft and its config, algorithm, steps, topk, draft tokens) that was `on`: its accept length."""
    if ctx.audit is None or not key.get("draft"):
        return None
    for row in await ctx.audit.step_data_history(ctx.host_name, SKILLS, json.dumps(key["draft"]), 100, True):
        if row.get("run_id") == ctx.run_id:
            continue
        try:
            sp = json.loads(row.get("data") or "{}").get("speculation") or {}
        except (json.JSONDecodeError, AttributeError):
            continue
        if sp.get("key") == key and sp.get("verdict") == live.ON and isinstance(sp.get("accept_length"), (int, float)):
            return float(sp["accept_length"])
    return None


def key(info: dict[str, Any], config_sha256: str | None = None) -> dict[str, Any]:
    """What makes two readings of a draft comparable: the same draft with the same config.json (a
    capture list other than before is another config, whose acceptance is its own: the probe
    measures that drop), the same algorithm, steps, topk and draft tokens."""
    algorithm, steps = live.resolved(info)
    return {"draft": info.get("speculative_draft_model_path"), "draft_config_sha256": config_sha256,
            "algorithm": algorithm, "steps": steps, "topk": info.get("speculative_eagle_topk"),
            "draft_tokens": info.get("speculative_num_draft_tokens")}


async def config_sha256(ctx: SkillContext, draft: object) -> str | None:
    """The SHA-256 of the draft folder's config.json on the host (None: no such file)."""
    if not isinstance(draft, str) or not draft:
        return None
    res = await ctx.host.run(f"sha256sum {path_for_shell(draft.rstrip('/') + '/config.json')} 2>/dev/null; true",
                             timeout=30)
    digest = res.stdout.split()[0] if res.stdout.split() else ""
    return digest if len(digest) == 64 else None


async def check(ctx: SkillContext, python: str, base: str,
                info: dict[str, Any]) -> tuple[live.Verdict, dict[str, Any]]:
    """The reading of a speculative server and the `speculation` data the step registers."""
    stats = await probe(ctx, python, base, str(info.get("version") or "") or None)
    k = key(info, await config_sha256(ctx, info.get("speculative_draft_model_path")))
    own = await own_accept(ctx, k)
    v = live.really_on(info, stats, own)
    ctx.log(v.summary)
    return v, {"verdict": v.verdict, "failures": v.failures, "key": k, **v.numbers}


@dataclass(frozen=True)
class Launched:
    """The server server.launch just started, and what its checks may do."""
    python: str
    port: int
    pid: int
    base: str
    lossy_allowed: bool
    fail_when_off: bool


async def after_launch(ctx: SkillContext, s: Launched, info: dict[str, Any], data: dict[str, Any],
                       warnings: list[str], output: str) -> None:
    """Lossless and really speculating, right after the start (registers `speculation` in `data`). A
    lossy server is stopped (its outputs are wrong); one that does not speculate stays up (it serves
    correct outputs, slowly)."""
    lossy = live.lossy_running(await procs.environ(ctx.host, s.pid), info)
    if lossy and not s.lossy_allowed:
        await server.stop_session(ctx, s.pid, 5)
        await server.remove_pid_file(ctx, s.port)
        raise StepFailed(f"the server is not lossless: {'; '.join(lossy)}; it was stopped (pass lossy=allow "
                         f"to keep such a server)", data=data, warnings=warnings, output=output)
    if lossy and not any(w.startswith("lossy launch") for w in warnings):
        warnings.append(f"lossy server (lossy=allow): {'; '.join(lossy)}")
    verdict, data["speculation"] = await check(ctx, s.python, s.base, info)
    if verdict.failures and s.fail_when_off:
        raise StepFailed(f"{verdict.summary}; the server (pid {s.pid}) stays up", data=data, warnings=warnings,
                         output=output)
    if verdict.failures or verdict.verdict == live.UNKNOWN:   # dummy weights: said in the data, no alarm
        warnings.append(verdict.summary)
