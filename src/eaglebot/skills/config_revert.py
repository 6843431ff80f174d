"""Restore a file from the bot's last backup of it (made by `config.patch`), byte for byte.

Without `run`, the newest backup of that path on that host is used; `run: 42` picks
the backup run 42 made (its newest; with `first: true` its first: the file as it was before that
run touched it, which draft-repair restores after patching it several times). The change is
recorded like any other (hashes and diff);
the content being replaced is saved as `<file>.eagle-<run_id>-<step idx>.bak` too, but
is not itself a revert target, so running the revert twice is a no-op.

`content_b64` (with `sha256`) restores given bytes instead of a backup: a launch's own record of
the draft config it read (`eagle rollback` puts back the bytes the previous good server ran with).

```yaml
- skill: config.revert
  with: {path: "{{ draft }}/config.json", run: 42}
```
Registers `path`, `restored_from` (backup path), `from_run` and `saved_current_as`.
"""
from __future__ import annotations

import base64
import binascii
from typing import Any, Mapping

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, FileChange, Plan, SkillContext, SkillParams, StepResult
from eaglebot.skills.lib import files

NAME = "config.revert"


class Params(SkillParams):
    path: str = Field(description="the file to restore (as it was given to config.patch)", json_schema_extra=HOST_PATH)
    run: int | None = Field(None, ge=1, description="restore the backup made by this run (default: the newest)")
    first: bool = Field(False, description="with `run`: that run's first backup of the file, not its newest")
    content_b64: str | None = Field(None, description="restore these bytes (base64) instead of a backup: the "
                                                      "draft config a launch recorded (rollback)")
    sha256: str | None = Field(None, description="with content_b64: their recorded SHA-256, checked first")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    path = params.path
    if params.content_b64 is not None:
        return await _restore_bytes(ctx, params)
    if ctx.audit is None:
        raise StepFailed("config.revert needs the audit store, which this context does not have")
    if params.first and params.run is not None:
        made = [c for c in await ctx.audit.changes(params.run)
                if c.get("host") == ctx.host_name and c.get("path") == path and c.get("backup_path")]
        if not made:
            return StepResult.ok(f"run {params.run} made no backup of {path}: nothing to restore",
                                 data={"path": path, "restored_from": None, "from_run": None, "saved_current_as": None})
        row: Mapping[str, Any] | None = made[0]
    else:
        row = await ctx.audit.last_backup(ctx.host_name, path, run_id=params.run)
    if row is None:
        which = f" from run {params.run}" if params.run else ""
        raise StepFailed(f"no backup of {path} on {ctx.host_name}{which} in the audit log; nothing to revert")
    bak = row["backup_path"]
    original = await files.read(ctx, bak, what=f"the backup {bak}")
    if files.sha256(original) != row.get("before_sha256"):
        raise StepFailed(f"the backup {bak} does not match the hash recorded by run {row['run_id']}; "
                         f"not restoring it")
    try:
        current: bytes | None = await ctx.host.read_file(path)
    except (FileNotFoundError, OSError):
        current = None
    data = {"path": path, "restored_from": bak, "from_run": row["run_id"], "saved_current_as": None}
    if current == original:
        return StepResult.ok(f"{path} already matches the backup from run {row['run_id']}", data=data)
    return await _put_back(ctx, path, current, original, bak, row["run_id"], data)


async def _restore_bytes(ctx: SkillContext, params: Params) -> StepResult:
    """The bytes a launch recorded, checked against their recorded hash, put back."""
    path = params.path
    try:
        original = base64.b64decode(params.content_b64 or "", validate=True)
    except (binascii.Error, ValueError):
        raise StepFailed("content_b64 is not base64", usage=True) from None
    if params.sha256 is not None and files.sha256(original) != params.sha256:
        raise StepFailed(f"the recorded bytes of {path} do not match their recorded hash; not restoring them")
    try:
        current: bytes | None = await ctx.host.read_file(path)
    except (FileNotFoundError, OSError):
        current = None
    data = {"path": path, "restored_from": "the launch's record", "from_run": None, "saved_current_as": None}
    if current == original:
        return StepResult.ok(f"{path} already holds the recorded bytes", data=data)
    return await _put_back(ctx, path, current, original, "the launch's record", None, data)


async def _put_back(ctx: SkillContext, path: str, current: bytes | None, original: bytes, bak: str,
                    from_run: int | None, data: dict[str, Any]) -> StepResult:
    diff = files.unified_diff(path, current, original)
    of_run = f" (run {from_run})" if from_run is not None else ""

    async def restore() -> StepResult:
        st = await files.stat(ctx, path) if current is not None else None
        if st is not None and (why := await files.owner_problem(ctx, path, st, "revert")):
            raise StepFailed(why)
        mode = await files.mode_of(ctx, path) if current is not None else None
        if current is not None:
            saved = files.backup_path(path, ctx.run_id, ctx.step_idx)
            await files.write(ctx, saved, current, mode)
            data["saved_current_as"] = saved
        await files.write(ctx, path, original, mode)
        if await files.read(ctx, path) != original:
            raise StepFailed(f"{path} on {ctx.host_name} changed under us while restoring it from {bak}")
        ctx.log(diff.rstrip("\n"))
        # backup_path stays None: the revert itself is not a revert target (reverting twice is a no-op).
        change = FileChange(path, files.sha256(current), files.sha256(original), diff, None)
        return StepResult.changed(f"restored {path} from {bak}{of_run}", changes=[change], data=data,
                                  output=diff)

    return await ctx.carry_out(Plan([f"restore {path} from {bak}:\n{diff}"], f"would restore {path} from {bak}",
                                    restore, data=data, output=diff))
