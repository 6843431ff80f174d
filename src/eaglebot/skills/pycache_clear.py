"""Remove stale Python bytecode (`__pycache__` folders and `.pyc` files) on the host.

Under the given `paths`, or under an installed `package`, which the host's Python
(host var `python`) locates with `importlib.util.find_spec` without importing it
(importing sglang pulls in torch and takes seconds). Reports how many folders and
files and how many bytes; dry-run only counts. Symlinks are not followed.

```yaml
- skill: pycache.clear
  with: {package: sglang}          # or: {paths: [/opt/sglang/src, ~/eagle-plugins]}
```
Registers `dirs`, `files`, `bytes` and `roots`.
"""
from __future__ import annotations

import shlex
from typing import Any

from pydantic import Field, model_validator

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, Plan, SkillContext, SkillParams, StepResult, path_for_shell

NAME = "pycache.clear"

# Prints one folder per line: the package's search locations, or a module's folder.
LOCATE = r'''
import importlib.util, os, sys
try:
    spec = importlib.util.find_spec(sys.argv[1])
except (ImportError, ValueError) as e:
    spec = None
if spec is None:
    print("EAGLE-NOT-FOUND"); sys.exit(0)
dirs = list(spec.submodule_search_locations or [])
if not dirs and spec.origin:
    dirs = [os.path.dirname(spec.origin)]
for d in dirs:
    print(os.path.realpath(d))
'''

_NEVER = {"/", "/usr", "/bin", "/etc", "/home", "/root", "/opt", "/var", "~"}


class Params(SkillParams):
    paths: list[str] = Field(default_factory=list, description="folders to clean (each must exist)", json_schema_extra=HOST_PATH)
    # Top-level names only: find_spec("a.b") would import the parent package `a`.
    package: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                description="an installed top-level Python package to clean, e.g. sglang")

    @model_validator(mode="after")
    def _something(self) -> "Params":
        if not self.paths and not self.package:
            raise ValueError("give `paths` and/or `package`")
        for p in self.paths:
            if p.rstrip("/") in _NEVER or p.strip() in ("", "/"):
                raise ValueError(f"refusing to clean a whole system folder ({p!r}); name the project folder")
        return self


def parse_scan(text: str) -> tuple[int, int, int]:
    """(dirs, files, bytes) from the scan's `D path` / `F size path` lines (pure)."""
    dirs = files = size = 0
    for line in text.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "D":
            dirs += 1
        elif kind == "F":
            n, _, _path = rest.partition("\t")
            files += 1
            size += int(n) if n.isdigit() else 0
    return dirs, files, size


def _scan_cmd(roots: str) -> str:
    return (f"find -H {roots} \\( -type d -name __pycache__ -printf 'D\\t%p\\n' \\) -o "
            f"\\( -type f \\( -name '*.pyc' -o -path '*/__pycache__/*' \\) -printf 'F\\t%s\\t%p\\n' \\)")


def _delete_cmd(roots: str) -> str:
    return (f"find -H {roots} -type f -name '*.pyc' -delete; "
            f"find -H {roots} -depth -type d -name __pycache__ -exec rm -rf -- {{}} +")


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


async def _locate(ctx: SkillContext, package: str) -> list[str]:
    python = str(ctx.vars.get("python") or "python3")
    res = await ctx.host.run(shlex.join([python, "-c", LOCATE, package]), timeout=60)
    if res.exit_status in (126, 127):
        raise StepFailed(f"{python} not found on {ctx.host_name}; set the host var python")
    if res.exit_status != 0:
        last = (res.stderr.strip().splitlines() or [f"exit status {res.exit_status}"])[-1]
        raise StepFailed(f"could not locate package {package} with {python} on {ctx.host_name}: {last}")
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    if not lines or lines == ["EAGLE-NOT-FOUND"]:
        raise StepFailed(f"package {package} is not installed for {python} on {ctx.host_name}")
    return lines


async def run(ctx: SkillContext, params: Params) -> StepResult:
    roots = list(params.paths)
    if params.package:
        found = await _locate(ctx, params.package)
        ctx.log(f"package {params.package}: {', '.join(found)}")
        roots += found
    quoted = " ".join(path_for_shell(r) for r in roots)
    check = await ctx.host.run(
        "for p in " + quoted + '; do [ -d "$p" ] || printf "%s\\n" "$p"; done', timeout=30)
    missing = check.stdout.split("\n")[:-1] if check.stdout else []
    if missing:
        raise StepFailed(f"{', '.join(missing)} is not a folder on {ctx.host_name}")
    scan = await ctx.host.run(_scan_cmd(quoted), timeout=300)
    dirs, files, size = parse_scan(scan.stdout)
    data = {"dirs": dirs, "files": files, "bytes": size, "roots": roots}
    where = ", ".join(roots)
    what = f"{dirs} __pycache__ folder{'s' if dirs != 1 else ''} and {files} bytecode file{'s' if files != 1 else ''} ({human(size)})"
    warnings: list[str] = []
    if scan.exit_status != 0 and scan.stderr.strip():
        warnings.append(f"find reported: {scan.stderr.strip().splitlines()[-1]}")
    if dirs == 0 and files == 0:
        return StepResult.ok(f"no bytecode under {where}", data=data, warnings=warnings)
    return await ctx.carry_out(Plan([f"remove {what} under {where}"], f"would remove {what} under {where}",
                                    lambda: _remove(ctx, quoted, what, where, data, warnings), data=data))


async def _remove(ctx: SkillContext, quoted: str, what: str, where: str, data: dict[str, Any],
                  warnings: list[str]) -> StepResult:
    res = await ctx.host.run(_delete_cmd(quoted), timeout=300)
    left = parse_scan((await ctx.host.run(_scan_cmd(quoted), timeout=300)).stdout)
    if left[0] or left[1]:
        err = (res.stderr.strip().splitlines() or [""])[-1]
        raise StepFailed(f"could not remove all bytecode under {where}: {left[0]} folders and "
                         f"{left[1]} files remain{': ' + err if err else ''}", data=data)
    return StepResult.changed(f"removed {what} under {where}", data=data, warnings=warnings)
