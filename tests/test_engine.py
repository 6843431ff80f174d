"""The engine over the local transport and over a real OpenSSH sshd on loopback."""
from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from support.helpers import pid_alive, wait_for, write_playbook

from eaglebot.errors import HostBusy, UsageError
from eaglebot.engine.playbook import load_playbook
from eaglebot.engine.runner import RunRequest


def pb(tmp_path, body: str, name: str = "t"):
    return load_playbook(write_playbook(tmp_path, name, body))


@pytest.fixture
async def ssh_svc(services, sshd):
    return await services({"box": sshd.host_config()})


async def test_steps_run_in_order_with_register_when_and_templating(services, tmp_path):
    svc = await services()
    book = pb(tmp_path, """
        name: t
        inputs:
          word: {type: str, default: plain}
          layers: {type: "list[int]", required: false}
        vars: {greeting: "hi {{ word }}"}
        steps:
          - name: first
            skill: shell
            with: {command: "echo 41"}
            register: first
          - name: second
            skill: shell
            when: first.rc == 0 and (first.stdout | trim | int) == 41
            with: {command: "echo {{ (first.stdout | trim | int) + 1 }} {{ greeting }}"}
            register: second
          - name: skipped-by-when
            skill: shell
            when: layers is defined
            with: {command: "echo {{ layers }}"}
          - name: third
            skill: shell
            with: {command: "echo {{ second.stdout | trim }}"}
    """)
    out = await svc.engine.run(RunRequest(playbook=book, inputs={"word": "$(touch /tmp/eagle-pwned)"}))
    assert out.status == "succeeded" and out.exit_code == 0
    assert [s.name for s in out.steps] == ["first", "second", "skipped-by-when", "third"]
    assert [s.status for s in out.steps] == ["changed", "changed", "skipped", "changed"]
    assert out.steps[1].summary == "42 hi $(touch /tmp/eagle-pwned)"
    assert not os.path.exists("/tmp/eagle-pwned")
    rows = svc.store.sync.steps(out.run_id)
    assert [r["idx"] for r in rows] == [0, 1, 2, 3]
    assert rows[2]["status"] == "skipped" and "when" in rows[2]["summary"]
    run = svc.store.sync.get_run(out.run_id)
    assert run["inputs"] == {"word": "$(touch /tmp/eagle-pwned)"}
    assert run["vars"]["local"]["greeting"] == "hi $(touch /tmp/eagle-pwned)"


async def test_user_inputs_beat_host_vars_beat_defaults_beat_vars(services, tmp_path):
    svc = await services({"local": {"transport": "local", "vars": {"a": "host", "b": "host"}}})
    book = pb(tmp_path, """
        name: t
        inputs:
          a: {type: str, default: default}
          b: {type: str, default: default}
          c: {type: str, default: default}
        vars: {a: var, b: var, c: var, d: var}
        steps:
          - skill: shell
            with: {command: "echo {{ a }} {{ b }} {{ c }} {{ d }}"}
    """)
    out = await svc.engine.run(RunRequest(playbook=book, inputs={"a": "user"}))
    assert out.steps[0].summary == "user host default var"


async def test_retries_until_success_and_counts_attempts(services, tmp_path):
    svc = await services()
    counter = tmp_path / "n"
    book = pb(tmp_path, f"""
        name: t
        steps:
          - skill: shell
            retries: 3
            retry_delay_s: 0.01
            with: {{command: "n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; test $n -ge 3"}}
    """)
    out = await svc.engine.run(RunRequest(playbook=book))
    assert out.status == "succeeded"
    assert out.steps[0].attempts == 3
    assert svc.store.sync.steps(out.run_id)[0]["attempts"] == 3


async def test_always_steps_run_after_a_failure_and_later_steps_are_recorded_as_not_run(services, tmp_path):
    svc = await services()
    marker = tmp_path / "always-ran"
    book = pb(tmp_path, f"""
        name: t
        steps:
          - name: boom
            skill: shell
            with: {{command: "echo about to fail; exit 7"}}
          - name: never
            skill: shell
            with: {{command: "echo never"}}
        always:
          - name: tidy
            skill: shell
            with: {{command: "touch {marker}"}}
    """)
    out = await svc.engine.run(RunRequest(playbook=book))
    assert out.status == "failed" and out.exit_code == 1
    assert [(s.name, s.status) for s in out.steps] == [("boom", "failed"), ("never", "skipped"), ("tidy", "changed")]
    assert "exit status 7" in out.steps[0].summary
    assert marker.exists()
    rows = svc.store.sync.steps(out.run_id)
    assert "about to fail" in rows[0]["output"]
    assert rows[1]["summary"] == "not run: step 'boom' failed"
    assert svc.store.sync.get_run(out.run_id)["status"] == "failed"


