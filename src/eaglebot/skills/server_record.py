"""The audit trail's own record of the newest launch on a port that came up ready: what
`eagle rollback` (and relaunch's `on_failure: rollback`) relaunches, byte for byte.

Read from the `server.launch` step that started it: its launch arguments (the ones SGLang's parser
accepted), its env and GPUs, its adaptive config, and the bytes of the draft's config.json the
server read. Fails, changing nothing, when the trail holds no such launch.

```yaml
- name: the previous good launch
  skill: server.record
  register: previous
  with: {port: "{{ port }}"}
```
Registers `run_id`, `args` (the launch arguments less --host, --port and the adaptive flags, which
server.launch takes as parameters), `bind`, `port`, `env`, `gpus`, `adaptive_config`, `draft`,
`draft_config_b64`, `draft_config_sha256` and `launch_args` (as launched).
"""
from __future__ import annotations

from typing import Any

from pydantic import Field

from eaglebot.errors import StepFailed
from eaglebot.sdk import SkillContext, SkillParams, StepResult

from eaglebot.facts.sglang import cmdline
from eaglebot.skills.lib import carry

NAME = "server.record"
READ_ONLY = True   # reads the audit trail only

_OWN = {"--host", "--port", "--speculative-adaptive", "--speculative-adaptive-config"}


class Params(SkillParams):
    port: int = Field(30000, ge=1, le=65535, description="the server's port")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    rec = await carry.last_launch(ctx, params.port)
    if rec is None:
        raise StepFailed(f"the audit trail holds no launch on {ctx.host_name}:{params.port} that came up ready: "
                         f"nothing to roll back to")
    launched = list(rec["launch_args"])
    flags = cmdline.launch_flags(launched)
    args = cmdline.build_launch_args({k: v for k, v in flags.items() if k not in _OWN})
    env = dict(rec.get("env") or {})
    gpus = env.pop("CUDA_VISIBLE_DEVICES", None)
    draft = flags.get("--speculative-draft-model-path")
    data: dict[str, Any] = {
        "run_id": rec["run_id"], "args": args, "launch_args": launched, "port": params.port,
        "bind": rec.get("bind") or str(flags.get("--host") or "127.0.0.1"), "env": env, "gpus": gpus,
        "adaptive_config": rec.get("adaptive_config"), "draft": draft if isinstance(draft, str) else None,
        "draft_config_b64": rec.get("draft_config_b64"), "draft_config_sha256": rec.get("draft_config_sha256")}
    kept = "with its draft config's bytes" if data["draft_config_b64"] else "(no draft config bytes recorded)"
    return StepResult.ok(f"run #{rec['run_id']}'s launch {kept}: {' '.join(launched)[:400]}", data=data)
