"""Issue 41 items 1 and 2 over a real OpenSSH sshd, as a non-root login user with the default config
(`~/.eaglebot` on that user's home), against the SIMULATED GPUs and SGLang.

Plan, ask, then act: a GPU process the bot did not start is found before the first step that
changes the host and asked about in ONE approval that says what happens to the running server;
a deny or a timeout leaves that server serving. A launch that crashes after the stop says so in
the run's last line, and `eagle rollback` brings back the previous server from its audited launch
(the same arguments, the same draft config bytes). A measuring relaunch carries the running
server's flags.
"""
from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess

import pytest

from support.helpers import eagle
from test_server_skills import alive, get_health
from test_draft_gate import declare_training
from test_shipped_playbooks import FAST, open_home_host, run, step, why

from eaglebot.engine.runner import RunRequest
from eaglebot.facts.sglang.cmdline import launch_flags
from eaglebot.sim import gpu_state

SPEC = ["-e", "spec_steps=3", "-e", "spec_topk=1", "-e", "spec_draft_tokens=4", "-e", "bench_prompts=0"]


@pytest.fixture(scope="module")
def home_host(tmp_path_factory):
    with open_home_host(f"eagleask{os.getpid()}", "ask", tmp_path_factory) as host:
        yield host


def answers(port: int) -> bool:
    try:
        return get_health(port) == 200
    except OSError:   # nothing listens: connection refused
        return False


def server_pid(h) -> int:
    return int((h.home / ".eaglebot" / "run" / f"server-{h.port}.pid").read_text().split()[0])


def foreign_holder(h) -> subprocess.Popen:
    """A process of the same login user that the bot did not start (its own session), holding GPU 1."""
    p = subprocess.Popen(["sleep", "600"], user=h.pw.pw_uid, group=h.pw.pw_gid, start_new_session=True)
    gpu_state.add_holder(h.sim_state, p.pid, 1, 2048)
    return p


def approvals(cfg, run_id: int) -> list[tuple[str, str]]:
    db = sqlite3.connect(cfg.parent / "eagle.db")
    try:
        return db.execute("select action, status from approvals where run_id = ?", (run_id,)).fetchall()
    finally:
        db.close()


async def test_a_foreign_gpu_holder_is_asked_about_once_before_anything_stops(home_host, services):
    h = home_host
    h.reset()
    cfg = h.config()
    rc, doc = run(cfg, "relaunch", *SPEC, "-e", f"env={FAST}")
    assert rc == 0, why(doc)
    pid = server_pid(h)
    holder = foreign_holder(h)
    try:
        # denied (no terminal, no --yes): one approval, nothing touched, the server still answers
        rc, doc = run(cfg, "relaunch", *SPEC, "-e", f"env={FAST}")
        assert rc == 1, why(doc)
        plan = step(doc, "plan the relaunch")
        assert plan["status"] == "failed" and plan["summary"].startswith("not approved (nobody to ask: pass --yes"), plan
        assert f"nothing was touched; the server on port {h.port} (pid {pid}) still runs" in plan["summary"]
        assert [step(doc, n)["status"] for n in ("stop old server", "free the GPUs")] == ["skipped"] * 2
        [(action, status)] = approvals(cfg, doc["run_id"])
        assert status == "denied" and f"the server on port {h.port} (pid {pid}, up " in action, action
        assert f"will be stopped; 1 GPU process the bot did not start will be killed" in action and str(holder.pid) in action
        assert alive(pid) and get_health(h.port) == 200 and holder.poll() is None

        # unanswered: the same, decided by the timeout
        svc = await services({"gpu-01": h.sshd.host_config(shell="exec", vars=h_vars(h))},
                             access={"approval_timeout_s": 0.5, "approvers": ["*"]})

        async def never(_req):
            await asyncio.Event().wait()

        out = await svc.engine.run(RunRequest("relaunch", ["gpu-01"], spec_inputs()), approver=never)
        assert out.exit_code == 1
        bad = next(s for s in out.steps if s.status == "failed")
        assert bad.name == "plan the relaunch" and bad.summary.startswith("not approved (no decision within 0.5s)")
        assert [s.status for s in out.steps if s.name in ("stop old server", "free the GPUs")] == ["skipped"] * 2
        assert alive(pid) and get_health(h.port) == 200 and holder.poll() is None

        # approved: the relaunch completes; the holder approved in the plan is stopped without a second ask
        rc, doc = run(cfg, "relaunch", *SPEC, "-e", f"env={FAST}", "--yes")
        assert rc == 0, why(doc)
        assert [status for _, status in approvals(cfg, doc["run_id"])] == ["approved"]
        cleanup = step(doc, "free the GPUs")
        assert cleanup["status"] == "changed" and str(holder.pid) in cleanup["summary"], cleanup
        holder.wait(30)
        assert get_health(h.port) == 200 and server_pid(h) != pid
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    rc, doc = run(cfg, "stop")
    assert rc == 0, why(doc)


def h_vars(h) -> dict:
    return {"python": "~/bin/python", "model": "~/models/target", "draft": "~/models/draft", "port": h.port}


def spec_inputs() -> dict:
    return {"spec_steps": "3", "spec_topk": "1", "spec_draft_tokens": "4", "bench_prompts": "0", "env": FAST}


