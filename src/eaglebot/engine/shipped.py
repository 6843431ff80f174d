"""The skills shipped in `eaglebot.skills`: each one's name, and its module, imported only when
asked for (a run of `hello` loads `shell` and `audit.note`, not the twenty modules, their facts
and their pydantic models: `eagle run` starts faster; tests/bench/bench_startup.py).

Each is held to the `Skill` protocol by mypy: `Skill[m.Params]` ties the module's `run` to
its own `Params` (the block below is read by mypy only), so a shipped skill with a wrong
`run` or `Params` fails scripts/check-arch.sh, not a run. A new skill module goes in both
places; tests/test_plugins.py checks that none is missing and that every name is the module's
own `NAME`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

PACKAGE = "eaglebot.skills"

# The skill's NAME (its name in playbooks) -> its module in eaglebot.skills.
SHIPPED: dict[str, str] = {
    "audit.note": "audit_note",
    "bench.batches": "bench_batches",
    "bench.compare": "bench_compare",
    "bench.correctness": "bench_correctness",
    "bench.flap": "bench_flap",
    "bench.serving": "bench_serving",
    "config.patch": "config_patch",
    "config.revert": "config_revert",
    "draft.check": "draft_check",
    "draft.probe": "draft_probe",
    "draft.repair": "draft_repair",
    "gpu.cleanup": "gpu_cleanup",
    "gpu.health": "gpu_health",
    "gpu.processes": "gpu_processes",
    "gpu.verify": "gpu_verify",
    "metric.record": "metric_record",
    "node.drain": "node_drain",
    "node.resume": "node_resume",
    "pycache.clear": "pycache_clear",
    "router.add": "router_add",
    "router.drain": "router_drain",
    "server.launch": "server_launch",
    "server.logs": "server_logs",
    "server.plan": "server_plan",
    "server.record": "server_record",
    "server.state": "server_state",
    "server.stop": "server_stop",
    "shell": "shell",
    "wait": "wait",
}

if TYPE_CHECKING:
    from eaglebot.sdk import Skill
    from eaglebot.skills import (
        audit_note,
        bench_batches,
        bench_compare,
        bench_correctness,
        bench_flap,
        bench_serving,
        config_patch,
        config_revert,
        draft_check,
        draft_probe,
        draft_repair,
        gpu_cleanup,
        gpu_health,
        gpu_processes,
        gpu_verify,
        metric_record,
        node_drain,
        node_resume,
        pycache_clear,
        router_add,
        router_drain,
        server_launch,
        server_logs,
        server_plan,
        server_record,
        server_state,
        server_stop,
        shell,
        wait,
    )

    _audit_note: Skill[audit_note.Params] = audit_note
    _bench_batches: Skill[bench_batches.Params] = bench_batches
    _bench_compare: Skill[bench_compare.Params] = bench_compare
    _bench_correctness: Skill[bench_correctness.Params] = bench_correctness
    _bench_flap: Skill[bench_flap.Params] = bench_flap
    _bench_serving: Skill[bench_serving.Params] = bench_serving
    _config_patch: Skill[config_patch.Params] = config_patch
    _config_revert: Skill[config_revert.Params] = config_revert
    _draft_check: Skill[draft_check.Params] = draft_check
    _draft_probe: Skill[draft_probe.Params] = draft_probe
    _draft_repair: Skill[draft_repair.Params] = draft_repair
    _gpu_cleanup: Skill[gpu_cleanup.Params] = gpu_cleanup
    _gpu_health: Skill[gpu_health.Params] = gpu_health
    _gpu_processes: Skill[gpu_processes.Params] = gpu_processes
    _gpu_verify: Skill[gpu_verify.Params] = gpu_verify
    _metric_record: Skill[metric_record.Params] = metric_record
    _node_drain: Skill[node_drain.Params] = node_drain
    _node_resume: Skill[node_resume.Params] = node_resume
    _pycache_clear: Skill[pycache_clear.Params] = pycache_clear
    _router_add: Skill[router_add.Params] = router_add
    _router_drain: Skill[router_drain.Params] = router_drain
    _server_launch: Skill[server_launch.Params] = server_launch
    _server_logs: Skill[server_logs.Params] = server_logs
    _server_plan: Skill[server_plan.Params] = server_plan
    _server_record: Skill[server_record.Params] = server_record
    _server_state: Skill[server_state.Params] = server_state
    _server_stop: Skill[server_stop.Params] = server_stop
    _shell: Skill[shell.Params] = shell
    _wait: Skill[wait.Params] = wait
