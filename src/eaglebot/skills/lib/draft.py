"""An EAGLE-3 draft on a host, for draft.check, draft.probe and draft.repair: its config files, its
weights' fingerprint, its trainer's provenance file, what the host's SGLang makes of its capture
ids (`eagle3`: the host's own source first, else the captured table of its version), and what the
audit trail saw of it before.
"""
from __future__ import annotations

import json
import posixpath
from typing import Any

from eaglebot.sdk import SkillContext, path_for_shell

from eaglebot.facts.sglang import release
from eaglebot.facts.spec import draft_contract, eagle3



async def read_text(ctx: SkillContext, path: str) -> str | None:
    """A small text file on the host (a config.json), or None when it cannot be read."""
    res = await ctx.host.run(f"cat -- {path_for_shell(path)}", timeout=30)
    return res.stdout if res.exit_status == 0 else None


async def identity(ctx: SkillContext, folder: str) -> str | None:
    """A fingerprint of the draft's weights (names, sizes, first MiB): another draft copied into the
    same folder is another draft, whatever its config says."""
    res = await ctx.host.run(draft_contract.identity_command(path_for_shell(folder)), timeout=60)
    return draft_contract.parse_identity(res.stdout)


async def provenance(ctx: SkillContext, folder: str) -> draft_contract.Provenance:
    """What the trainer left beside the draft: SpecForge's `<run_id>.best_meta.json` (the training
    accuracy per position) and its other checkpoint folders (`epoch_E_step_S/config.json`: the
    capture ids training used, in SpecForge's convention: as SGLang reads them)."""
    res = await ctx.host.run(draft_contract.provenance_command(path_for_shell(folder)), timeout=30)
    return draft_contract.parse_provenance(res.stdout)


async def resolve(ctx: SkillContext, python: str, target: eagle3.Target,
                  cases: list[list[int] | None]) -> tuple[eagle3.Resolution | None, str]:
    """(resolution, note): the host's own SGLang source first; where it cannot be asked, the captured
    table of the host's version (host var `sglang_version`, default eaglebot's); (None, why) when
    neither can answer."""
    got: eagle3.Resolution | str = "a dry run does not run the host's SGLang source"
    if ctx.may_run_host_code("SGLang's set_eagle3_layers_to_capture, compiled from the host's model file and run"):
        res = await ctx.host.run(eagle3.probe_command(python, target.archs, target.num_layers, cases),
                                 timeout=eagle3.PROBE_TIMEOUT_S, stdin=eagle3.probe_program())
        got = eagle3.parse_probe(-1 if res.exit_status is None else res.exit_status, res.stdout, res.stderr)
    if isinstance(got, eagle3.Resolution):
        return got, f"read from the host's SGLang {got.version} source in {got.elapsed_s}s"
    version = str(ctx.vars.get("sglang_version") or release.SGLANG_VERSION)
    if not eagle3.has_table(version):
        return None, f"the host's SGLang could not be asked ({got}) and eaglebot has no captured table of {version}"
    table = eagle3.resolve_with_table(eagle3.load_table(version), target.archs, target.num_layers, cases)
    if isinstance(table, str):
        return None, f"the host's SGLang could not be asked ({got}); {table}"
    ctx.log(f"the host's SGLang source could not be read ({got}); using the table captured from SGLang {version}")
    return table, f"the host's SGLang could not be asked ({got}); the table captured from the SGLang {version} wheel"


async def history(ctx: SkillContext, config_path: str, *, newest_first: bool = False,
                  limit: int = 200) -> list[dict[str, Any]]:
    """The audit trail's records of this config on this host (draft.check and config.patch), oldest
    first or newest first."""
    if ctx.audit is None:
        return []
    out = []
    # a short needle for the store's prefilter (the path as each step wrote it may differ in `//` or
    # `/./`); draft_contract.first_seen compares the normalized paths exactly
    needle = "/".join(posixpath.normpath(config_path).split("/")[-2:])
    for row in await ctx.audit.step_data_history(ctx.host_name, ["draft.check", "config.patch"], needle, limit,
                                                 newest_first):
        try:
            data = json.loads(row.get("data") or "{}")
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            out.append({"run_id": row.get("run_id"), "skill": row.get("skill"), "data": data})
    return out


async def sighting(ctx: SkillContext, config_path: str, identity: str | None) -> draft_contract.Sighting | None:
    """When the bot first saw this draft's config: carried forward by the newest check, else scanned."""
    found, seen = draft_contract.carried(await history(ctx, config_path, newest_first=True, limit=50), config_path,
                                         identity)
    return seen if found else draft_contract.first_seen(await history(ctx, config_path), config_path, identity)
