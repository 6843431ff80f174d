"""Every shipped playbook, end to end, as a new user runs them: the real `eagle` CLI, a real OpenSSH
sshd on loopback, a NON-root login user with a real home directory, and an eagle.yaml that sets
nothing but the host (no `state_dir`, no `output_dir`: the bot's state lands in `~/.eaglebot`, a
path only the host can resolve). Host vars use `~` too (`python: ~/bin/python`, `model: ~/models/...`),
as a user's config would. Both shell modes; the SIMULATED GPU and SGLang (src/eaglebot/sim) on that host.

Issue 29: `bench`'s lossless check handed Python a literal `~/.eaglebot/...` and failed on every such
host, while 1,629 tests with a test-friendly absolute `state_dir` passed. This module is the guard.
"""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from support.helpers import eagle
from support.sshd import SSHServer, free_port, start_sshd
from test_sglang_sim import write_models

from eaglebot.sim import cluster, gpu_state, install_sim_bin

FAST = json.dumps({"EAGLE_SIM_LOAD_S": "0.05", "EAGLE_SIM_WARMUP_S": "0.05"})
SMALL_BENCH = ["-e", "num_prompts=8", "-e", "input_len=64", "-e", "output_len=32", "-e", "correctness_prompts=8"]


def _worker_user() -> str:
    """A login user of this test process alone (xdist workers, and other test sessions on the same
    machine, each get their own): its home is a real one, `~/.eaglebot` lands there."""
    return f"eaglehome{os.getpid()}"


def _ensure_home_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise RuntimeError(f"test user {name!r} is missing and only root can create it (useradd --create-home)")
    for _ in range(50):   # several workers may run useradd at once: /etc/passwd is locked by each
        res = subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], capture_output=True, text=True)
        if res.returncode in (0, 9):   # 9: it exists (another worker made it)
            break
        time.sleep(0.1)
    else:
        raise RuntimeError(f"useradd {name}: {res.stderr.strip()}")
    subprocess.run(["usermod", "-p", "*", name], check=True)   # a locked account ('!') cannot log in
    return pwd.getpwnam(name)


class HomeHost:
    """The login user's real home, the SIMULATED tools reached through it, and the sshd."""

    def __init__(self, sshd: SSHServer, pw: pwd.struct_passwd, root: Path):
        self.sshd, self.pw, self.home = sshd, pw, Path(pw.pw_dir)
        self.root = root
        self.sim_state = self.home / "sim-gpu"
        self.port = free_port()

    def reset(self) -> None:
        """A home as a first login leaves it: nothing of ours, then the user's own models and tools."""
        _kill_user_processes(self.pw.pw_uid)
        for p in self.home.iterdir():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        tools = install_sim_bin(self.sshd.bin_dir, self.sim_state)
        gpu_state.init_state(self.sim_state, 2)
        cluster.save({"slurm": {"gpu-01": {"base": "idle", "drain": False, "reason": None, "partitions": ["gpu"]}},
                      "k8s": {"nodes": {}, "pods": []}}, self.sim_state)
        write_models(self.home / "models")
        (self.home / "bin").mkdir()
        os.symlink(tools["python"], self.home / "bin" / "python")
        for dirpath, dirnames, filenames in os.walk(self.home):
            for n in [dirpath, *(os.path.join(dirpath, f) for f in filenames)]:
                os.lchown(n, self.pw.pw_uid, self.pw.pw_gid)

    def config(self) -> Path:
        cfg = self.root / "eagle.yaml"
        host = self.sshd.host_config(vars={
            "python": "~/bin/python", "model": "~/models/target", "draft": "~/models/draft", "port": self.port,
            "scheduler": "slurm"})
        cfg.write_text(yaml.safe_dump({"hosts": {"gpu-01": host}}, sort_keys=False))
        return cfg


