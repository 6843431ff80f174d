"""Ask SGLang itself whether it would accept a launch command, before anything is stopped or started.

The host's own SGLang first (`sglang_table.PROBE`: its real parser, nothing launched); where that
cannot run (no sglang in that Python, an import error), the captured table of the host's release:
host var `sglang_version`, else the release installed there (its metadata), else eaglebot's newest.
"""
from __future__ import annotations

from eaglebot.facts import sglang, sglang_table
from eaglebot.sdk import SkillContext

PROBE_TIMEOUT_S = 120.0   # importing sglang.srt.server_args imports torch: seconds, not minutes


async def check(ctx: SkillContext, python: str, args: list[str]) -> sglang_table.Verdict:
    res = await ctx.host.run(sglang_table.probe_command(python, args), timeout=PROBE_TIMEOUT_S)
    verdict = sglang_table.parse_probe(-1 if res.exit_status is None else res.exit_status, res.stdout, res.stderr)
    if verdict.kind != "unavailable":
        return verdict
    version = str(ctx.vars.get("sglang_version") or verdict.version or sglang.SGLANG_VERSION)
    if not sglang_table.has_table(version):
        verdict.message += f"; and eaglebot has no captured launch table of SGLang {version}"
        return verdict
    ctx.log(f"the host's SGLang parser could not be asked ({verdict.message}); "
            f"checking with the captured table of SGLang {version}")
    return sglang_table.check_with_table(args, version)
