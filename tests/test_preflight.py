"""The launch pre-flight never takes a server down for nothing (issue 34): over a real OpenSSH sshd, a
running SIMULATED SGLang server, then each refusal `relaunch` must make in its first step, before
`server.stop`: exit 2, one sentence, and the server that was running still answering (/health 200,
same pid). And `bind`: where the relaunched server listens, and the bot's own probes reach it there."""
from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from eaglebot.engine.runner import RunRequest
from eaglebot.sim import gpu_state
from support.sshd import chown_to
from test_server_skills import FAST, PY, Host, alive, failed_step, free_port, listener_script, wait_listening


@pytest.fixture
def gpu_host(sshd, remote_dir):
    h = Host(remote_dir, sshd.bin_dir, PY, ssh=sshd.host_config())
    gpu_state.init_state(h.state, 2)
    chown_to(remote_dir)
    yield h
    h.stop()


def health(port: int, address: str = "127.0.0.1") -> int:
    import urllib.error
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{address}:{port}/health", timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def why(out) -> list[tuple[str, str, str]]:
    return [(s.name, s.status, s.summary) for s in out.steps]


QUICK = {"bench_prompts": "0", "env": json.dumps(FAST)}


async def test_each_refusal_comes_before_server_stop_and_the_running_server_keeps_answering(services, gpu_host, sshd):
    h = gpu_host
    svc = await services({"gpu": h.config}, state_dir=str(h.botstate))
    first = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs=QUICK))
    assert first.exit_code == 0, why(first)
    rows = {r["name"]: r for r in svc.store.sync.steps(first.run_id)}
    pid = json.loads(rows["launch SGLang"]["data"])["pid"]
    assert rows["check the launch"]["summary"] == "launch arguments accepted by SGLang 0.5.23 (host); nothing started"
    assert f"port {h.port} is free" in rows["check the launch"]["output"]
    assert health(h.port) == 200

    def still_serving(out, summary_start: str) -> str:
        bad = failed_step(out)
        assert out.exit_code == 2 and bad.name == "check the launch", why(out)
        assert bad.summary.startswith(summary_start), bad.summary
        assert "refused before anything was stopped or started" in bad.summary, bad.summary
        assert all(s.status == "skipped" for s in out.steps if s.section == "steps" and s.idx > 0), why(out)
        assert alive(pid) and health(h.port) == 200
        assert Path(f"{h.botstate}/run/server-{h.port}.pid").read_text().split()[0] == str(pid)
        return bad.summary

    # a host Python that cannot import sglang (the issue's `pyton:` typo leaves the default python3)
    no_sglang = await services({"gpu": dict(h.config, vars=dict(h.config["vars"], python=PY))},
                               state_dir=str(h.botstate))
    out = await no_sglang.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs=QUICK))
    still_serving(out, f"the host's Python {PY} cannot import sglang: ModuleNotFoundError: No module named 'sglang'")

    # tp × dp against the GPUs given, and against the GPUs that exist
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={**QUICK, "tp": "4",
                                                                                    "gpus": "0,1"}))
    still_serving(out, "tp 4 needs 4 GPUs but gpus=0,1 gives 2: give it as many GPUs")
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={**QUICK, "tp": "4"}))
    still_serving(out, "tp 4 needs 4 GPUs but gpu has 2: ")
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
        **QUICK, "tp": "2", "extra_args": '["--dp-size", "2"]'}))
    still_serving(out, "tp 2 × dp 2 needs 4 GPUs but gpu has 2: ")
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={**QUICK, "gpus": "0,5"}))
    still_serving(out, "GPU 5 does not exist on gpu (nvidia-smi lists 0,1): fix `gpus`")

    # the port: a process the bot did not start listens there (the SSH user's own), then another user's
    other = free_port()
    mine = await svc.pool.get("gpu").spawn_detached(listener_script(other), log_path=str(h.root / "l.log"),
                                                    pid_path=str(h.root / "l.pid"))
    h.extra_pids.append(mine)
    wait_listening(other)
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={**QUICK, "port": str(other)}))
    said = still_serving(out, f"port {other} is held by pid {mine} ({sshd.user}) ")
    assert "which the bot did not start" in said and alive(mine)
    root_owned = free_port()
    p = subprocess.Popen(listener_script(root_owned), start_new_session=True)   # this test's user: not the SSH user
    try:
        wait_listening(root_owned)
        out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"],
                                              inputs={**QUICK, "port": str(root_owned)}))
        still_serving(out, f"port {root_owned} is held by a process this login user cannot see (another user's)")
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()

    # a bind the host cannot listen on (SGLang's parser takes any string): not one of its addresses,
    # a name that does not resolve there (issue 46 item 5)
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={**QUICK, "bind": "10.255.255.1"}))
    said = still_serving(out, "the bind address 10.255.255.1 is not an address of gpu, so SGLang could not listen")
    assert "set -e bind= to one of its addresses" in said
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"],
                                          inputs={**QUICK, "bind": "no-such-host.invalid"}))
    still_serving(out, "the bind address 'no-such-host.invalid' does not resolve on gpu")

    # --host in extra_args names the input that sets it
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
        **QUICK, "extra_args": '["--host", "0.0.0.0"]'}))
    said = still_serving(out, "pass the address as `-e bind=...` (or host var bind), not --host in extra_args")

    # and with nothing wrong, the same server is replaced: the pre-flight saw it was the bot's own
    again = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs=QUICK))
    assert again.exit_code == 0, why(again)
    check = next(r for r in svc.store.sync.steps(again.run_id) if r["name"] == "check the launch")
    assert f"port {h.port} is held by the server the bot launched (pid {pid})" in check["output"]
    assert not alive(pid) and health(h.port) == 200


