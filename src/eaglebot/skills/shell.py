"""Run a shell command on the host.

Values templated into `command` are quoted as one shell word each; write
`{{ x | raw }}` to splice a value in unquoted (you then own its quoting).

```yaml
- name: list models
  skill: shell
  with: {command: "ls -l {{ model }}", cwd: /models, env: {HF_HUB_OFFLINE: "1"}}
  register: ls
```
Registers `rc`, `stdout`, `stderr` (the last 64 KiB of each, after a line saying how much
was cut: `eagle show RUN --output` has the whole output).
"""
from __future__ import annotations

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, Plan, SkillContext, SkillParams, StepResult

NAME = "shell"
KEEP = 64 * 1024  # characters of stdout/stderr registered (and stored with the step's data)


class Params(SkillParams):
    command: str = Field(description="command line run by /bin/sh; templated values are shell-quoted",
                         json_schema_extra={"shell": True})
    env: dict[str, str] = Field(default_factory=dict, description="environment variables for the command")
    cwd: str | None = Field(None, description="working directory", json_schema_extra=HOST_PATH)
    ok_codes: list[int] = Field(default_factory=lambda: [0], description="exit codes that count as success")
    changed: bool = Field(True, description="report `changed` on success (false: `ok`, for read-only probes)")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    return await ctx.carry_out(Plan([f"run: {params.command}"], f"would run `{params.command}`",
                                    lambda: _run(ctx, params)))


async def _run(ctx: SkillContext, params: Params) -> StepResult:
    res = await ctx.host.run(params.command, env=params.env or None, cwd=params.cwd,
                             on_output=ctx.stream())
    data = {"rc": res.exit_status, "stdout": _last(res.stdout, ctx.run_id),
            "stderr": _last(res.stderr, ctx.run_id)}
    if res.exit_status not in params.ok_codes:
        last = _last_line(res.stderr) or _last_line(res.stdout)
        raise StepFailed(f"exit status {res.exit_status}: {last[:300]}", data=data)
    summary = (_last_line(res.stdout) or f"exit status {res.exit_status}")[:300]
    return StepResult("changed" if params.changed else "ok", summary, data=data)


def _last(text: str, run_id: int) -> str:
    """The end of a stream, as registered: whole when short, else its last KEEP characters."""
    if len(text) <= KEEP:
        return text
    tail = text[-KEEP:]
    i = tail.find("\n")
    return f"[... earlier output cut; whole output: eagle show {run_id} --output]\n" + tail[i + 1:]


def _last_line(text: str) -> str:
    # splitlines on the last line only: the output may be megabytes of short lines.
    return (text.strip().rpartition("\n")[2].splitlines() or [""])[-1]