async def test_continue_on_error_becomes_a_warning(services, tmp_path):
    svc = await services()
    book = pb(tmp_path, """
        name: t
        steps:
          - name: flaky
            skill: shell
            continue_on_error: true
            with: {command: "exit 3"}
          - skill: shell
            with: {command: "echo after"}
    """)
    out = await svc.engine.run(RunRequest(playbook=book))
    assert out.status == "succeeded" and out.exit_code == 0
    assert out.warnings == ["local: flaky failed (continue_on_error): exit status 3: "]
    assert [w["message"] for w in svc.store.sync.warnings(out.run_id)] == ["flaky failed (continue_on_error): exit status 3: "]


async def test_step_rows_are_committed_before_the_step_runs(services, tmp_path):
    svc = await services()
    db = svc.settings.db_path
    probe = (f"import sqlite3,json; c=sqlite3.connect({str(db)!r}); "
             f"print(json.dumps([list(r) for r in c.execute('select r.status, s.name, s.status from runs r "
             f"join steps s on s.run_id=r.id order by s.id')]))")
    book = pb(tmp_path, f"""
        name: t
        steps:
          - name: first
            skill: shell
            with: {{command: "true"}}
          - name: look
            skill: shell
            with: {{command: {json.dumps(sys.executable + " -c " + json.dumps(probe))}}}
            register: look
    """)
    out = await svc.engine.run(RunRequest(playbook=book))
    assert out.status == "succeeded", out.error
    seen = json.loads(svc.store.sync.steps(out.run_id)[1]["output"].strip().splitlines()[-1])
    assert seen == [["running", "first", "changed"], ["running", "look", "running"]]


async def test_output_streams_into_the_audit_log_while_the_step_runs(services, tmp_path):
    svc = await services()
    book = pb(tmp_path, """
        name: t
        steps:
          - skill: shell
            with: {command: "echo early-line; sleep 30"}
    """)
    run_id, task = await svc.engine.start(RunRequest(playbook=book))
    store = svc.store.sync

    async def streamed():
        for _ in range(200):
            rows = await svc.store.call(lambda s: s.steps(run_id))
            if rows and "early-line" in (rows[0]["output"] or ""):
                return True
            await asyncio.sleep(0.05)
        return False

    assert await streamed()
    assert store.get_run(run_id)["status"] == "running"
    svc.engine.cancel(run_id)
    out = await task
    assert out.status == "cancelled"


async def test_cancel_stops_the_step_kills_its_processes_and_still_runs_always(services, tmp_path):
    svc = await services()
    pidfile, marker = tmp_path / "pid", tmp_path / "always"
    book = pb(tmp_path, f"""
        name: t
        steps:
          - name: long
            skill: shell
            with: {{command: "sleep 300 & echo $! > {pidfile}; wait"}}
          - name: after
            skill: shell
            with: {{command: "echo never"}}
        always:
          - skill: shell
            with: {{command: "touch {marker}"}}
    """)
    run_id, task = await svc.engine.start(RunRequest(playbook=book))
    await asyncio.to_thread(wait_for, lambda: pidfile.exists() and pidfile.read_text().strip(), 20, 0.05, "pid file")
    child = int(pidfile.read_text())
    assert pid_alive(child)
    assert await svc.store.call(lambda s: s.request_cancel(run_id))  # as `/eagle cancel` or `eagle cancel` from another process
    out = await task
    assert out.status == "cancelled" and out.exit_code == 1
    assert [(s.name, s.status) for s in out.steps] == [("long", "failed"), ("after", "skipped"), ("shell", "changed")]
    assert out.steps[0].summary == "cancelled"
    assert marker.exists()
    await asyncio.to_thread(wait_for, lambda: not pid_alive(child), 10, 0.05, "the sleeper to die")
    assert svc.store.sync.get_run(run_id)["status"] == "cancelled"
    assert svc.store.sync.locks() == []


async def test_dry_run_renders_everything_and_changes_nothing(ssh_svc, remote_dir, tmp_path):
    marker = remote_dir / "marker"
    book = pb(tmp_path, f"""
        name: t
        inputs: {{n: {{type: int, default: 2}}}}
        steps:
          - skill: shell
            with: {{command: "touch {marker}"}}
          - skill: wait
            with: {{seconds: "{{{{ n }}}}"}}
    """)
    out = await ssh_svc.engine.run(RunRequest(playbook=book, hosts=["box"], dry_run=True))
    assert out.status == "succeeded"
    assert not marker.exists()
    assert [s.status for s in out.steps] == ["skipped", "skipped"]
    assert out.plan == [f"box: shell: run: touch {marker}", "box: wait: wait 2s"]
    run = ssh_svc.store.sync.get_run(out.run_id)
    assert run["dry_run"] == 1
    assert ssh_svc.store.sync.locks() == []