def test_a_crash_after_the_stop_is_named_last_and_rollback_brings_back_the_previous_server(home_host):
    h = home_host
    h.reset()
    cfg = h.config()
    draft_cfg = h.home / "models" / "draft" / "config.json"
    original = draft_cfg.read_bytes()
    rc, good = run(cfg, "relaunch", *SPEC, "-e", f"env={FAST}")
    assert rc == 0, why(good)
    launched = step(good, "launch SGLang")["data"]
    assert launched["draft_config_b64"] and launched["draft_config_sha256"]

    # a patched draft config and a launch that dies after the old server was stopped
    crash = json.dumps({**json.loads(FAST), "EAGLE_SIM_FAIL": "1"})
    res = eagle("run", "relaunch", "-H", "gpu-01", *SPEC, "-e", f"env={crash}", "-e", "aux_layers=-1,2,30",
                "-e", "draft_mismatch=allow", config=cfg, cwd=cfg.parent, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.endswith(f"no server is running on gpu-01:{h.port}; `eagle rollback gpu-01` relaunches run "
                         f"#{good['run_id']}'s server"), last
    assert not answers(h.port) and draft_cfg.read_bytes() != original

    # the rollback: the same arguments, env and draft config bytes as the good run's launch
    res = eagle("rollback", "gpu-01", "--json", config=cfg, cwd=cfg.parent, timeout=300)
    doc = json.loads(res.stdout)
    assert res.returncode == 0, why(doc)
    again = step(doc, "relaunch the previous server")["data"]
    # the same arguments (argparse reads them in any order: --host/--port are the launch's own parameters)
    assert launch_flags(again["launch_args"]) == launch_flags(launched["launch_args"])
    assert again["env"] == launched["env"] and again["effective"] == launched["effective"]
    assert draft_cfg.read_bytes() == original and again["draft_config_sha256"] == launched["draft_config_sha256"]
    assert step(doc, "restore the draft config's bytes")["status"] == "changed"
    assert get_health(h.port) == 200

    # on_failure: rollback does the same in the failed run itself, and its last line says so
    res = eagle("run", "relaunch", "-H", "gpu-01", *SPEC, "-e", f"env={crash}", "-e", "on_failure=rollback",
                config=cfg, cwd=cfg.parent, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.endswith(f"the previous server (run #{doc['run_id']}'s launch) was relaunched (on_failure: rollback) "
                         f"and answers /health on gpu-01:{h.port}"), last
    assert get_health(h.port) == 200
    rc, doc = run(cfg, "stop")
    assert rc == 0, why(doc)


RUNNING = ("--tp-size 2", "--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8")


def carries(command: str) -> bool:
    return all(flags in command for flags in RUNNING)


def launches(doc: dict) -> list[dict]:
    return [s["data"] for s in doc["steps"] if s["skill"] == "server.launch" and s["status"] == "changed"]


@pytest.mark.e2e   # a draft-repair and a tuning over the real sshd (~30 s, more on a loaded machine)
def test_draft_repair_and_tune_carry_the_running_servers_tp_and_spec_flags(home_host):
    h = home_host
    h.reset()
    declare_training(h.home, h.pw.pw_uid, h.pw.pw_gid)
    cfg = h.config()
    rc, doc = run(cfg, "relaunch", "-e", "tp=2", "-e", "gpus=0,1", "-e", "spec_steps=3", "-e", "spec_topk=4",
                  "-e", "spec_draft_tokens=8", "-e", "bench_prompts=0", "-e", f"env={FAST}")
    assert rc == 0, why(doc)
    rc, doc = run(cfg, "patch-config", "-e", "aux_layers=-1,2,30")
    assert rc == 0, why(doc)

    # the dry run's plan launches every attempt with the running server's flags
    res = eagle("run", "draft-repair", "-H", "gpu-01", "--dry-run", config=cfg, cwd=cfg.parent, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    starts = [ln for ln in res.stdout.splitlines() if ": launch: start " in ln]
    assert len(starts) == 6 and all(carries(ln) and "'CUDA_VISIBLE_DEVICES': '0,1'" in ln for ln in starts), \
        res.stdout

    # and so does the repair itself: every attempt, the "now" and the final launch
    rc, doc = run(cfg, "draft-repair", "--yes")
    assert rc in (0, 3), why(doc)
    check = step(doc, "check the launch")
    assert "carried from run #" in check["summary"] and "--tp-size 2" in check["summary"], check
    started = launches(doc)
    assert len(started) == 6 and all(carries(" ".join(d["launch_args"])) for d in started)
    assert all(d["env"]["CUDA_VISIBLE_DEVICES"] == "0,1" for d in started)

    # tune changes the speculative cell it tests, and carries tp and the GPUs
    res = eagle("tune", "relaunch", "-H", "gpu-01", "--batch-sizes", "1", "--steps", "2-3", "--topk", "1",
                "--repeats", "1", "--prompts", "4", "--output-len", "16", "--json", config=cfg, cwd=cfg.parent,
                timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    db = sqlite3.connect(cfg.parent / "eagle.db")
    try:
        rows = [json.loads(d) for (d,) in db.execute(
            "select s.data from steps s join runs r on r.id = s.run_id where s.skill = 'server.launch' and "
            "s.status = 'changed' and r.origin = 'cli' and r.id > ?", (doc["run_id"],))]
    finally:
        db.close()
    assert rows and all("--tp-size 2" in " ".join(d["launch_args"]) and d["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
                        for d in rows), rows
    steps_tried = {launch_flags(d["launch_args"])["--speculative-num-steps"] for d in rows}
    assert steps_tried == {"2", "3"}
    rc, doc = run(cfg, "stop")
    assert rc == 0, why(doc)