def _listening(port: int) -> set[str]:
    from eaglebot.facts.host import ports
    text = Path("/proc/net/tcp").read_text() + Path("/proc/net/tcp6").read_text()
    return set(ports.parse_listening(text, port).values())


async def test_bind_sets_where_the_server_listens_and_the_probes_follow_it(services, gpu_host):
    h = gpu_host
    svc = await services({"gpu": h.config}, state_dir=str(h.botstate))
    bench = {"bench_prompts": "4", "bench_input_len": "32", "bench_output_len": "8", "env": json.dumps(FAST),
             "spec_steps": "3", "spec_topk": "1", "spec_draft_tokens": "4"}
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={**bench, "bind": "0.0.0.0"}))
    assert out.exit_code == 0, why(out)
    assert _listening(h.port) == {"0.0.0.0"} and health(h.port) == 200
    # every address, and no --api-key: SGLang's API has no authentication of its own
    assert any("bind 0.0.0.0 serves SGLang's API, which has no authentication without --api-key" in w
               for w in out.warnings), out.warnings
    launch = json.loads(next(r for r in svc.store.sync.steps(out.run_id) if r["name"] == "launch SGLang")["data"])
    assert launch["bind"] == "0.0.0.0" and launch["url"] == f"http://127.0.0.1:{h.port}"
    assert "--host" in launch["launch_args"] and launch["launch_args"][launch["launch_args"].index("--host") + 1] \
        == "0.0.0.0"

    keyed = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={
        **bench, "bind": "0.0.0.0", "extra_args": '["--api-key", "s3cret-test-key"]'}))
    assert keyed.exit_code == 0, why(keyed)
    assert not [w for w in keyed.warnings if "--api-key" in w], keyed.warnings

    # a specific address (a loopback one other than 127.0.0.1: it answers only there), as a host var:
    # the readiness poll, the draft probe and the benchmark all reach it at that address
    at = await services({"gpu": dict(h.config, vars=dict(h.config["vars"], bind="127.0.0.2"))},
                        state_dir=str(h.botstate))
    out = await at.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs=bench))
    assert out.exit_code == 0, why(out)
    assert [s.status for s in out.steps if s.skill in ("draft.probe", "bench.serving")] == ["ok", "ok"], why(out)
    assert _listening(h.port) == {"127.0.0.2"} and health(h.port, "127.0.0.2") == 200
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", h.port), timeout=10).close()
    launch = json.loads(next(r for r in at.store.sync.steps(out.run_id) if r["name"] == "launch SGLang")["data"])
    assert launch["url"] == f"http://127.0.0.2:{h.port}"
    bench_row = next(r for r in at.store.sync.steps(out.run_id) if r["skill"] == "bench.serving")
    assert f"--base-url http://127.0.0.2:{h.port}" in bench_row["output"]
    # a later `bench` finds the server where its socket listens, with no bind of its own
    later = await svc.engine.run(RunRequest(playbook="bench", hosts=["gpu"], inputs={
        "num_prompts": "4", "input_len": "32", "output_len": "8", "correctness_prompts": "2"}))
    assert later.exit_code == 0, why(later)

    # an address that is not one is refused before anything is stopped
    out = await svc.engine.run(RunRequest(playbook="relaunch", hosts=["gpu"], inputs={**bench, "bind": "0.0.0.0;id"}))
    assert out.exit_code == 2 and "is not an IP address or a host name" in failed_step(out).summary, why(out)
    assert health(h.port, "127.0.0.2") == 200
