"""Small helpers for the file skills: backup names, hashes, diffs, reading with one-sentence errors."""
from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass

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


@dataclass(frozen=True)
class FileStat:
    kind: str      # stat's %F, e.g. "regular file", "fifo", "character special file", "directory"
    size: int
    mode: int
    uid: int
    gid: int
    user: str = ""     # the owner's and group's names, for messages
    group: str = ""


async def stat(ctx: SkillContext, path: str) -> FileStat | None:
    """What `path` is (following a symlink), or None when it does not exist."""
    res = await ctx.host.run(f"stat -L -c '%F|%s|%a|%u|%g|%U|%G' -- {path_for_shell(path)}", timeout=30)
    if res.exit_status != 0:
        if "No such file" in res.stderr:
            return None
        raise StepFailed(f"cannot stat {path} on {ctx.host_name}: {res.stderr.strip() or res.exit_status}")
    try:
        kind, size, mode, uid, gid, user, group = res.stdout.strip().rsplit("|", 6)
        kind = "regular file" if kind == "regular empty file" else kind
        return FileStat(kind, int(size), int(mode, 8), int(uid), int(gid), user, group)
    except ValueError:
        raise StepFailed(f"cannot stat {path} on {ctx.host_name}: unexpected output {res.stdout[:80]!r}") from None


async def owner_problem(ctx: SkillContext, path: str, st: FileStat, verb: str) -> str | None:
    """Why rewriting `path` would hand it to another user, or None.

    A file is rewritten as a new file renamed over the old one, which needs only the folder's
    write permission; the new file can be given back the old one's owner and group only by
    root, or by its owner when they are in its group. Asked before anything is written."""
    res = await ctx.host.run("id -u; id -G; id -un; id -gn", timeout=30)
    try:
        uid_s, groups_s, me, my_group = res.stdout.strip().splitlines()[:4]
        uid, groups = int(uid_s), {int(g) for g in groups_s.split()}
    except ValueError:
        return f"cannot {verb} {path}: could not tell which user {ctx.host_name} runs it as"
    if uid == 0:
        return None
    if st.uid != uid:
        return (f"cannot {verb} {path}: it belongs to {st.user or st.uid} and would become {me}'s; "
                f"{verb} it as its owner")
    if st.gid not in groups:
        return (f"cannot {verb} {path}: its group is {st.group or st.gid} and would become {my_group}'s; "
                f"{verb} it as a member of {st.group or st.gid}")
    return None


async def keep_owner(ctx: SkillContext, path: str, uid: int, gid: int) -> str | None:
    """Give a rewritten file back its owner and group; a warning when that is not allowed."""
    now = await stat(ctx, path)
    if now is None or (now.uid, now.gid) == (uid, gid):
        return None
    res = await ctx.host.run(f"chown -h -- {uid}:{gid} {path_for_shell(path)}", timeout=30)
    if res.exit_status != 0:
        return f"{path}: could not give it back its owner {uid}:{gid} (now {now.uid}:{now.gid})"
    return None


async def write(ctx: SkillContext, path: str, data: bytes, mode: int | None = None) -> None:
    try:
        await ctx.host.write_file(path, data, mode)
    except TransportError:
        raise
    except OSError as e:
        why = e.strerror or str(e)
        # (the SSH transport's message already says which file on which host)
        raise StepFailed(why if why.startswith("cannot write ") else
                         f"cannot write {path} on {ctx.host_name}: {why}") from None
