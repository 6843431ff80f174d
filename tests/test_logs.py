"""`server.logs` and the shipped `server-logs` playbook (`/eagle logs HOST`): a read-only run
through the engine, audited like any other, that takes no host lock."""
from __future__ import annotations

from eaglebot.engine.runner import RunRequest, takes_locks
from eaglebot.engine.playbook import find_playbook
from eaglebot.engine.registry import shipped
from sshd import chown_to


async def test_server_logs_tails_the_host_var_log_over_ssh_and_is_audited(services, sshd, remote_dir):
    log = remote_dir / "server.log"
    log.write_text("".join(f"line {i} hf_{'a' * 24}\n" if i == 99 else f"line {i}\n" for i in range(100)))
    chown_to(remote_dir)
    svc = await services({"gpu": {**sshd.host_config(), "vars": {"server_log": str(log)}}})
    out = await svc.engine.run(RunRequest("server-logs", hosts=["gpu"], inputs={"lines": "5"}, actor="U1",
                                          origin="slack"))
    assert out.status == "succeeded", out.error
    [step] = out.steps
    assert step.skill == "server.logs" and step.summary == f"last 5 lines of {log}"
    rows = svc.store.sync.steps(out.run_id)
    assert [r["skill"] for r in rows] == ["server.logs"]
    stored = rows[0]["output"]
    assert "line 95\n" in stored and "line 94\n" not in stored
    assert "hf_aaaa" not in stored and "***" in stored  # the log is redacted like every output
    run = svc.store.sync.get_run(out.run_id)
    assert (run["playbook"], run["actor"], run["origin"]) == ("server-logs", "U1", "slack")


async def test_server_logs_runs_while_another_run_holds_the_host(services, tmp_path):
    log = tmp_path / "s.log"
    log.write_text("ready\n")
    svc = await services({"box": {"transport": "local", "vars": {"server_log": str(log)}}})
    holder = await svc.store.create_run(playbook="relaunch", hosts=["box"], inputs={}, variables={},
                                        actor="me", origin="cli")
    await svc.store.acquire_hosts(holder, ["box"])  # a relaunch in progress on box
    out = await svc.engine.run(RunRequest("server-logs", hosts=["box"], actor="me"))
    assert out.status == "succeeded", out.error
    assert [lk["run_id"] for lk in svc.store.sync.locks()] == [holder]  # untouched, and none taken
    assert out.steps[0].output_tail.strip() == "ready"


async def test_server_logs_falls_back_to_the_log_the_last_launch_recorded(services, tmp_path):
    log = tmp_path / "logs" / "server-30000-7.log"
    log.parent.mkdir()
    log.write_text("The server is fired up and ready to roll!\n")
    svc = await services({"box": {"transport": "local"}})
    launch = await svc.store.create_run(playbook="relaunch", hosts=["box"], inputs={}, variables={},
                                        actor="me", origin="cli")
    sid = await svc.store.step_started(launch, 0, "box", "launch", "server.launch", {})
    await svc.store.step_finished(sid, run_id=launch, host="box", status="ok", summary="", duration_ms=1,
                                  attempts=1, data={"log_path": str(log), "pid": 1})
    await svc.store.finish_run(launch, "succeeded", exit_code=0)
    out = await svc.engine.run(RunRequest("server-logs", hosts=["box"], actor="me"))
    assert out.status == "succeeded", out.error
    assert out.steps[0].summary == f"last 1 lines of {log}"


async def test_no_log_is_a_failed_step_with_one_sentence(services, tmp_path):
    svc = await services({"box": {"transport": "local"}}, state_dir=str(tmp_path / "empty"))
    out = await svc.engine.run(RunRequest("server-logs", hosts=["box"], actor="me"))
    assert (out.status, out.exit_code) == ("failed", 1)
    assert out.steps[0].summary.startswith("no server log on box (looked at ")
    assert "set the host var server_log" in out.steps[0].summary


def test_only_all_read_only_playbooks_skip_the_host_lock():
    assert not takes_locks(find_playbook("server-logs", None), shipped())
    assert takes_locks(find_playbook("relaunch", None), shipped())
    assert takes_locks(find_playbook("verify", None), shipped())
