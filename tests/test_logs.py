"""`server.logs` and the shipped `server-logs` playbook (`/eagle logs HOST`): a read-only run
through the engine, audited like any other, that takes no host lock."""
from __future__ import annotations

import json

from eaglebot.engine.runner import RunRequest, takes_locks
from eaglebot.engine.playbook import find_playbook
from eaglebot.engine.registry import shipped
from eaglebot.store.rows import NewRun, StepEnd
from support.sshd import chown_to


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
    holder = await svc.store.call(lambda s: s.create_run(NewRun(playbook="relaunch", hosts=["box"], inputs={}, variables={},
                                        actor="me", origin="cli")))
    await svc.store.call(lambda s: s.acquire_hosts(holder, ["box"]))  # a relaunch in progress on box
    out = await svc.engine.run(RunRequest("server-logs", hosts=["box"], actor="me"))
    assert out.status == "succeeded", out.error
    assert [lk["run_id"] for lk in svc.store.sync.locks()] == [holder]  # untouched, and none taken
    assert out.steps[0].output_tail.strip() == "ready"


async def test_server_logs_falls_back_to_the_log_the_last_launch_recorded(services, tmp_path):
    log = tmp_path / "logs" / "server-30000-7.log"
    log.parent.mkdir()
    log.write_text("The server is fired up and ready to roll!\n")
    svc = await services({"box": {"transport": "local"}})
    launch = await svc.store.call(lambda s: s.create_run(NewRun(playbook="relaunch", hosts=["box"], inputs={}, variables={},
                                        actor="me", origin="cli")))
    sid = await svc.store.call(lambda s: s.step_started(launch, 0, "box", "launch", "server.launch", {}))
    await svc.store.call(lambda s: s.step_finished(sid, StepEnd(run_id=launch, host="box", status="ok", summary="", duration_ms=1,
                                  attempts=1, data={"log_path": str(log), "pid": 1})))
    await svc.store.call(lambda s: s.finish_run(launch, "succeeded", exit_code=0))
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


async def test_slash_logs_goes_through_the_engine_audited_and_lock_free(services, tmp_path):
    from eaglebot.frontends.chat.caller import Caller
    from eaglebot.frontends.chat.router import handle

    log = tmp_path / "s.log"
    log.write_text("loading\nThe server is fired up and ready to roll!\n")
    svc = await services({"box": {"transport": "local", "vars": {"server_log": str(log)}}})
    holder = await svc.store.call(lambda s: s.create_run(NewRun(playbook="relaunch", hosts=["box"], inputs={}, variables={},
                                        actor="me", origin="cli")))
    await svc.store.call(lambda s: s.acquire_hosts(holder, ["box"]))
    reply = await handle(svc, "logs box", Caller("U1", channel="C1", check_access=False))
    assert reply.exit_code == 0 and reply.run_id is not None
    assert reply.text.splitlines() == [f"== {log}", "loading", "The server is fired up and ready to roll!"]
    run = svc.store.sync.get_run(reply.run_id)
    assert (run["playbook"], run["status"], run["actor"], run["origin"], run["hosts"]) == \
        ("server-logs", "succeeded", "U1", "slack", ["box"])
    assert [s["skill"] for s in svc.store.sync.steps(reply.run_id)] == ["server.logs"]
    assert [lk["run_id"] for lk in svc.store.sync.locks()] == [holder]


async def test_slash_logs_of_an_unknown_host_is_one_sentence(services):
    from eaglebot.frontends.chat.caller import Caller
    from eaglebot.frontends.chat.router import handle

    svc = await services({"box": {"transport": "local"}})
    reply = await handle(svc, "logs nosuch", Caller("U1", check_access=False))
    assert reply.exit_code == 2 and "unknown host 'nosuch'" in reply.text and "\n" not in reply.text.strip()
    assert svc.store.sync.locks() == []


def test_eagle_logs_status_and_show_last_from_the_terminal(tmp_path):
    from support.helpers import eagle

    log = tmp_path / "s.log"
    log.write_text("hello\n")
    cfg = tmp_path / "eagle.yaml"
    cfg.write_text(f"audit_db: {tmp_path / 'eagle.db'}\nhosts:\n  box: {{transport: local, vars: {{server_log: {log}}}}}\n")
    res = eagle("logs", "box", "--config", str(cfg))
    assert res.returncode == 0 and res.stdout == f"== {log}\nhello\n", res.stderr
    shown = eagle("show", "last", "--json", "--config", str(cfg))
    assert shown.returncode == 0 and json.loads(shown.stdout)["steps"][0]["skill"] == "server.logs"
    status = eagle("status", "--config", str(cfg))
    assert status.returncode == 0 and "busy hosts: none" in status.stdout
    bad = eagle("logs", "gpu-9", "--config", str(cfg))
    assert bad.returncode == 2 and "unknown host 'gpu-9'" in bad.stderr
