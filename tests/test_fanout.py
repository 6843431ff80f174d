"""Fan-out for a fleet: many host names on one loopback sshd, the per-run and per-process
host caps, and progress a terminal can read for many hosts."""
from __future__ import annotations

import asyncio
import io

from support.helpers import write_playbook

from eaglebot.config import Settings
from eaglebot.engine.playbook import load_playbook
from eaglebot.engine.runner import RunRequest
from eaglebot.frontends.cli.terminal import TerminalObserver


def test_fleet_defaults():
    s = Settings()
    assert (s.max_parallel_hosts, s.max_hosts_total, s.max_connecting, s.max_connecting_per_jump) == (None, 1024, 64, 8)
    assert s.hosts["local"].shell == "exec"


async def test_many_hosts_share_one_sshd_with_a_line_per_host(services, sshd, remote_dir, tmp_path):
    hosts = {f"n{i:02d}": sshd.host_config() for i in range(12)}
    svc = await services(hosts, groups={"fleet": list(hosts)})
    log = remote_dir / "log"
    book = load_playbook(write_playbook(tmp_path, "t", f"""
        name: t
        steps:
          - skill: shell
            with: {{command: "echo {{{{ host }}}} >> {log}"}}
          - skill: shell
            with: {{command: "test {{{{ host }}}} != n07"}}
          - skill: audit.note
    """))
    stream = io.StringIO()
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["fleet"]), TerminalObserver(stream))
    assert out.status == "failed" and sorted(log.read_text().split()) == sorted(hosts)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith(f"run #{out.run_id}: t on 12 hosts (n00, n01, n02, …)")
    done = [ln for ln in lines if " done: " in ln]
    assert len(done) == 12
    assert "[n07] done: 1 changed, 1 failed, 1 not run" in done
    assert "[n03] done: 2 changed, 1 ok" in done
    assert f"run #{out.run_id}: 12/12 hosts done, 1 failed" in lines
    assert not [ln for ln in lines if "1/3 shell: changed" in ln]  # no line per step for a fleet


async def test_one_cap_across_all_runs_of_a_process(services, sshd, remote_dir, tmp_path):
    svc = await services({"a": sshd.host_config(), "b": sshd.host_config(), "c": sshd.host_config()},
                         max_hosts_total=1)
    log = remote_dir / "log"
    book = load_playbook(write_playbook(tmp_path, "t", f"""
        name: t
        steps:
          - skill: shell
            with: {{command: "echo start-{{{{ host }}}} >> {log}; sleep 0.2; echo end-{{{{ host }}}} >> {log}"}}
    """))
    outs = await asyncio.gather(*(svc.engine.run(RunRequest(playbook=book, hosts=[h])) for h in "abc"))
    assert [o.status for o in outs] == ["succeeded"] * 3
    events = log.read_text().split()
    # One host at a time across the three runs: every start is followed by its own end.
    assert len(events) == 6
    for i in range(0, 6, 2):
        assert events[i].startswith("start-") and events[i + 1] == "end-" + events[i][len("start-"):]
