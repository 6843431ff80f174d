"""server.stop / server.launch / bench.serving / bench.compare and the shipped playbooks,
end to end against the SIMULATED SGLang: over a real OpenSSH sshd, and locally."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eaglebot.frontends.cli.demo import _stop_everything
from eaglebot.engine.playbook import parse_playbook
from eaglebot.engine.runner import RunRequest
from eaglebot.sim import gpu_state, install_sim_bin
from support.sshd import chown_to, free_port
from test_sglang_sim import write_models

PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
FAST = {"EAGLE_SIM_LOAD_S": "0.05", "EAGLE_SIM_WARMUP_S": "0.05"}




def one_step(skill: str, with_: dict, confirm: bool = False):
    return parse_playbook(json.dumps({"name": "one", "steps": [{"skill": skill, "confirm": confirm,
                                                                 "with": with_}]}), "one.yaml")


def listener_script(port: int) -> list[str]:
    return [PY, "-c", "import socket,time;s=socket.socket();"
            "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
            f"s.bind(('127.0.0.1',{port}));s.listen();time.sleep(300)"]


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] not in "ZX"


def get_health(port: int) -> int:
    import urllib.error
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def failed_step(out):
    return next(s for s in out.steps if s.status == "failed")


class Host:
    def __init__(self, root: Path, bin_dir: Path, python: str, ssh: dict | None = None, version: str | None = None):
        self.root, self.state = root, root / "gpu-state"
        self.vars = install_sim_bin(bin_dir, self.state, python=python, version=version)
        gpu_state.init_state(self.state, 1)
        self.target, self.draft = write_models(root / "models")
        self.port = free_port()
        self.botstate = root / "botstate"
        host_vars = {"python": self.vars["python"], "nvidia_smi": self.vars["nvidia_smi"],
                     "model": str(self.target), "draft": str(self.draft), "port": self.port}
        self.config = dict(ssh, vars=host_vars) if ssh else {"transport": "local", "vars": host_vars}
        self.extra_pids: list[int] = []

    def stop(self) -> None:
        _stop_everything(self.botstate)
        for pid in self.extra_pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def ssh_host(sshd, remote_dir):
    h = Host(remote_dir, sshd.bin_dir, PY, ssh=sshd.host_config())
    chown_to(remote_dir)
    yield h
    h.stop()


@pytest.fixture
def local_host(tmp_path):
    h = Host(tmp_path, tmp_path / "bin", PY)
    yield h
    h.stop()


async def open_svc(services, h: Host):
    return await services({"gpu": h.config}, state_dir=str(h.botstate))


# -- over the real sshd -------------------------------------------------------------------

async def test_relaunch_over_ssh_patches_warns_benchmarks_and_revert_restores_the_bytes(services, ssh_host):
    h = ssh_host
    svc = await open_svc(services, h)
    draft_cfg = h.draft / "config.json"
    original = draft_cfg.read_bytes()
    # a capture list the draft was not trained on: the gate (draft.check) would refuse it, allowed here
    inputs = {"aux_layers": "[-1,2,30]", "spec_steps": "1", "spec_topk": "1", "spec_draft_tokens": "16",
              "bench_prompts": "16", "bench_input_len": "128", "bench_output_len": "64", "env": json.dumps(FAST),
              "draft_mismatch": "allow"}
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs=inputs))
    assert out.exit_code == 0, [(s.name, s.status, s.summary) for s in out.steps]
    assert [s.skill for s in out.steps if s.status != "skipped"] == [
        "server.launch", "draft.check", "server.plan", "server.stop", "gpu.cleanup", "gpu.verify", "config.patch", "pycache.clear",
        "server.launch", "draft.probe", "bench.serving", "audit.note"]
    assert out.steps[1].summary.startswith("mismatch (allowed by draft_mismatch=allow): the server will feed the "
                                           "draft the embedding and the outputs of layers 2 and 30")
    assert json.loads(draft_cfg.read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 2, 30]
    # predicted by the check and by the launch alike, said once (issue 34: it was printed four times)
    rewrite = "speculative_num_draft_tokens=16 will be silently changed to 2"
    assert [w for w in out.warnings if rewrite in w] == [f"gpu: {rewrite} by SGLang: speculative_num_draft_tokens is "
                                                         f"adjusted to speculative_num_steps + 1 when "
                                                         f"speculative_eagle_topk == 1 (speculative_num_steps=1); "
                                                         f"set it to 2 or use topk > 1"]
    assert len([w for w in svc.store.sync.warnings(out.run_id) if rewrite in w["message"]]) == 1
    assert out.steps[0].summary == "launch arguments accepted by SGLang 0.5.23 (host); nothing started"
    rows = {r["name"]: r for r in svc.store.sync.steps(out.run_id)}
    launch = json.loads(rows["launch SGLang"]["data"])
    checked = json.loads(rows["check the launch"]["data"])
    # nothing was launched by the check: it records no launch_args (the host's fingerprint reads those)
    assert checked["checked_by"] == "host" and "launch_args" not in checked and "effective" not in checked
    assert checked["checked_args"] == launch["launch_args"]
    assert launch["port"] == h.port and launch["sglang_version"] == "0.5.23"
    assert launch["log_path"] == f"{h.botstate}/logs/server-{h.port}-{out.run_id}.log"
    assert launch["effective"]["speculative_num_draft_tokens"] == 2
    assert launch["launch_args"][:2] == ["--model-path", str(h.target)] and "16" in launch["launch_args"]
    assert Path(f"{h.botstate}/run/server-{h.port}.pid").read_text().split()[0] == str(launch["pid"])
    assert "The server is fired up and ready to roll!" in Path(launch["log_path"]).read_text()
    metrics = {m["name"]: m for m in svc.store.sync.metrics(out.run_id)}
    assert metrics["output_throughput"]["unit"] == "tok/s" and metrics["output_throughput"]["better"] == "higher"
    assert metrics["median_ttft_ms"]["better"] == "lower" and metrics["completed"]["value"] == 16
    assert metrics["avg_spec_accept_length"]["value"] > 1

    # a launch argument SGLang's own parser refuses fails the run before anything is stopped: exit 2,
    # SGLang's words, and the server launched above keeps serving
    bad = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs=dict(
        inputs, extra_args='["--cuda-graph-bs","1","2","4"]')))
    assert bad.exit_code == 2, [(s.name, s.status, s.summary) for s in bad.steps]
    assert bad.steps[0].name == "check the launch" and bad.steps[0].status == "failed"
    assert ("ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill"
            in bad.steps[0].summary)
    after = [s.status for s in bad.steps if s.section == "steps"][1:]   # every step after the refused check
    assert after and set(after) == {"skipped"}
    assert alive(launch["pid"]) and get_health(h.port) == 200
    assert json.loads(draft_cfg.read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 2, 30]

    # `/eagle logs gpu` tails the log this launch recorded, over SSH
    from eaglebot.frontends.chat.caller import Caller
    from eaglebot.frontends.chat.router import handle

    logs = await handle(svc, "logs gpu 5000", Caller("U1", check_access=False))   # the whole log: the bench's lines follow
    assert f"== {launch['log_path']}" in logs.text and "The server is fired up and ready to roll!" in logs.text

    # a dry run plans every step and leaves the running server alone
    dry = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs=inputs, dry_run=True))
    assert dry.exit_code == 0, [(s.name, s.status, s.summary) for s in dry.steps]
    assert any("launch SGLang: start" in p for p in dry.plan) and alive(launch["pid"])

    # a fixed baseline far above what the patched config gives: regression, exit 3
    bench = await svc.engine.run(RunRequest(playbook="bench", hosts=["gpu"], inputs={
        "num_prompts": "8", "input_len": "64", "output_len": "32", "baseline_tok_s": "1e9"}))
    assert bench.exit_code == 3 and bench.status == "succeeded"
    [reg] = [r for r in bench.regressions if r.kind == "regression"]
    assert reg.metric == "output_throughput" and reg.reference == 1e9 and reg.delta_pct < -5
    assert "no earlier good run on gpu" in reg.reason   # the first bench run of this host
    assert svc.store.sync.regressions(bench.run_id)[0]["reason"] == reg.reason

    rev = await svc.engine.run(RunRequest(playbook="revert-config", hosts=["gpu"]))
    assert rev.exit_code == 0 and draft_cfg.read_bytes() == original

    stop = await svc.engine.run(RunRequest(playbook=one_step("server.stop", {"port": h.port, "grace_s": 5}),
                                           hosts=["gpu"]))
    assert stop.exit_code == 0 and stop.steps[0].status == "changed"
    assert not alive(launch["pid"]) and not Path(f"{h.botstate}/run/server-{h.port}.pid").exists()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as uvicorn does
        s.bind(("127.0.0.1", h.port))         # the port is free again


async def test_server_dying_at_startup_fails_the_step_with_its_log_tail(services, ssh_host):
    h = ssh_host
    svc = await open_svc(services, h)
    env = dict(FAST, EAGLE_SIM_FAIL="Capture cuda graph failed: CUDA error: out of memory")
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
        "env": json.dumps(env), "bench_prompts": "0"}))
    assert out.exit_code == 1
    bad = failed_step(out)
    assert bad.skill == "server.launch"
    assert "Capture cuda graph failed: CUDA error: out of memory" in bad.summary
    row = next(r for r in svc.store.sync.steps(out.run_id) if r["name"] == "launch SGLang")
    assert "Load weight begin" in row["output"] and "SIMULATED" in row["output"]
    assert out.steps[-1].skill == "audit.note" and out.steps[-1].status == "ok"
    assert not Path(f"{h.botstate}/run/server-{h.port}.pid").exists()


async def test_port_in_use_fails_before_launching_and_stop_refuses_without_approval(services, ssh_host, sshd):
    h = ssh_host
    svc = await open_svc(services, h)
    listener = await svc.pool.get("gpu").spawn_detached(
        listener_script(h.port), log_path=str(h.root / "listener.log"), pid_path=str(h.root / "listener.pid"))
    h.extra_pids.append(listener)
    wait_listening(h.port)
    launch = one_step("server.launch", {"python": h.vars["python"], "model": str(h.target), "port": h.port,
                                        "spec_algorithm": "EAGLE3", "draft": str(h.draft), "env": FAST})
    out = await svc.engine.run(RunRequest(playbook=launch, hosts=["gpu"]))
    assert out.exit_code == 1
    summary = out.steps[0].summary
    assert f"port {h.port} is already in use by pid {listener} ({sshd.user})" in summary
    assert not (h.botstate / "logs").exists() or not list((h.botstate / "logs").iterdir())

    # relaunch: its pre-flight names the listener the bot did not start, before server.stop is reached
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={"bench_prompts": "0"}))
    assert out.exit_code == 2
    bad = failed_step(out)
    assert bad.name == "check the launch" and bad.summary.startswith(
        f"port {h.port} is held by pid {listener} ({sshd.user}) ") and "which the bot did not start" in bad.summary
    assert [s.status for s in out.steps if s.skill == "server.stop"] == ["skipped"]
    assert alive(listener)
    # a server.stop of its own still asks before stopping it (and without a terminal, is denied)
    out = await svc.engine.run(RunRequest(playbook="stop", hosts=["gpu"]))
    bad = failed_step(out)
    assert out.exit_code == 1 and bad.skill == "server.stop" and "not approved" in bad.summary and "--yes" in bad.summary
    assert alive(listener)


# -- local transport ---------------------------------------------------------------------------

async def test_stop_refuses_a_foreign_listener_without_confirm_and_kills_it_when_approved(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    p = subprocess.Popen(listener_script(h.port), start_new_session=True)
    h.extra_pids.append(p.pid)
    try:
        wait_listening(h.port)
        out = await svc.engine.run(RunRequest(playbook=one_step("server.stop", {"port": h.port}), hosts=["gpu"]))
        assert out.exit_code == 1 and f"({p.pid})" in out.steps[0].summary
        assert "without approval" in out.steps[0].summary and p.poll() is None
        out = await svc.engine.run(RunRequest(playbook=one_step("server.stop", {"port": h.port, "grace_s": 2},
                                                                confirm=True), hosts=["gpu"], assume_yes=True))
        assert out.exit_code == 0 and out.steps[0].status == "changed", out.steps[0].summary
        assert p.wait(10) == -signal.SIGTERM
        out = await svc.engine.run(RunRequest(playbook=one_step("server.stop", {"port": h.port}), hosts=["gpu"]))
        assert out.steps[0].status == "ok" and "no server running" in out.steps[0].summary
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


async def test_spec_flags_sglang_would_die_on_are_refused_before_launching(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
        "spec_steps": "3", "bench_prompts": "0"}))
    bad = failed_step(out)
    assert bad.skill == "server.launch" and "TypeError" in bad.summary and "refused before launching" in bad.summary
    assert not (h.botstate / "run" / f"server-{h.port}.pid").exists()


def _post(port: int, path: str, body: dict) -> object:
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with opener.open(req, timeout=10) as r:
        return json.loads(r.read())


async def test_lossy_knobs_are_refused_before_the_stop_and_a_runtime_threshold_is_caught(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    # a healthy launch: speculation really on, read from /server_info and two greedy prompts
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
        "env": json.dumps(FAST), "bench_prompts": "0"}))
    assert out.exit_code == 0, out
    row = next(r for r in svc.store.sync.steps(out.run_id) if r["name"] == "launch SGLang")
    sp = json.loads(row["data"])["speculation"]
    assert sp["verdict"] == "on" and sp["steps"] == 5 and sum(sp["histogram"][1:]) > 0 and sp["accept_length"] > 1.05
    # a threshold lowered at runtime (/set_internal_state, open without an API key): the next bench refuses
    assert _post(h.port, "/set_internal_state", {"server_args": {"max_running_requests": 4}}) == [False]  # off the list
    assert _post(h.port, "/set_internal_state", {"server_args": {"speculative_accept_threshold_acc": 0.3}}) == [True]
    out = await svc.engine.run(RunRequest(playbook="bench", hosts=["gpu"], inputs={"num_prompts": "2"}))
    assert failed_step(out).summary == (
        f"the server on port {h.port} is not lossless: internal_states[0].speculative_accept_threshold_acc=0.3, "
        f"changed at runtime (POST /set_internal_state; below 1: accepts drafts the target rejected): a benchmark "
        f"would mean nothing; relaunch it without that")
    # lossy knobs in the launch: refused before anything stops (exit 2), naming the knob
    for inputs, knob in ((dict(env=json.dumps(dict(FAST, SGLANG_SIMULATE_ACC_LEN="3.5"))),
                          "SGLANG_SIMULATE_ACC_LEN=3.5 in the server's environment"),
                         (dict(extra_args='["--speculative-accept-threshold-single", "0.5"]'),
                          "--speculative-accept-threshold-single 0.5 (below 1")):
        out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs=inputs))
        bad = failed_step(out)
        assert out.exit_code == 2 and bad.name == "check the launch", out
        assert bad.summary.startswith(f"this launch is not lossless: {knob}")
        assert get_health(h.port) == 200            # the old server still serves
    # allowed explicitly, it launches; the benchmark still refuses a faked acceptance
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
        "env": json.dumps(dict(FAST, SGLANG_SIMULATE_ACC_LEN="3.5")), "bench_prompts": "4", "lossy": "allow"}))
    bad = failed_step(out)
    assert bad.skill == "bench.serving" and "SGLANG_SIMULATE_ACC_LEN=3.5" in bad.summary
    # no server at all: a clear sentence, no traceback
    await svc.engine.run(RunRequest(playbook=one_step("server.stop", {"port": h.port}), hosts=["gpu"]))
    out = await svc.engine.run(RunRequest(playbook="bench", hosts=["gpu"], inputs={"num_prompts": "2"}))
    assert out.exit_code == 1 and f"no ready server on port {h.port}" in failed_step(out).summary


async def test_stop_also_stops_children_that_outlived_the_server_leader(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    (h.botstate / "run").mkdir(parents=True)
    (h.botstate / "logs").mkdir(parents=True)
    leader = await svc.pool.get("gpu").spawn_detached(
        ["sh", "-c", "sleep 299 & exec sleep 300"], log_path=str(h.botstate / "logs" / "x.log"),
        pid_path=str(h.botstate / "run" / f"server-{h.port}.pid"))
    h.extra_pids.append(leader)
    deadline = time.monotonic() + 10
    orphan = None
    while orphan is None and time.monotonic() < deadline:
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) != leader:
                try:
                    st = (d / "stat").read_text()
                except OSError:
                    continue
                if int(st[st.rindex(")") + 2:].split()[3]) == leader:
                    orphan = int(d.name)
        time.sleep(0.05)
    assert orphan is not None
    os.kill(leader, signal.SIGKILL)
    out = await svc.engine.run(RunRequest(playbook=one_step("server.stop", {"port": h.port, "grace_s": 2}),
                                          hosts=["gpu"]))
    assert out.steps[0].status == "changed" and str(orphan) in out.steps[0].summary
    assert not alive(orphan) and not (h.botstate / "run" / f"server-{h.port}.pid").exists()


async def test_a_tilde_state_dir_gets_a_jsonl_the_host_expanded_and_a_missing_one_fails(services, ssh_host, sshd):
    """state_dir `~/...` as the example config has it: the benchmark's file lands in the SSH user's
    home and its whole record is read; a benchmark that printed its table but wrote no JSONL fails
    with its own last words unless the step allows the table (and then says so)."""
    import shutil
    h = ssh_host
    name = f".eaglebot-i19-{h.port}"
    h.botstate = sshd.home / name
    svc = await services({"gpu": h.config}, state_dir=f"~/{name}")
    try:
        out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
            "bench_prompts": "8", "bench_input_len": "64", "bench_output_len": "16", "env": json.dumps(FAST)}))
        assert out.exit_code == 0, [(s.name, s.status, s.summary) for s in out.steps]
        row = next(r for r in svc.store.sync.steps(out.run_id) if r["skill"] == "bench.serving")
        data = json.loads(row["data"])
        [path] = data["output_files"]
        assert data["source"] == "jsonl" and path.startswith(f"{sshd.home}/{name}/bench/")
        [record] = data["records"]
        on_disk = json.loads(Path(path).read_text().splitlines()[-1])
        # every key of the record is kept (server_info compared by keys: it holds NaN, which never equals itself)
        assert {k: v for k, v in record.items() if k != "server_info"} == \
            {k: v for k, v in on_disk.items() if k != "server_info"}
        assert set(record["server_info"]) == set(on_disk["server_info"])
        assert record["completed"] == 8 and {"p99_itl_ms", "std_ttft_ms", "server_info", "accept_length"} <= set(record)

        lost = {"python": h.vars["python"], "port": h.port, "num_prompts": 4, "input_len": 32, "output_len": 8,
                "extra_args": ["--output-file", "/nonexistent-i19/x.jsonl"]}   # argparse keeps the last one
        bad = await svc.engine.run(RunRequest(playbook=one_step("bench.serving", lost), hosts=["gpu"]))
        assert bad.exit_code == 1 and bad.steps[0].status == "failed"
        assert "gave no numbers: its JSONL file" in bad.steps[0].summary and "does not exist" in bad.steps[0].summary
        assert "FileNotFoundError" in bad.steps[0].summary
        assert not svc.store.sync.metrics(bad.run_id)
        table = await svc.engine.run(RunRequest(playbook=one_step("bench.serving", dict(lost, allow_table=True)),
                                                hosts=["gpu"]))
        assert table.exit_code == 0 and "numbers read from the printed table" in table.steps[0].summary
        row = next(r for r in svc.store.sync.steps(table.run_id) if r["skill"] == "bench.serving")
        assert json.loads(row["data"])["source"] == "table"
    finally:
        h.stop()
        shutil.rmtree(h.botstate, ignore_errors=True)


async def test_a_python_without_sglang_is_refused_and_no_table_stands_in_for_it(services, local_host):
    h = local_host
    svc = await open_svc(services, h)
    check = one_step("server.launch", {"check_only": True, "python": PY, "model": str(h.target), "port": h.port,
                                       "args": ["--cuda-graph-max-bs-decode", "64"]})      # PY: a Python without sglang
    out = await svc.engine.run(RunRequest(playbook=check, hosts=["gpu"]))
    assert out.exit_code == 2 and out.steps[0].status == "failed"
    assert out.steps[0].summary == (f"the host's Python {PY} cannot import sglang: ModuleNotFoundError: No module "
                                    f"named 'sglang'; set the host var `python` to the Python that has SGLang "
                                    f"(refused before anything was stopped or started)")
    gone = one_step("server.launch", {"check_only": True, "python": "/nonexistent/python3", "model": str(h.target),
                                      "port": h.port})
    out = await svc.engine.run(RunRequest(playbook=gone, hosts=["gpu"]))
    assert out.exit_code == 2 and out.steps[0].summary.startswith(
        "the host's Python /nonexistent/python3 cannot import sglang: ") and "not found" in out.steps[0].summary
    assert not (h.botstate / "run" / f"server-{h.port}.pid").exists()


async def test_relaunch_asks_the_hosts_parser_once_and_applies_the_rules_of_the_release_it_reports(services, tmp_path):
    h = Host(tmp_path, tmp_path / "bin", PY, version="0.5.17")
    try:
        svc = await open_svc(services, h)
        out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
            "spec_steps": "3", "spec_topk": "1", "spec_draft_tokens": "16", "bench_prompts": "0",
            "env": json.dumps(FAST)}))
        assert out.status == "succeeded", [(s.name, s.status, s.summary) for s in out.steps]
        rows = {r["name"]: r for r in svc.store.sync.steps(out.run_id)}
        check = json.loads(rows["check the launch"]["data"])
        assert check["checked_by"] == "host" and check["checked_version"] == "0.5.17"
        assert "launch arguments already accepted by SGLang 0.5.17's own parser earlier in this run: not parsed " \
               "again" in rows["launch SGLang"]["output"]
        launched = json.loads(rows["launch SGLang"]["data"])
        assert launched["sglang_version"] == "0.5.17" and launched["effective"]["speculative_num_draft_tokens"] == 4
        assert any("speculative_num_draft_tokens=16 will be silently changed to 4" in w for w in out.warnings)
        assert [w for w in out.warnings if "is running; eaglebot" in w] == []   # 0.5.17's rules are eaglebot's own
    finally:
        h.stop()


def _site_python(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    """A Python whose site has exactly these files (a package as a broken install leaves it)."""
    site = tmp_path / f"{name}-site"
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    python = tmp_path / f"{name}-python"
    python.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {PY} \"$@\"\n")
    python.chmod(0o755)
    return python


_META = {"sglang-0.5.17.dist-info/METADATA": "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.17\n"}


async def test_a_host_whose_sglang_does_not_import_is_refused_naming_the_release_installed_there(
        services, local_host, tmp_path):
    # sglang 0.5.17's metadata, and a package that fails to import (as with a torch or CUDA mismatch):
    # `python -m sglang.launch_server` would fail the same way, after the old server was stopped
    python = _site_python(tmp_path, "broken", {
        "sglang/__init__.py": "raise ImportError('libcudart.so.13: cannot open shared object')\n", **_META})
    h = local_host
    svc = await open_svc(services, h)
    check = one_step("server.launch", {"check_only": True, "python": str(python), "model": str(h.target),
                                       "port": h.port, "args": ["--cuda-graph-max-bs", "64"]})
    out = await svc.engine.run(RunRequest(playbook=check, hosts=["gpu"]))
    assert out.exit_code == 2 and out.steps[0].summary == (
        f"the host's Python {python} cannot import sglang: ImportError: libcudart.so.13: cannot open shared object "
        f"(sglang 0.5.17 is installed there but does not import); set the host var `python` to the Python that has "
        f"SGLang (refused before anything was stopped or started)"), out.steps[0].summary


async def test_where_sglang_imports_but_its_parser_cannot_be_built_the_table_of_its_release_checks_and_says_so(
        services, local_host, tmp_path):
    python = _site_python(tmp_path, "moved", {
        "sglang/__init__.py": "__version__ = '0.5.17'\n", "sglang/srt/__init__.py": "",
        "sglang/srt/server_args.py": "raise ImportError('cannot import name ServerArgs (moved)')\n", **_META})
    h = local_host
    svc = await open_svc(services, h)
    # 0.5.17 still has --cuda-graph-max-bs (a deprecated alias); 0.5.23's table would refuse it as ambiguous
    check = one_step("server.launch", {"check_only": True, "python": str(python), "model": str(h.target),
                                       "port": h.port, "args": ["--cuda-graph-max-bs", "64"]})
    out = await svc.engine.run(RunRequest(playbook=check, hosts=["gpu"]))
    assert out.exit_code == 0 and out.steps[0].summary == ("launch arguments accepted by SGLang 0.5.17 (table 0.5.17); "
                                                           "nothing started"), out.steps[0].summary
    assert out.warnings == ["gpu: launch arguments checked with the captured table of SGLang 0.5.17, not the host's "
                            "own parser: ImportError: cannot import name ServerArgs (moved)"]
    output = svc.store.sync.steps(out.run_id)[0]["output"]
    assert "could not be asked (ImportError: cannot import name ServerArgs (moved)); checking with the captured " \
           "table of SGLang 0.5.17" in output, output
    bad = one_step("server.launch", {"check_only": True, "python": str(python), "model": str(h.target),
                                     "port": h.port, "args": ["--no-such-flag", "1"]})
    out = await svc.engine.run(RunRequest(playbook=bad, hosts=["gpu"]))
    assert out.exit_code == 2 and out.steps[0].summary.startswith(
        "SGLang (table 0.5.17) refuses the launch arguments: launch_server.py: error: unrecognized arguments: "
        "--no-such-flag 1")
