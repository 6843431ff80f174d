"""gpu.processes, gpu.cleanup and gpu.verify on simulated GPUs held by REAL processes.

Over the local transport and over a real OpenSSH sshd on loopback; every run goes
through the engine, so the audit rows (steps, approvals, metrics) are checked too.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from eaglebot.engine.runner import RunRequest
from eaglebot.sim import gpu_state, install_sim_bin
from eaglebot.facts.host import procs
from support.gpu_helpers import PY, Sleepers, install_fuser, playbook, sim_host
from support.helpers import wait_for

CLEAN_AND_VERIFY = """
name: clean
steps:
  - skill: gpu.processes
    register: before
  - skill: gpu.cleanup
    confirm: true
    register: cleanup
    with: {grace_s: 0.5}
  - skill: gpu.verify
    with: {max_used_mib: 64, timeout_s: 20}
"""


def one_step(skill: str, with_: dict | None = None, confirm: bool = False) -> str:
    return json.dumps({"name": "one", "steps": [{"skill": skill, "confirm": confirm, "with": with_ or {}}]})


@pytest.fixture
def sleepers(tmp_path):
    s = Sleepers(tmp_path / "gpu-state")
    yield s
    s.stop_all()


async def run_local(services, tmp_path, pb_text: str, *, gpus: int = 1, residual=None, assume_yes=False,
                    dry_run=False, **vars_):
    host, state, bin_dir = sim_host(tmp_path, gpus, residual, **vars_)
    svc = await services({"gpu": host}, state_dir=str(tmp_path / "botstate"))
    return svc, state, bin_dir, host


def approvals(svc, run_id: int) -> list[dict]:
    return list(svc.store.sync.db.query("select * from approvals where run_id = $1", [run_id]))


# -- cleanup ----------------------------------------------------------------------------------

async def test_cleanup_over_ssh_escalates_to_sigkill_and_frees_every_gpu(services, sshd, remote_dir):
    state = remote_dir / "gpu-state"
    install_sim_bin(sshd.bin_dir, state, python=PY)        # first on the SSH user's PATH
    gpu_state.init_state(state, 2, residual_mib=[0, 4])
    s = Sleepers(state)
    try:
        plain = s.hold(0, 8148, user=sshd.user)
        stubborn = s.hold(1, 11964, user=sshd.user, ignore_term=True)
        both = s.hold([0, 1], 3380, user=sshd.user)
        svc = await services({"gpu": sshd.host_config()}, state_dir=str(remote_dir / "botstate"))
        out = await svc.engine.run(RunRequest(playbook=playbook(CLEAN_AND_VERIFY), hosts=["gpu"], assume_yes=True))
        assert out.status == "succeeded", [(st.name, st.status, st.summary) for st in out.steps]
        assert [st.status for st in out.steps] == ["ok", "changed", "ok"]
        rows = svc.store.sync.steps(out.run_id)
        before = json.loads(rows[0]["data"])
        assert sorted(before["pids"]) == sorted([plain, stubborn, both])
        assert {p["pid"]: p["gpus"] for p in before["processes"]}[both] == [0, 1]
        cleanup = json.loads(rows[1]["data"])
        assert sorted(cleanup["killed"]) == sorted([plain, stubborn, both]) and cleanup["survivors"] == []
        signals = {p["pid"]: p["signals"] for p in cleanup["processes"]}
        assert signals[stubborn] == ["SIGTERM", "SIGKILL"]
        assert signals[plain] == ["SIGTERM"]
        assert all(p["user"] == sshd.user and "sleep" in p["command"] for p in cleanup["processes"])
        assert f"pid {stubborn} ({sshd.user}) sleep 300: SIGTERM+SIGKILL -> gone" in rows[1]["output"]
        [appr] = approvals(svc, out.run_id)
        assert appr["status"] == "approved" and "--yes" in appr["decided_by"]
        details = json.loads(appr["details"])
        assert len(details) == 3 and any(f"pid {both} user {sshd.user} GPU 0,1 6760 MiB" in d for d in details)
        verify = json.loads(rows[2]["data"])
        assert verify["memory"] == {"0": 0, "1": 4}
        assert [m["name"] for m in svc.store.sync.metrics(out.run_id)] == ["gpu_free_s"]
        assert not any(Sleepers.alive(p) for p in (plain, stubborn, both))
    finally:
        s.stop_all()


async def test_cleanup_over_local_transport_kills_real_holders(services, tmp_path, sleepers):
    svc, state, _, _ = await run_local(services, tmp_path, CLEAN_AND_VERIFY, gpus=2)
    a = sleepers.hold(0, 1000)
    b = sleepers.hold([0, 1], 500, ignore_term=True)
    out = await svc.engine.run(RunRequest(playbook=playbook(CLEAN_AND_VERIFY), hosts=["gpu"], assume_yes=True))
    assert out.status == "succeeded", [(st.name, st.status, st.summary) for st in out.steps]
    cleanup = json.loads(svc.store.sync.steps(out.run_id)[1]["data"])
    assert sorted(cleanup["killed"]) == sorted([a, b])
    assert {p["pid"]: p["signals"] for p in cleanup["processes"]}[b] == ["SIGTERM", "SIGKILL"]
    assert "stopped 2 GPU processes" in out.steps[1].summary
    assert not sleepers.alive(a) and not sleepers.alive(b)


async def test_cleanup_denied_without_yes_kills_nothing(services, tmp_path, sleepers):
    svc, *_ = await run_local(services, tmp_path, "")
    pid = sleepers.hold(0, 4096)
    pb = playbook(one_step("gpu.cleanup", {"grace_s": 0.2}, confirm=True))
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"], assume_yes=False), approver=None)
    assert out.status == "failed" and out.exit_code == 1
    [step] = out.steps
    assert step.status == "failed"
    assert "not approved (nobody to ask: pass --yes to approve): nothing was killed" in step.summary
    assert sleepers.alive(pid)
    [appr] = approvals(svc, out.run_id)
    assert appr["status"] == "denied"
    assert str(pid) in appr["details"] and "4096 MiB" in appr["details"]


async def test_cleanup_approver_saying_no_is_reported_with_who(services, tmp_path, sleepers):
    svc, *_ = await run_local(services, tmp_path, "")
    pid = sleepers.hold(0, 4096)
    seen = []

    async def approver(req):
        seen.append(req)
        return False, "U01ABC said no"

    pb = playbook(one_step("gpu.cleanup", {"grace_s": 0.2}, confirm=True))
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"]), approver=approver)
    assert "U01ABC said no" in out.steps[0].summary and out.steps[0].status == "failed"
    assert seen[0].action.startswith("kill 1 GPU process the bot did not start")
    assert sleepers.alive(pid)


async def test_cleanup_asks_only_about_a_holder_the_earlier_approval_does_not_cover(services, tmp_path, sleepers):
    """server.plan's `approved` (pid:starttime) covers what was asked about before the relaunch; a
    holder that appeared since is asked about, and a no kills nothing, the approved one included."""
    svc, *_ = await run_local(services, tmp_path, "")
    old, new = sleepers.hold(0, 4096), sleepers.hold(0, 1024)
    approved = [f"{old}:{gpu_state.proc_stat(old)[1]}"]
    seen = []

    async def approver(req):
        seen.append(req)
        return False, "U01ABC said no"

    pb = playbook(one_step("gpu.cleanup", {"grace_s": 0.2, "approved": approved}, confirm=True))
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"]), approver=approver)
    assert out.steps[0].status == "failed" and len(seen) == 1
    assert len(seen[0].details) == 1 and f"pid {new} " in seen[0].details[0]
    assert "(not in the set approved earlier in this run)" in seen[0].action
    assert sleepers.alive(old) and sleepers.alive(new)

    # only the approved holder left: stopped with no second ask (nobody to ask, no --yes)
    gpu_state.remove_holder(sleepers.state_dir, new)
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"]))
    assert out.steps[0].status == "changed" and approvals(svc, out.run_id) == [], out.steps[0].summary
    assert not sleepers.alive(old) and sleepers.alive(new)


async def test_cleanup_kills_the_bots_own_processes_without_asking(services, tmp_path, sleepers):
    svc, *_ = await run_local(services, tmp_path, "")
    pid = sleepers.hold(0, 2048, pid_file=tmp_path / "botstate" / "run" / "sglang-30000.pid")
    pb = playbook(one_step("gpu.cleanup", {"grace_s": 2}, confirm=True))
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"], assume_yes=False))
    assert out.status == "succeeded", out.steps[0].summary
    assert out.steps[0].status == "changed"
    assert approvals(svc, out.run_id) == []
    data = json.loads(svc.store.sync.steps(out.run_id)[0]["data"])
    assert data["killed"] == [pid] and data["processes"][0]["ours"] is True
    assert not sleepers.alive(pid)


LAUNCHED_FAMILY = """
sleep 300 & echo scheduler $!
{py} -c 'import os, time; os.setsid(); time.sleep(300)' & echo left $!
wait
"""


async def test_cleanup_counts_the_launched_sessions_children_as_ours_but_not_one_that_called_setsid(
        services, tmp_path):
    svc, state, *_ = await run_local(services, tmp_path, "")
    leader = subprocess.Popen(["sh", "-c", LAUNCHED_FAMILY.format(py=PY)], start_new_session=True,
                              stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    kids = dict((w, int(p)) for w, p in (leader.stdout.readline().split() for _ in range(2)))
    try:
        pid_file = tmp_path / "botstate" / "run" / "server-30000.pid"
        pid_file.parent.mkdir(parents=True)
        pid_file.write_text(f"{leader.pid}\n")     # as spawn_detached records a launch
        wait_for(lambda: procs.parse_stat(open(f"/proc/{kids['left']}/stat").read()).session == kids["left"],
                 what="the child's setsid")
        gpu_state.add_holder(state, kids["scheduler"], 0, 30000)
        gpu_state.add_holder(state, kids["left"], 0, 2000)
        seen = []

        async def approver(req):
            seen.append(req)
            return True, "U01ABC"

        pb = playbook(one_step("gpu.cleanup", {"grace_s": 2}, confirm=True))
        out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"]), approver=approver)
        assert out.steps[0].status == "changed", out.steps[0].summary
        [req] = seen
        assert req.action.startswith("kill 1 GPU process the bot did not start")
        assert len(req.details) == 1 and req.details[0].startswith(f"pid {kids['left']} ")
        data = json.loads(svc.store.sync.steps(out.run_id)[0]["data"])
        assert {p["pid"]: p["ours"] for p in data["processes"]} == {kids["scheduler"]: True, kids["left"]: False}
        assert sorted(data["killed"]) == sorted(kids.values())
    finally:
        for pid in (*kids.values(), leader.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        leader.wait()


async def test_cleanup_filters_by_command_line_and_user(services, tmp_path, sleepers):
    svc, *_ = await run_local(services, tmp_path, "")
    keep = sleepers.hold(0, 100, seconds=301)
    kill = sleepers.hold(0, 100, seconds=302)
    pb = playbook(one_step("gpu.cleanup", {"grace_s": 1, "match": r"sleep 30[2]", "user": "root"}))
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"]))
    assert out.steps[0].status == "changed", out.steps[0].summary
    assert sleepers.alive(keep) and not sleepers.alive(kill)
    pb = playbook(one_step("gpu.cleanup", {"user": "nobody-here"}))
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"]))
    assert out.steps[0].status == "ok" and out.steps[0].summary == "no GPU processes matching the filters"
    assert sleepers.alive(keep)


async def test_cleanup_dry_run_lists_and_kills_nothing(services, tmp_path, sleepers):
    svc, *_ = await run_local(services, tmp_path, "")
    pid = sleepers.hold(0, 100)
    pb = playbook(one_step("gpu.cleanup", {}, confirm=True))
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"], dry_run=True))
    assert out.steps[0].status == "skipped"
    assert f"would stop 1 GPU process (1 not started by the bot): {pid}" in out.steps[0].summary
    assert any(str(pid) in p and "FOREIGN" in p for p in out.plan)
    assert sleepers.alive(pid)


async def test_cleanup_with_nothing_to_do_is_ok(services, tmp_path):
    svc, *_ = await run_local(services, tmp_path, "", residual=[3])
    out = await svc.engine.run(RunRequest(playbook=playbook(one_step("gpu.cleanup", {}, True)), hosts=["gpu"]))
    assert (out.steps[0].status, out.steps[0].summary) == ("ok", "no GPU processes")


async def test_cleanup_selects_gpus(services, tmp_path, sleepers):
    svc, *_ = await run_local(services, tmp_path, "", gpus=2)
    on0 = sleepers.hold(0, 100)
    on1 = sleepers.hold(1, 100)
    out = await svc.engine.run(RunRequest(playbook=playbook(one_step("gpu.cleanup", {"gpus": "1", "grace_s": 1})),
                                          hosts=["gpu"]))
    assert out.steps[0].status == "changed"
    assert sleepers.alive(on0) and not sleepers.alive(on1)
    out = await svc.engine.run(RunRequest(playbook=playbook(one_step("gpu.cleanup", {"gpus": [0, 5]})),
                                          hosts=["gpu"]))
    assert out.steps[0].status == "failed"
    assert out.steps[0].summary == "GPU 5 does not exist on gpu (GPUs: 0, 1)"


# -- processes: containers, fuser, unexplained memory ---------------------------------------

async def test_processes_falls_back_to_fuser_when_nvidia_smi_names_nobody(services, tmp_path, sleepers):
    host, state, bin_dir = sim_host(tmp_path, 1)
    host["vars"]["fuser"] = install_fuser(bin_dir, state)
    svc = await services({"gpu": host}, state_dir=str(tmp_path / "botstate"))
    pid = sleepers.hold(0, 19592, hidden=True)          # as inside a container: no PID from nvidia-smi
    out = await svc.engine.run(RunRequest(playbook=playbook(CLEAN_AND_VERIFY), hosts=["gpu"], assume_yes=True))
    assert out.status == "succeeded", [(st.name, st.status, st.summary) for st in out.steps]
    assert "(found by fuser)" in out.steps[0].summary and str(pid) in out.steps[0].summary
    rows = svc.store.sync.steps(out.run_id)
    assert json.loads(rows[0]["data"])["via_fuser"] is True
    assert "fuser -v /dev/nvidia* found pid" in rows[0]["output"]
    assert json.loads(rows[1]["data"])["killed"] == [pid]
    assert not sleepers.alive(pid)


async def test_processes_reports_memory_that_nothing_explains(services, tmp_path):
    host, state, bin_dir = sim_host(tmp_path, 2, residual=[5000, 4])
    host["vars"]["fuser"] = install_fuser(bin_dir, state)
    svc = await services({"gpu": host})
    out = await svc.engine.run(RunRequest(playbook=playbook(one_step("gpu.processes")), hosts=["gpu"]))
    step = out.steps[0]
    assert step.status == "ok"
    assert step.summary == "no GPU processes; GPU 0 5000 MiB used with no process to explain it"
    assert any("GPU 0: 5000 MiB used but neither nvidia-smi nor fuser names a process" in w for w in out.warnings)


async def test_expected_gpus_catches_a_gpu_that_disappeared(services, tmp_path):
    svc, *_ = await run_local(services, tmp_path, "", gpus=1, expected_gpus=2)
    for skill in ("gpu.processes", "gpu.cleanup", "gpu.verify"):
        out = await svc.engine.run(RunRequest(playbook=playbook(one_step(skill)), hosts=["gpu"]))
        assert out.steps[0].status == "failed"
        assert out.steps[0].summary.startswith("gpu: expected 2 GPUs but nvidia-smi sees 1 (0)")


# -- failures of nvidia-smi itself ------------------------------------------------------------

async def test_missing_nvidia_smi_over_ssh_is_one_clear_sentence(services, sshd):
    svc = await services({"gpu": sshd.host_config(vars={"nvidia_smi": "/opt/nowhere/nvidia-smi"})})
    for skill in ("gpu.processes", "gpu.cleanup", "gpu.verify"):
        out = await svc.engine.run(RunRequest(playbook=playbook(one_step(skill)), hosts=["gpu"]))
        step = out.steps[0]
        assert step.status == "failed"
        assert step.summary.startswith("nvidia-smi not found on gpu (/opt/nowhere/nvidia-smi)")
        assert "Traceback" not in (svc.store.sync.steps(out.run_id)[0]["output"] or "")


@pytest.mark.parametrize("code,needle", [(9, "the NVIDIA driver is not loaded"), (15, "a GPU has fallen off the bus")])
async def test_nvidia_smi_exit_codes_fail_the_step_clearly(services, tmp_path, code, needle):
    svc, state, *_ = await run_local(services, tmp_path, "")
    gpu_state.set_exit_code(state, code)
    out = await svc.engine.run(RunRequest(playbook=playbook(one_step("gpu.verify")), hosts=["gpu"]))
    assert out.steps[0].status == "failed"
    assert out.steps[0].summary == f"GPU check failed on gpu: {needle}" + (
        " (nvidia-smi exit 9)" if code == 9 else " (nvidia-smi exit 15); the node needs attention")


# -- verify ----------------------------------------------------------------------------------

async def test_verify_timeout_lists_the_processes_still_holding_memory(services, tmp_path, sleepers):
    svc, *_ = await run_local(services, tmp_path, "", gpus=2)
    pid = sleepers.hold(1, 19592)
    pb = playbook(one_step("gpu.verify", {"timeout_s": 0.3, "max_used_mib": 64}))
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"]))
    step = out.steps[0]
    assert step.status == "failed"
    assert step.summary.startswith("GPU 1 uses 19592 MiB (limit 64 MiB) after")
    assert f"still held by pid {pid} user root GPU 1 19592 MiB: sleep 300" in step.summary
    assert sleepers.alive(pid)


async def test_verify_waits_for_a_holder_that_exits(services, tmp_path, sleepers):
    svc, *_ = await run_local(services, tmp_path, "")
    sleepers.hold(0, 5000, seconds=1)
    out = await svc.engine.run(RunRequest(playbook=playbook(one_step("gpu.verify", {"timeout_s": 30})),
                                          hosts=["gpu"]))
    assert out.steps[0].status == "ok", out.steps[0].summary
    assert out.steps[0].summary.startswith("1 GPU free (<= 64 MiB) after")
    [m] = out.metrics
    assert m[1].name == "gpu_free_s" and m[1].better == "lower"


async def test_verify_tolerates_residual_mib_but_not_more(services, tmp_path):
    svc, state, *_ = await run_local(services, tmp_path, "", gpus=2, residual=[0, 4])
    out = await svc.engine.run(RunRequest(playbook=playbook(one_step("gpu.verify")), hosts=["gpu"]))
    assert out.steps[0].status == "ok" and "GPU 0 0 MiB, GPU 1 4 MiB" in out.steps[0].summary
    gpu_state.set_residual(state, 0, 4343)
    pb = playbook(one_step("gpu.verify", {"timeout_s": 0.2, "gpus": "0,1"}))
    out = await svc.engine.run(RunRequest(playbook=pb, hosts=["gpu"]))
    assert out.steps[0].status == "failed"
    assert "GPU 0 uses 4343 MiB" in out.steps[0].summary and "no process found holding it" in out.steps[0].summary
    out = await svc.engine.run(RunRequest(playbook=playbook(one_step("gpu.verify", {"gpus": [1]})), hosts=["gpu"]))
    assert out.steps[0].status == "ok"


async def test_verify_cuda_smoke_without_torch_is_a_clear_failure(services, tmp_path):
    svc, *_ = await run_local(services, tmp_path, "", python=PY)
    out = await svc.engine.run(RunRequest(playbook=playbook(one_step("gpu.verify", {"cuda_smoke": True})),
                                          hosts=["gpu"]))
    step = out.steps[0]
    assert step.status == "failed"
    assert step.summary.startswith(f"CUDA smoke test failed on gpu: PyTorch is not installed for {PY}")


async def test_verify_cuda_smoke_with_missing_python(services, tmp_path):
    svc, *_ = await run_local(services, tmp_path, "", python="/opt/nowhere/python3")
    out = await svc.engine.run(RunRequest(playbook=playbook(one_step("gpu.verify", {"cuda_smoke": True})),
                                          hosts=["gpu"]))
    assert out.steps[0].summary == ("CUDA smoke test failed on gpu: /opt/nowhere/python3 not found "
                                    "(set the host var python)")


def test_invalid_gpu_selection_is_caught_when_the_playbook_is_loaded():
    from eaglebot.errors import UsageError

    with pytest.raises(UsageError, match=r"steps\[0\]\.with\.gpus: value error, GPU index 'x' is not a number"):
        playbook(one_step("gpu.verify", {"gpus": "0,x"}))


async def test_match_sees_the_end_of_a_long_command_line(tmp_path):
    """Filters match the whole command line, not its first few hundred bytes."""
    import subprocess
    import sys

    from eaglebot.facts.host.procs import proc_info
    from eaglebot.transport import LocalTransport

    code = "import time\n" + "# filler\n" * 200 + "time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code, "the-tag-at-the-end"], start_new_session=True)
    try:
        info = await proc_info(LocalTransport(), [p.pid])
        assert info[p.pid].cmdline.rstrip().endswith("the-tag-at-the-end")
    finally:
        p.kill()
        p.wait()
