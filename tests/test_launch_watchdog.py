"""server.launch's stall watchdog, its diagnostics and hints, against the SIMULATED SGLang
(real processes, really stopped); and the launch refused without an EAGLE3 draft path."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eaglebot.engine.runner import RunRequest
from eaglebot.facts.sglang import startup
from test_server_skills import FAST, Host, alive, one_step, open_svc


@pytest.fixture
def local_host(tmp_path):
    h = Host(tmp_path, tmp_path / "bin", "/usr/bin/python3" if Path("/usr/bin/python3").exists() else "python3")
    yield h
    h.stop()


def launch(h: Host, **extra):
    return one_step("server.launch", {"python": h.vars["python"], "model": str(h.target), "port": h.port,
                                      "spec_algorithm": "EAGLE3", "draft": str(h.draft), **extra})


async def test_a_server_stalled_in_cuda_graph_capture_fails_at_stall_s_with_diagnostics(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    env = dict(FAST, EAGLE_SIM_STALL_AT="cuda_graph")
    out = await svc.engine.run(RunRequest(playbook=launch(h, env=env, stall_s=2, ready_timeout_s=600),
                                          hosts=["gpu"]))
    step = out.steps[0]
    assert step.status == "failed"
    assert step.summary.startswith("the server stalled: no new log line and no healthy /health for 2s while "
                                   "capturing CUDA graphs; it was stopped; hint: the start-up stopped in CUDA "
                                   "graph capture: relaunch with --disable-cuda-graph")
    row = svc.store.sync.steps(out.run_id)[0]
    data = json.loads(row["data"])
    assert data["phase"] == "capturing CUDA graphs" and not alive(data["pid"])
    output = row["output"]
    print(output)
    assert "CUDA graph begin" in output                      # the log tail
    assert "== GPUs\nGPU 0: " in output and "MiB used, utilization" in output
    assert f"== server processes (session {data['pid']})" in output and "sglang::scheduler_TP0" in output
    assert "py-spy is not installed" in output or "py-spy dump --pid" in output
    assert not Path(f"{h.botstate}/run/server-{h.port}.pid").exists()


async def test_a_stall_in_nccl_init_suggests_p2p_off_and_nccl_debug(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    out = await svc.engine.run(RunRequest(playbook=launch(h, env=dict(FAST, EAGLE_SIM_STALL_AT="nccl"), stall_s=2,
                                                          ready_timeout_s=600), hosts=["gpu"]))
    step = out.steps[0]
    assert "while NCCL init (torch distributed)" in step.summary
    assert "NCCL_P2P_DISABLE=1" in step.summary and "NCCL_DEBUG=INFO" in step.summary


async def test_an_eagle3_launch_without_a_draft_path_is_refused_before_launching(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    pb = one_step("server.launch", {"python": h.vars["python"], "model": str(h.target), "port": h.port,
                                    "spec_algorithm": "eagle3", "env": FAST})
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"]))
    assert out.steps[0].status == "failed"
    assert out.steps[0].summary == ("EAGLE3 needs a draft model: set `draft` (host var draft) or pass "
                                    "--speculative-draft-model-path (refused before launching)")
    assert not (h.botstate / "logs").exists() or not list((h.botstate / "logs").iterdir())


def test_phases_follow_the_real_log_lines():
    log = ("[2026-11-30 04:44:58] server_args=ServerArgs(model_path='/m')\n"
           "[2026-11-30 04:45:00 TP0] Init torch distributed begin.\n")
    assert startup.phase("") == "launching (no SGLang log line yet)"
    assert startup.phase(log) == "NCCL init (torch distributed)"
    log += ("[2026-11-30 04:45:01 TP0] Init torch distributed ends. mem usage=0.00 GB\n"
            "[2026-11-30 04:45:02 TP0] Load weight begin. avail mem=139.21 GB\n")
    assert startup.phase(log) == "loading weights"
    assert "loading weights made no progress" in startup.hints(log, "loading weights", stalled=True)[0]


def test_oom_hints_say_which_way_to_move_mem_fraction_static():
    not_enough = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: 0.5"
    assert "INCREASE --mem-fraction-static" in startup.hints(not_enough, "loading weights", stalled=False)[0]
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert "DECREASE --mem-fraction-static" in startup.hints(oom, "capturing CUDA graphs", stalled=False)[0]


async def test_a_known_fatal_message_gets_its_hint_in_the_failed_step(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    env = dict(FAST, EAGLE_SIM_FAIL="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    out = await svc.engine.run(RunRequest(playbook=launch(h, env=env), hosts=["gpu"]))
    assert out.steps[0].status == "failed"
    assert "CUDA out of memory" in out.steps[0].summary
    assert "hint: CUDA ran out of memory outside the KV cache pool" in out.steps[0].summary


def test_the_relaunch_playbook_takes_stall_s_and_fails_a_stalled_launch_early(tmp_path, capsys):
    """`-e stall_s=2` reaches server.launch through the shipped relaunch playbook: a server
    stuck in CUDA-graph capture fails the run in one line instead of after ready_timeout_s."""
    import json

    from support.tuning_sandbox import FAST_ENV, HOST, sim_host

    from eaglebot.frontends.cli.main import main
    from eaglebot.store import Store

    with sim_host(tmp_path) as sb:
        env = json.dumps(dict(FAST_ENV, EAGLE_SIM_STALL_AT="cuda_graph"))
        rc = main(["--config", str(sb["cfg"]), "run", "relaunch", "-H", HOST, "--yes", "-e", "stall_s=2",
                   "-e", "bench_prompts=0", "-e", f"env={env}"])
        assert rc == 1, capsys.readouterr().err
        store = Store(sb["db"])
        [launch] = [s for s in store.steps(store.last_run_id() or 0) if s["name"] == "launch SGLang"]
        assert launch["status"] == "failed"
        assert launch["summary"].startswith("the server stalled: no new log line and no healthy /health for 2s")
        assert "capturing CUDA graphs" in launch["summary"] + (launch["output"] or "")
        store.close()