async def test_timeout_kills_the_remote_process_group_over_ssh(ssh_svc, remote_dir, tmp_path):
    pids = remote_dir / "pids"
    book = pb(tmp_path, f"""
        name: t
        steps:
          - skill: shell
            timeout_s: 1
            with: {{command: "sleep 301 & echo $! >> {pids}; echo $$ >> {pids}; sleep 302"}}
    """)
    out = await ssh_svc.engine.run(RunRequest(playbook=book, hosts=["box"]))
    assert out.status == "failed"
    assert out.steps[0].summary == "timed out after 1s; its processes were stopped"
    remote = [int(x) for x in pids.read_text().split()]
    assert len(remote) == 2
    await asyncio.to_thread(wait_for, lambda: not any(pid_alive(p) for p in remote), 10, 0.05, "remote processes to die")


async def test_one_connection_is_reused_for_every_step(ssh_svc, tmp_path):
    book = pb(tmp_path, """
        name: t
        steps:
          - skill: shell
            with: {command: "echo $PPID"}
          - skill: shell
            with: {command: "echo $PPID"}
    """)
    out = await ssh_svc.engine.run(RunRequest(playbook=book, hosts=["box"]))
    assert out.status == "succeeded"
    transport = ssh_svc.pool.get("box")
    assert transport._conn is not None and not transport._conn.is_closed()
    conn = transport._conn
    out2 = await ssh_svc.engine.run(RunRequest(playbook=book, hosts=["box"]))
    assert out2.status == "succeeded" and transport._conn is conn


async def test_several_hosts_run_concurrently(services, sshd, remote_dir, tmp_path):
    svc = await services({"a": sshd.host_config(), "b": sshd.host_config()}, groups={"pair": ["a", "b"]})
    # A rendezvous: each host's step waits for the other's to have started, so the run can
    # only succeed if both steps run at the same time.
    book = pb(tmp_path, f"""
        name: t
        steps:
          - skill: shell
            with:
              command: >-
                touch {remote_dir}/{{{{ host }}}};
                other={{{{ 'b' if host == 'a' else 'a' }}}};
                i=0; while [ ! -e {remote_dir}/$other ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done;
                test -e {remote_dir}/$other && echo {{{{ host }}}}
    """)
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["pair"]))
    assert out.status == "succeeded", [s.summary for s in out.steps]
    assert sorted(s.summary for s in out.steps) == ["a", "b"]


async def test_busy_host_is_refused_with_the_holding_run(services, tmp_path):
    svc = await services()
    book = pb(tmp_path, """
        name: t
        steps:
          - skill: shell
            with: {command: "sleep 30"}
    """)
    run_id, task = await svc.engine.start(RunRequest(playbook=book))
    with pytest.raises(HostBusy, match=rf"host local is busy with run #{run_id} since "):
        await svc.engine.start(RunRequest(playbook=book))
    assert [r["id"] for r in await svc.store.call(lambda s: s.history(limit=5))] == [run_id]   # no run row for the refusal
    refused = (await svc.store.call(lambda s: s.events("rejected")))[0]
    assert "busy" in refused["reason"] and refused["actor"] and refused["run_id"] is None
    svc.engine.cancel(run_id)
    await task
    run2, task2 = await svc.engine.start(RunRequest(playbook=book))
    svc.engine.cancel(run2)
    await task2


async def test_unknown_host_is_a_usage_error_and_is_audited(services, tmp_path):
    svc = await services()
    book = pb(tmp_path, "name: t\nsteps:\n  - skill: shell\n    with: {command: 'true'}\n")
    with pytest.raises(UsageError, match=r"unknown host 'gpu-9' \(known: local\)"):
        await svc.engine.start(RunRequest(playbook=book, hosts=["gpu-9"]))
    assert await svc.store.call(lambda s: s.history(limit=1)) == []
    ev = (await svc.store.call(lambda s: s.events("rejected")))[0]
    assert ev["text"] == "t gpu-9" and "unknown host 'gpu-9'" in ev["reason"]


async def test_changed_host_key_is_refused(services, sshd, tmp_path):
    other = tmp_path / "known_hosts"
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    other.write_text(f"[127.0.0.1]:{sshd.port} " + " ".join((tmp_path / "k.pub").read_text().split()[:2]) + "\n")
    svc = await services({"box": sshd.host_config(known_hosts=str(other))})
    book = pb(tmp_path, "name: t\nsteps:\n  - skill: shell\n    with: {command: 'touch /tmp/should-not'}\n")
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["box"]))
    assert out.status == "failed" and out.exit_code == 1
    assert "host key" in out.steps[0].summary and "refusing to connect" in out.steps[0].summary


