"""The launch pre-flight's question to the version-drift sentinel (facts/sglang/drift.py): would the
host's SGLang release break or silently ignore part of this launch? Asked before anything stops.

The host's installed source is read by the sentinel program (standard library, no import of sglang,
about a second); where it cannot be read (no full SGLang tree there, or no answer in time), the
known record of the release the parser check reported stands in, and the log says so.
"""
from __future__ import annotations

from typing import Any

from eaglebot.errors import StepFailed
from eaglebot.facts.sglang import drift, launch_table
from eaglebot.sdk import SkillContext
from eaglebot.skills.lib.preflight import KEEPS


async def surface(ctx: SkillContext, python: str, version: str | None) -> dict[str, Any] | None:
    """The host's fingerprint, else the record of `version`, else None (the log says why)."""
    res = await ctx.host.run(drift.command(python), timeout=drift.TIMEOUT_S,
                             stdin=drift.program())
    got = drift.parse(-1 if res.exit_status is None else res.exit_status, res.stdout, res.stderr)
    if isinstance(got, dict):
        return got
    rec = drift.record(version) if version else None
    ctx.log(f"the host's SGLang surface could not be read ({got}); "
            + (f"checking with eaglebot's record of SGLang {version}" if rec else
               f"eaglebot has no record of SGLang {version or '?'}: env vars and removed flags not checked"))
    return rec


async def check(ctx: SkillContext, python: str, args: list[str], env: dict[str, str],
                verdict: launch_table.Verdict) -> list[str]:
    """Warnings; raises StepFailed (usage) naming what to change for a launch the release would break
    (after SGLang's own words where its parser refused the arguments too)."""
    host = await surface(ctx, python, verdict.version)
    if host is None:
        return []
    refusals, warnings = drift.launch_problems(host, args, env)
    if refusals:
        parser = f"SGLang ({verdict.source}) refuses the launch arguments: {verdict.message}; " \
            if verdict.kind == "refused" else ""
        raise StepFailed(f"{parser}{'; '.join(refusals)} ({KEEPS})", warnings=warnings, usage=True,
                         data={"checked_args": args, "checked_by": verdict.source, "checked_version": verdict.version,
                               "surface_of": host.get("sglang")})
    return warnings
