"""Ask SGLang itself whether it would accept a launch command, before anything is stopped or started.

The host's own SGLang (`launch_table.PROBE`: `import sglang`, then its real parser; nothing
launched). A Python that cannot import sglang is `missing`: the launch would fail the same way, so
server.launch refuses it. Only where sglang is there but its parser cannot be asked (it imports,
but `sglang.srt.server_args` does not build here; or the probe did not finish and the package's
metadata says it is installed) is the captured table of that release the check, and the verdict
says so: host var `sglang_version`, else the release that answered, else eaglebot's newest.
"""
from __future__ import annotations

from eaglebot.facts.sglang import launch_table, release
from eaglebot.sdk import SkillContext

PROBE_TIMEOUT_S = 120.0   # importing sglang.srt.server_args imports torch: seconds, not minutes
INSTALLED_TIMEOUT_S = 60.0


async def _probe(ctx: SkillContext, python: str, args: list[str]) -> launch_table.Verdict:
    res = await ctx.host.run(launch_table.probe_command(python, args), timeout=PROBE_TIMEOUT_S)
    if not res.timed_out:
        return launch_table.parse_probe(-1 if res.exit_status is None else res.exit_status, res.stdout, res.stderr)
    partial = launch_table.parse_probe(-1, res.stdout, "")
    why = f"the probe did not finish within {PROBE_TIMEOUT_S:g}s"
    if partial.kind == "unavailable" and partial.version:   # sglang imported; its parser hung
        return launch_table.Verdict("unavailable", why, version=partial.version)
    meta = await ctx.host.run(launch_table.installed_command(python), timeout=INSTALLED_TIMEOUT_S)
    installed = launch_table.parse_installed(meta.stdout)
    if installed is None:
        return launch_table.Verdict("missing", f"{why}, and no sglang package is installed for it")
    return launch_table.Verdict("unavailable", f"{why} (sglang {installed} is installed)", version=installed)


async def check(ctx: SkillContext, python: str, args: list[str]) -> launch_table.Verdict:
    if ctx.may_run_host_code("SGLang's own parser (the host's Python imports sglang)"):
        verdict = await _probe(ctx, python, args)
    else:   # a dry run: the captured table of the host's release, said as such
        verdict = launch_table.Verdict("unavailable", "a dry run does not import the host's sglang")
    if verdict.kind != "unavailable":
        return verdict
    version = str(ctx.vars.get("sglang_version") or verdict.version or release.SGLANG_VERSION)
    if not launch_table.has_table(version):
        verdict.message += f"; and eaglebot has no captured launch table of SGLang {version}"
        return verdict
    ctx.log(f"the host's SGLang parser could not be asked ({verdict.message}); "
            f"checking with the captured table of SGLang {version}")
    table = launch_table.check_with_table(args, version)
    table.message = table.message or verdict.message
    return table
