"""Show the tail of the SGLang server log on the host (read-only: its run takes no host lock).

```yaml
- skill: server.logs
  with: {lines: 60}
```
Which log: `path` when given; else the host var `server_log`; else the log the last
`server.launch` on this host recorded (read from the audit store); else the newest `*.log`
in the state folder (`~/.eaglebot`, its `log/` and `logs/`). The lines are kept with the
step (redacted like every output); registers `log_path` and `lines`. `follow: true` keeps
streaming what the server appends (`tail -F`) until the run is cancelled (`eagle logs -f`).
"""
from __future__ import annotations

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, SkillContext, SkillParams, StepResult, path_for_shell

from eaglebot.skills.lib import processes

NAME = "server.logs"
READ_ONLY = True  # reads one file: runs beside a relaunch in progress, takes no host lock
NOT_FOUND_EXIT = 3


class Params(SkillParams):
    path: str | None = Field(None, description="the log file (default: host var server_log, else the last "
                                               "launch's log, else the newest log in the state folder)", json_schema_extra=HOST_PATH)
    lines: int = Field(60, ge=1, le=5000, description="how many lines from the end of the log")
    follow: bool = Field(False, description="keep streaming what is appended until the run is cancelled")


async def _where(ctx: SkillContext, params: Params) -> tuple[str, str]:
    """The shell words naming the candidate files, and the same said for a person."""
    explicit = params.path or ctx.vars.get("server_log")
    if explicit:
        return path_for_shell(str(explicit)), str(explicit)
    launched = await ctx.audit.last_step_data(ctx.host_name, "server.launch", "log_path") if ctx.audit else None
    if launched:
        return path_for_shell(str(launched["log_path"])), str(launched["log_path"])
    state = processes.state_dir(ctx)
    d = path_for_shell(state)
    # The globs stay outside the quotes so the shell expands them; `ls -t` picks the newest.
    return " ".join(f"{d}/{g}" for g in ("*.log", "log/*.log", "logs/*.log")), f"{state}/**.log"


def tail_script(files: str, lines: int, follow: bool = False) -> str:
    return (f'f=$(ls -1t {files} 2>/dev/null | head -n 1); '
            f'if [ -z "$f" ]; then exit {NOT_FOUND_EXIT}; fi; '
            f'printf "{"== " if follow else ""}%s\\n" "$f"; {"exec tail -F" if follow else "tail"} -n {int(lines)} -- "$f"')


async def run(ctx: SkillContext, params: Params) -> StepResult:
    files, where = await _where(ctx, params)
    if params.follow:   # until cancelled: each line streams into the step's output as it comes
        res = await ctx.host.run(tail_script(files, params.lines, follow=True), timeout=None, on_output=ctx.stream())
    else:
        res = await ctx.host.run(tail_script(files, params.lines), timeout=30)
    if res.exit_status == NOT_FOUND_EXIT:
        raise StepFailed(f"no server log on {ctx.host_name} (looked at {where}; "
                         f"set the host var server_log or pass path=...)")
    if not res.ok:
        why = (res.stderr or res.stdout).strip().splitlines()
        raise StepFailed(f"could not read the log on {ctx.host_name}: {why[-1] if why else res.exit_status}")
    path, _, text = res.stdout.partition("\n")
    path = path.removeprefix("== ")
    n = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    return StepResult.ok(f"last {n} lines of {path}", output=text, data={"log_path": path, "lines": n})