async def test_unknown_host_key_is_refused(services, sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    svc = await services({"box": sshd.host_config(known_hosts=str(empty))})
    book = pb(tmp_path, "name: t\nsteps:\n  - skill: shell\n    with: {command: 'true'}\n")
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["box"]))
    assert out.status == "failed" and "unknown or changed" in out.steps[0].summary


async def test_unreachable_host_ends_the_run_unreachable_with_one_sentence(services, sshd, tmp_path):
    from support.sshd import free_port

    svc = await services({"dead": sshd.host_config(port=free_port(), connect_timeout_s=3)})
    book = pb(tmp_path, """
        name: t
        steps:
          - skill: shell
            with: {command: "true"}
        always:
          - skill: audit.note
    """)
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["dead"]))
    # unreachable (after the connect retries) is not failed: exit 4 (docs/cli.md, "Exit codes and output")
    assert out.status == "unreachable" and out.exit_code == 4
    assert out.steps[0].status == "unreachable" and out.steps[1].status == "skipped"
    assert out.steps[0].summary.startswith("host dead is unreachable at 127.0.0.1:")
    assert "after 4 tries: " in out.steps[0].summary
    assert "\n" not in out.steps[0].summary


async def test_secrets_are_redacted_from_params_and_output(services, tmp_path, monkeypatch):
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-not-a-real-token-123456")
    svc = await services(redact=["sekrit-[0-9]+"])
    book = pb(tmp_path, """
        name: t
        steps:
          - skill: shell
            with: {command: "echo xoxb-not-a-real-token-123456 sekrit-42 hf_abcdefghijklmnopqrstuvwxyz"}
    """)
    out = await svc.engine.run(RunRequest(playbook=book))
    row = svc.store.sync.steps(out.run_id)[0]
    for text in (row["output"], row["params"], row["summary"]):
        assert "xoxb-not" not in text and "sekrit-42" not in text and "hf_abc" not in text
    assert "***" in row["output"]


async def test_connection_cut_mid_step_fails_the_step_and_is_audited(services, tmp_path):
    """asyncssh's own server, which drops the connection in the middle of a command."""
    import asyncssh

    key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key.write_private_key(str(tmp_path / "id"))

    class Server(asyncssh.SSHServer):
        def begin_auth(self, username):
            return True

        def public_key_auth_supported(self):
            return True

        def validate_public_key(self, username, k):
            return k.export_public_key() == client_key.export_public_key()

    async def process(proc):
        if proc.command.startswith('read -r u _ </proc/uptime; echo "$PPID $u"'):  # the sshd pid and the
            proc.stdout.write("4242 1000.00\n")   # host's clock, once per connection
            proc.exit(0)
            return
        if "EAGLE-HOST-PATHS" in proc.command:   # the engine asks the host for its home and state folder
            proc.stdout.write("EAGLE-HOST-PATHS /home/x\n/home/x/.eaglebot\n")
            proc.exit(0)
            return
        proc.stdout.write("working...\n")
        await asyncio.sleep(0.3)
        proc.channel.get_connection().abort()

    server = await asyncssh.create_server(Server, "127.0.0.1", 0, server_host_keys=[key], process_factory=process)
    port = server.sockets[0].getsockname()[1]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {key.export_public_key().decode().strip()}\n")
    # A real sshd losing its connection mid-command is tests/faults/test_orphans.py.
    svc = await services({"flaky": {"address": "127.0.0.1", "port": port, "user": "x", "key": str(tmp_path / "id"),
                                    "known_hosts": str(known), "shell": "exec"}})
    book = pb(tmp_path, """
        name: t
        steps:
          - skill: shell
            with: {command: "long-job"}
        always:
          - skill: audit.note
    """)
    try:
        out = await asyncio.wait_for(svc.engine.run(RunRequest(playbook=book, hosts=["flaky"])), 30)
    finally:
        server.close()
    assert out.status == "failed"
    assert "connection lost" in out.steps[0].summary
    row = svc.store.sync.steps(out.run_id)[0]
    assert row["status"] == "failed" and "working..." in row["output"]


async def test_a_host_behind_a_jump_host_is_reached_through_it(services, sshd, tmp_path):
    # The jump host and the target are the same loopback sshd: the target connection is
    # tunnelled through the jump connection (direct-tcpip), not opened from here.
    svc = await services({"bastion": sshd.host_config(), "inner": sshd.host_config(jump="bastion")})
    book = pb(tmp_path, "name: t\nsteps:\n  - skill: shell\n    with: {command: 'echo via $SSH_CONNECTION'}\n")
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["inner"]))
    assert out.status == "succeeded", out.error
    inner, bastion = svc.pool.get("inner"), svc.pool.get("bastion")
    assert bastion._conn is not None and inner._conn is not None and inner._conn is not bastion._conn
    # sshd saw the inner connection arrive from itself (the tunnel), on the sshd port
    assert out.steps[0].summary.startswith("via 127.0.0.1 ")
