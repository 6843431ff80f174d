"""One run cannot steer another, nor forge a status (issue 17, item 1).

The attacks are the ones reproduced against the landed tree, run through the real `eagle`
CLI, `eagle console`, and `eagle serve` with two Slack users, on the host `local` and over a
real OpenSSH sshd (as a non-root user):
- a step writes commands into its shell's stdin (`/proc/$PPID/fd/0`), redefining
  `wait` so that a later `exit 5` would read as success;
- a step leaves a background job behind that prints into the next step, or holds the
  step's output open (`sleep 311 &`);
- a step stops its own shell (`kill -STOP $PPID`).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import aiohttp
import pytest
import yaml

from support.helpers import eagle, pid_alive, wait_for
from support.slack_harness import SECRET, command_body, signed_headers
from support.sshd import free_port
from test_serve import start_serve, stop, wait_serving

INJECT = {"name": "inject", "steps": [{"skill": "shell", "with": {"command": (
    "printf 'export INJECTED=yes; cd /; wait() { builtin wait \"$@\"; return 0; }\\n' > /proc/$PPID/fd/0; "
    "echo sent")}}]}
FAILER = {"name": "failer", "steps": [{"skill": "shell", "with": {
    "command": "echo I=${INJECTED:-none} pwd=$(pwd); exit 5"}}]}


def _setup(tmp_path: Path, sshd, playbooks: dict, **extra) -> Path:
    pdir = tmp_path / "playbooks"
    pdir.mkdir(exist_ok=True)
    for name, pb in playbooks.items():
        (pdir / f"{name}.yaml").write_text(yaml.safe_dump(pb, sort_keys=False))
    cfg = {"audit_db": "eagle.db", "playbooks_dir": "playbooks",
           "hosts": {"local": {"transport": "local"},
                     "box": sshd.host_config()}, **extra}
    path = tmp_path / "eagle.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _show(cfg: Path, run_id: int) -> dict:
    res = eagle("show", str(run_id), "--json", config=cfg)
    assert res.returncode in (0, 1, 3), res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("host", ["local", pytest.param("box", marks=pytest.mark.e2e)])  # box: .ci/run's e2e step
def test_a_step_cannot_steer_the_next_run_through_the_shells_stdin(tmp_path, sshd, host):
    cfg = _setup(tmp_path, sshd, {"inject": INJECT, "failer": FAILER})
    res = eagle("console", config=cfg, stdin=f"inject {host}\nfailer {host}\n")
    assert "Traceback" not in res.stderr
    second = _show(cfg, 2)
    assert second["status"] == "failed", second
    step = second["steps"][0]
    assert step["status"] == "failed" and "exit status 5" in step["summary"]
    assert "I=none" in step["summary"] and "pwd=/ " not in step["summary"] + " "


@pytest.mark.parametrize("host", ["local", pytest.param("box", marks=pytest.mark.e2e)])  # box: .ci/run's e2e step
def test_a_step_cannot_forge_its_own_status_by_steering_its_shell(tmp_path, sshd, host):
    """Within one run: the injection and the failing command are two steps of one run."""
    pb = {"name": "both", "steps": INJECT["steps"] + FAILER["steps"]}
    cfg = _setup(tmp_path, sshd, {"both": pb})
    res = eagle("run", "both", "-H", host, "--json", config=cfg)
    assert res.returncode == 1, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["steps"][1]["status"] == "failed" and "I=none" in out["steps"][1]["summary"]


LEAK = {"name": "leak", "steps": [
    # the job is started by a later step than the run's first
    {"name": "opens the shell", "skill": "shell", "with": {"command": "echo zero"}},
    {"name": "starts a job", "skill": "shell",
     "with": {"command": "(setsid sh -c 'sleep 1; echo LEAKED' &); sleep 0.3; echo first"}},
    {"name": "next", "skill": "shell", "with": {"command": "sleep 1.5; echo second"}},
    {"name": "holds output", "skill": "shell", "timeout_s": 20,
     "with": {"command": "sleep 311 & echo $! > {{ pidfile }}; echo bg"}},
], "inputs": {"pidfile": {"type": "str"}}}


@pytest.mark.parametrize("host", [pytest.param("local", marks=pytest.mark.e2e), "box"])  # local: .ci/run's e2e step
def test_a_background_job_ends_with_its_step_and_never_writes_into_the_next(tmp_path, sshd, host,
                                                                            remote_dir):
    cfg = _setup(tmp_path, sshd, {"leak": LEAK})
    pidfile = remote_dir / "bg.pid"
    t0 = time.monotonic()
    res = eagle("run", "leak", "-H", host, "-e", f"pidfile={pidfile}", "--json", config=cfg)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert [s["status"] for s in out["steps"]] == ["changed"] * 4
    # the job started by step 1 was stopped at its end and said so; step 2 holds only its own output
    assert any("left" in w and "stopped at the end of the step" in w for w in out["warnings"]), out["warnings"]
    db_out = eagle("show", str(out["run_id"]), config=cfg).stdout
    assert "LEAKED" not in db_out
    # `sleep 311 &` does not hold its step until it exits (exec mode waited for it before): the step
    # ends long before the job would (a bound on the job, not on this machine's speed)
    assert out["steps"][0]["duration_ms"] < 300_000 and took < 300
    pid = int(pidfile.read_text())
    wait_for(lambda: not pid_alive(pid), 120, what="the background sleep to be stopped")


@pytest.mark.parametrize("host", ["local", "box"])
def test_a_stopped_shell_fails_the_step_within_its_timeout_and_is_killed(tmp_path, sshd, host,
                                                                         remote_dir):
    pidfile = remote_dir / "shell.pid"
    # over SSH: the sshd process that serves the connection (stopping it wedges every channel);
    # on `local`: the command's own shell (its parent there is the bot itself, which a `local`
    # step can always reach)
    target = "$PPID" if host == "box" else "$$"
    pb = {"name": "stop", "steps": [{"name": "stops its shell", "skill": "shell", "timeout_s": 3,
                                     "with": {"command": f"echo {target} > {pidfile}; kill -STOP {target}; sleep 30"}},
                                    {"name": "after", "skill": "shell", "with": {"command": "echo after"}}]}
    cfg = _setup(tmp_path, sshd, {"stop": pb})
    res = eagle("run", "stop", "-H", host, "--json", config=cfg)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "Task exception" not in res.stderr
    out = json.loads(res.stdout)
    first = out["steps"][0]
    assert first["status"] == "failed" and "timed out after 3s" in first["summary"]
    assert first["duration_ms"] < 30_000, first  # ended by its 3 s timeout, not by the `sleep 30`
    assert len(first["summary"].splitlines()) == 1
    assert out["steps"][1]["status"] == "skipped" or len(out["steps"]) == 1
    stopped = int(pidfile.read_text())
    wait_for(lambda: not pid_alive(stopped), 120, what="the stopped shell to be killed")


async def test_two_slack_users_one_cannot_forge_the_others_run(tmp_path, sshd, fake):
    cfg = _setup(tmp_path, sshd, {"inject": INJECT, "failer": FAILER},
                 access={"operators": ["UALICE", "UBOB"], "viewers": ["*"], "approvers": ["UALICE"]})
    port = free_port()
    proc = await start_serve(cfg, fake, "--http", str(port), SLACK_SIGNING_SECRET=SECRET)
    try:
        await wait_serving(port, proc)
        async with aiohttp.ClientSession() as s:
            for i, (user, text) in enumerate((("UALICE", "inject local"), ("UBOB", "failer local")), 1):
                body = command_body(text, user=user, response_url=fake.response_url(f"r{i}"))
                async with s.post(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                                  headers=signed_headers(body)) as r:
                    assert r.status == 200
                await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.postMessage")
                                             if f"#{i}" in c.all_text() and "finished" in c.all_text()], timeout=30)
    finally:
        rc, err = await stop(proc)
    assert rc == 0, err
    second = _show(cfg, 2)
    assert second["status"] == "failed"
    assert "I=none" in second["steps"][0]["summary"]
