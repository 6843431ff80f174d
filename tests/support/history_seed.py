"""Seed the audit store with finished runs directly through Store methods (test helper)."""
from __future__ import annotations

from eaglebot.sdk import FileChange, Metric
from eaglebot.store import Store
from eaglebot.store.rows import NewRun, StepEnd


def seed_run(store: Store, playbook: str, host: str, *, metrics: dict[str, float] | None = None,
             better: dict[str, str] | None = None, status: str = "succeeded",
             launch: dict | None = None, patch: dict | None = None, change: FileChange | None = None,
             package_versions: dict | None = None, origin: str = "cli", schedule: str | None = None,
             started_at: str | None = None) -> int:
    rid = store.create_run(NewRun(playbook=playbook, hosts=[host], inputs={}, variables={}, actor="t",
                           origin=origin, schedule=schedule))
    idx = 0
    if patch is not None:
        sid = store.step_started(rid, idx, host, "patch", "config.patch", patch)
        store.step_finished(sid, StepEnd(run_id=rid, host=host, status="changed", summary="patched", duration_ms=1,
                            attempts=1, changes=[change] if change else None))
        idx += 1
    elif change is not None:
        sid = store.step_started(rid, idx, host, "edit", "shell", {})
        store.step_finished(sid, StepEnd(run_id=rid, host=host, status="changed", summary="", duration_ms=1,
                            attempts=1, changes=[change]))
        idx += 1
    if launch is not None:
        sid = store.step_started(rid, idx, host, "launch", "server.launch", {})
        store.step_finished(sid, StepEnd(run_id=rid, host=host, status="changed", summary="up", duration_ms=1,
                            attempts=1, data=launch))
        idx += 1
    if package_versions is not None:
        sid = store.step_started(rid, idx, host, "versions", "shell", {})
        store.step_finished(sid, StepEnd(run_id=rid, host=host, status="ok", summary="", duration_ms=1, attempts=1,
                            data={"package_versions": package_versions}))
        idx += 1
    if metrics:
        sid = store.step_started(rid, idx, host, "bench", "bench.serving", {})
        store.step_finished(sid, StepEnd(run_id=rid, host=host, status="ok", summary="", duration_ms=1, attempts=1,
                            metrics=[Metric(k, v, "tok/s" if k == "output_throughput" else "",
                                            (better or {}).get(k, "higher")) for k, v in metrics.items()]))
    store.finish_run(rid, status, exit_code=0 if status == "succeeded" else 1)
    if started_at:
        store.db.execute("update runs set started_at = $1 where id = $2", [started_at, rid])
    return rid