def _kill_user_processes(uid: int) -> None:
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat(f"/proc/{d}").st_uid == uid:
                os.kill(int(d), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


@contextlib.contextmanager
def open_home_host(user: str, tag: str, tmp_path_factory) -> Iterator[HomeHost]:
    """A non-root login user `user` with a real home, an sshd of its own for it, torn down after:
    what every module that runs the shipped playbooks as a new user would (its own user and sshd,
    since such modules may run one after the other in the same worker)."""
    pw = _ensure_home_user(user)
    server = start_sshd(Path("/tmp") / f"eagle-{tag}-sshd-{os.getpid()}", user=pw.pw_name)
    try:
        yield HomeHost(server, pw, tmp_path_factory.mktemp(tag))
    finally:
        _kill_user_processes(pw.pw_uid)
        server.stop()
        if os.geteuid() == 0:
            subprocess.run(["userdel", "--remove", pw.pw_name], capture_output=True)


@pytest.fixture(scope="module")
def home_host(tmp_path_factory):
    with open_home_host(_worker_user(), "home", tmp_path_factory) as host:
        yield host


def run(cfg: Path, *argv: str) -> tuple[int, dict]:
    res = eagle("run", *argv, "-H", "gpu-01", "--json", config=cfg, cwd=cfg.parent, timeout=300)
    try:
        doc = json.loads(res.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"eagle run {' '.join(argv)}: stdout is not JSON\n{res.stdout}\n{res.stderr}")
    return res.returncode, doc


def steps(doc: dict) -> list[tuple[str, str]]:
    return [(s["skill"], s["status"]) for s in doc["steps"]]


def step(doc: dict, name: str) -> dict:
    [s] = [s for s in doc["steps"] if s["name"] == name]
    return s


def why(doc: dict) -> str:
    return "\n".join(f"{s['name']} [{s['status']}] {s['summary']}" for s in doc["steps"])


@pytest.mark.e2e  # every shipped playbook over a real sshd: minutes
def test_every_shipped_playbook_reaches_its_outcome_with_the_default_config(home_host):
    h = home_host
    h.reset()
    cfg = h.config()
    home, state = str(h.home), f"{h.home}/.eaglebot"
    draft_cfg = h.home / "models" / "draft" / "config.json"

    rc, doc = run(cfg, "hello")
    assert rc == 0 and steps(doc) == [("shell", "ok"), ("shell", "ok"), ("audit.note", "ok")], why(doc)

    rc, doc = run(cfg, "health")
    assert rc == 0 and steps(doc) == [("gpu.health", "ok")], why(doc)
    rc, doc = run(cfg, "verify")
    assert rc == 0 and steps(doc) == [("gpu.health", "ok"), ("gpu.verify", "ok")], why(doc)

    # The target alone: the shipped bench records the greedy reference on it (lossless check).
    rc, doc = run(cfg, "relaunch", "-e", "spec_algorithm=none", "-e", "bench_prompts=0", "-e", f"env={FAST}")
    assert rc == 0, why(doc)
    launch = step(doc, "launch SGLang")
    assert launch["status"] == "changed" and "EAGLE3" not in launch["summary"], launch
    rc, doc = run(cfg, "bench", *SMALL_BENCH)
    assert rc == 0, why(doc)
    assert {m["name"] for m in doc["metrics"]} >= {"output_throughput", "median_ttft_ms", "completed"}
    lossless = step(doc, "lossless check")
    assert lossless["status"] == "changed" and "recorded the greedy reference" in lossless["summary"], lossless
    refs = list((h.home / ".eaglebot" / "correctness").glob("reference-*.json"))
    assert len(refs) == 1 and json.loads(refs[0].read_text())["run_id"] == doc["run_id"]

    # A config patch and its revert, on the draft under ~ (its backup beside it).
    original = draft_cfg.read_bytes()
    rc, doc = run(cfg, "patch-config", "-e", 'set={"eagle_config.use_aux_hidden_state": false}')
    assert rc == 0 and ("config.patch", "changed") in steps(doc), why(doc)
    assert json.loads(draft_cfg.read_text())["eagle_config"]["use_aux_hidden_state"] is False
    rc, doc = run(cfg, "revert-config")
    assert rc == 0 and steps(doc) == [("config.revert", "changed")], why(doc)
    assert draft_cfg.read_bytes() == original

    # EAGLE-3: relaunch with its closing benchmark, then the bench matches the reference.
    rc, doc = run(cfg, "relaunch", "-e", "spec_steps=3", "-e", "spec_topk=1", "-e", "spec_draft_tokens=4",
                  "-e", "bench_prompts=8", "-e", "bench_input_len=64", "-e", "bench_output_len=32", "-e", f"env={FAST}")
    assert rc == 0, why(doc)
    assert [sk for sk, st in steps(doc) if st != "skipped"][-4:] == ["server.launch", "draft.probe", "bench.serving",
                                                                      "audit.note"]
    assert "EAGLE3 steps=3 topk=1 draft_tokens=4" in step(doc, "launch SGLang")["summary"]
    rc, doc = run(cfg, "bench", *SMALL_BENCH)
    assert rc == 0, why(doc)
    lossless = step(doc, "lossless check")
    # a faithful draft: every output matches, or diverges where the target's own top-2 tie
    assert lossless["status"] == "ok" and re.match(r"lossless: (\d)/8 greedy outputs match the reference, (\d) diverge "
                                                   r"at a tie .*, 0 lossy \(100\.0% match or tie", lossless["summary"]), lossless
    assert {m["name"]: m["value"] for m in doc["metrics"]}["greedy_match_rate"] == 1.0

    rc, doc = run(cfg, "server-logs")
    assert rc == 0 and steps(doc) == [("server.logs", "ok")], why(doc)
    assert f"{state}/logs/server-{h.port}-" in doc["steps"][0]["summary"], doc["steps"][0]
    # the whole (short) log: how many request lines follow the ready line depends on the machine's pace
    res = eagle("logs", "gpu-01", "-n", "5000", config=cfg, cwd=cfg.parent)
    assert res.returncode == 0 and "The server is fired up and ready to roll!" in res.stdout, res.stdout + res.stderr

    rc, doc = run(cfg, "stop")
    assert rc == 0 and steps(doc) == [("server.stop", "changed"), ("gpu.cleanup", "ok"), ("gpu.verify", "ok"),
                                      ("audit.note", "ok")], why(doc)
    assert not list((h.home / ".eaglebot" / "run").glob("*.pid"))
    rc, doc = run(cfg, "cleanup")
    assert rc == 0 and steps(doc) == [("gpu.cleanup", "ok"), ("gpu.verify", "ok")], why(doc)

    rc, doc = run(cfg, "drain", "--yes", "-e", "reason=maintenance")
    assert rc == 0 and steps(doc) == [("node.drain", "changed")], why(doc)
    rc, doc = run(cfg, "resume")
    assert rc == 0 and steps(doc) == [("node.resume", "changed")], why(doc)

    model = f"{home}/models/target"
    args = json.dumps(["--model-path", model, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                       f"{home}/models/draft", "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                       "--speculative-num-draft-tokens", "3"])
    rc, doc = run(cfg, "bisect-point", "-e", f"args={args}", "-e", f"env={FAST}", "-e", "repeats=1",
                  "-e", "num_prompts=4")
    assert rc == 0 and step(doc, "benchmark")["status"] == "ok", why(doc)
    rc, doc = run(cfg, "stop")
    assert rc == 0, why(doc)

    # Nothing the bot recorded names a `~` path: every path was the host's own, absolute.
    db = sqlite3.connect(cfg.parent / "eagle.db")
    recorded = [r for (r,) in db.execute("select coalesce(summary,'') || coalesce(output,'') || coalesce(params,'') "
                                         "|| coalesce(data,'') from steps")]
    assert not [r for r in recorded if "~/" in r and "'~/" in r], "a literal ~ path reached a command"
    data = [json.loads(d) for (d,) in db.execute("select data from steps where skill = 'server.launch' and data "
                                                 "like '%log_path%'")]
    assert data and all(d["log_path"].startswith(f"{state}/logs/") for d in data)
    assert all(model in d["launch_args"] for d in data)
