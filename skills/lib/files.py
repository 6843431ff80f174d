"""Small helpers for the file skills: backup names, hashes, diffs, reading with one-sentence errors."""
from __future__ import annotations

import difflib
import hashlib

from eaglebot.errors import StepFailed, TransportError
from eaglebot.sdk import SkillContext, path_for_shell


def backup_path(path: str, run_id: int, step_idx: int) -> str:
    """Where a run's step keeps the previous content of `path`: next to it, `<file>.eagle-<run>-<idx>.bak`.

    Users find and restore backups by this name (and `changes.backup_path` records it),
    so config.patch and config.revert both take it from here.
    """
    return f"{path}.eagle-{run_id}-{step_idx}.bak"


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def unified_diff(path: str, before: bytes | None, after: bytes | None) -> str:
    a = (before or b"").decode("utf-8", errors="replace").splitlines(keepends=True)
    b = (after or b"").decode("utf-8", errors="replace").splitlines(keepends=True)
    lines = list(difflib.unified_diff(a, b, fromfile=f"a/{path.lstrip('/')}", tofile=f"b/{path.lstrip('/')}"))
    return "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines)


async def read(ctx: SkillContext, path: str, what: str = "") -> bytes:
    try:
        return await ctx.host.read_file(path)
    except TransportError:
        raise
    except (OSError, ValueError) as e:
        raise StepFailed(f"cannot read {what or path} on {ctx.host_name}: {_reason(e)}") from None


def _reason(e: Exception) -> str:
    strerror = getattr(e, "strerror", None)
    if strerror:
        return str(strerror)
    lines = str(e).strip().splitlines()
    return lines[-1] if lines else type(e).__name__


async def mode_of(ctx: SkillContext, path: str) -> int | None:
    """Permission bits of the file (following a symlink), or None when unknown."""
    res = await ctx.host.run(f"stat -L -c %a -- {path_for_shell(path)}", timeout=30)
    try:
        return int(res.stdout.strip(), 8) if res.exit_status == 0 else None
    except ValueError:
        return None


async def write(ctx: SkillContext, path: str, data: bytes, mode: int | None = None) -> None:
    try:
        await ctx.host.write_file(path, data, mode)
    except TransportError:
        raise
    except OSError as e:
        raise StepFailed(f"cannot write {path} on {ctx.host_name}: {e.strerror or e}") from None
