"""A dry-run changes nothing on the host (issue 36 item 4): every shipped playbook, `--dry-run`, through
the real `eagle` CLI over a real OpenSSH sshd, as a new user with the default config (test_shipped_playbooks'
home host), against a host with something to change: the bot's SGLang server running (SIMULATED), a GPU
process the bot did not start, a patched draft config, stale bytecode in the sglang package, an idle Slurm
node. Every file under the home (the sim's GPU and Slurm state included) and every process of the user
are the same after the dry-runs as before; every shipped skill ran in one of them, and each mutating
one planned what it would change.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from support.gpu_helpers import Sleepers
from support.helpers import eagle, wait_for
from test_shipped_playbooks import FAST, open_home_host, run, steps, why

from eaglebot.engine.registry import shipped
from eaglebot.sim import cluster

PLAYBOOKS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "src" / "eaglebot" / "playbooks").glob("*.yaml"))
# The shipped skills no shipped playbook uses, in a playbook of the test's own.
EXTRA = {"name": "extra", "steps": [
    {"skill": "gpu.processes"},
    {"skill": "metric.record", "with": {"name": "tok_s", "value": 1.0}},
    {"skill": "wait", "with": {"seconds": 1}}]}


def inputs(home: Path) -> dict[str, list[str]]:
    """What a playbook needs (-e), as test_shipped_playbooks gives it; the rest take their defaults."""
    args = ["--model-path", f"{home}/models/target", "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", f"{home}/models/draft", "--speculative-num-steps", "2",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"]
    return {"bisect-point": ["-e", f"args={json.dumps(args)}"], "drain": ["-e", "reason=maintenance"],
            "patch-config": ["-e", 'set={"eaglebot_marker": 2}'],
            "router-add": ["-e", "router=http://127.0.0.1:9"]}   # no router there: the dry-run only plans
# Skills that would change the host: in a dry-run each one planned (skipped, "dry-run: ...") at least once.
MUTATING = {"server.launch", "server.stop", "gpu.cleanup", "config.patch", "config.revert", "pycache.clear",
            "node.drain", "shell", "audit.note", "metric.record", "wait"}


@pytest.fixture(scope="module")
def dry_host(tmp_path_factory):
    with open_home_host(f"eagledry{os.getpid()}", "dry", tmp_path_factory) as host:
        yield host


def files_of(root: Path, skip: Path) -> dict[str, tuple]:
    """Every entry under `root` but `skip`: its kind, mode, size, mtime and (a file's) content hash."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath, name)
            if p == skip:
                continue
            st = p.lstat()
            digest = ""
            if stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(p)
            out[str(p)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size,
                                             st.st_mtime_ns, digest)
    return out


def processes_of(uid: int) -> dict[int, tuple[str, bytes]]:
    """The user's live processes but its SSH sessions' own (the sshd child and the shell it runs
    for the bot, which go when the bot disconnects): pid -> (start time, command line)."""
    out: dict[int, tuple[str, bytes]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat(f"/proc/{d}").st_uid != uid:
                continue
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cmdline = Path(f"/proc/{d}/cmdline").read_bytes()
        except OSError:
            continue
        if fields[0] in "ZX" or cmdline.startswith(b"sshd:"):
            continue
        out[int(d)] = (fields[19], cmdline)
    return out


@pytest.mark.e2e  # every shipped playbook over a real sshd
def test_a_dry_run_of_every_shipped_playbook_changes_nothing_on_the_host(dry_host, tmp_path):
    h = dry_host
    h.reset()
    cfg = h.config()
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump(EXTRA, sort_keys=False))

    # -- a host with something to change (real runs)
    rc, doc = run(cfg, "relaunch", "-e", "bench_prompts=0", "-e", f"env={FAST}")
    assert rc == 0, why(doc)
    rc, doc = run(cfg, "patch-config", "-e", 'set={"eaglebot_marker": 1}')
    assert rc == 0 and ("config.patch", "changed") in steps(doc), why(doc)
    sglang_pkg = h.sshd.bin_dir / ".eagle-sim" / "sglang_pkg"    # what relaunch's pycache.clear finds
    cache = sglang_pkg / "sglang" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "stale.cpython-312.pyc").write_bytes(b"\x00" * 64)
    sleepers = Sleepers(h.sim_state)
    try:
        foreign = sleepers.hold(1, 4096, user=h.pw.pw_name)
        # The simulated Slurm logs every command it is given: what the dry-runs asked it is checked below.
        asked = h.sim_state / cluster.LOG_FILE
        asked.touch()
        os.chown(asked, h.pw.pw_uid, h.pw.pw_gid)
        logged = asked.read_text().count("\n")
        before_files = {**files_of(h.home, skip=asked), **files_of(sglang_pkg, skip=asked)}
        before_procs = processes_of(h.pw.pw_uid)
        assert foreign in before_procs and len(before_procs) >= 2     # the foreign process and the server

        # -- every shipped playbook, dry
        docs: dict[str, dict] = {}
        given = inputs(h.home)
        for name in [*PLAYBOOKS, str(extra)]:
            rc, doc = run(cfg, name, "--dry-run", *given.get(name, []))
            docs[name] = doc
            assert "steps" in doc, f"{name}: rc {rc}: {doc}"
            failed = [s for s in doc["steps"] if s["status"] == "failed"]
            assert rc == 0 and not failed, f"{name}: rc {rc}\n{why(doc)}"

        # -- nothing changed
        wait_for(lambda: processes_of(h.pw.pw_uid) == before_procs, 60, 0.1,
                 "the dry-runs' SSH sessions to end and nothing else to be left or gone")
        after_files = {**files_of(h.home, skip=asked), **files_of(sglang_pkg, skip=asked)}
        changed = sorted(p for p in before_files.keys() | after_files.keys() if before_files.get(p) != after_files.get(p))
        assert changed == [], f"a dry-run changed {changed}"
        told = [json.loads(line) for line in asked.read_text().splitlines()[logged:]]
        assert told and all(Path(argv[0]).name == "sinfo" for argv in told), f"a dry-run told Slurm {told}"
    finally:
        sleepers.stop_all()

    # -- every shipped skill ran, and each mutating one planned
    ran = {s["skill"] for d in docs.values() for s in d["steps"]}
    assert ran >= set(shipped()), f"no dry-run ran {sorted(set(shipped()) - ran)}"
    planned = {s["skill"] for d in docs.values() for s in d["steps"]
               if s["status"] == "skipped" and s["summary"].startswith("dry-run: ")}
    assert planned >= MUTATING, f"never planned: {sorted(MUTATING - planned)}"
    said = {(n, s["name"]): s["summary"] for n, d in docs.items() for s in d["steps"]}
    # what the plans said: the foreign process named, never approved nor killed (no terminal, no --yes)
    assert said["cleanup", "free the GPUs"].startswith("dry-run: would stop 2 GPU processes (1 not started by the bot)")
    assert str(foreign) in said["cleanup", "free the GPUs"]
    assert said["stop", "stop the server"] == f"dry-run: would stop 2 process(es) on port {h.port}"
    assert said["relaunch", "launch SGLang"] == f"dry-run: would launch SGLang on port {h.port}"
    assert said["drain", "drain the node"] == "dry-run: would drain gpu-01 in Slurm (idle now)"
    assert said["draft-repair", "plan the attempts"].startswith("dry-run: would try ")
    assert said["draft-repair", "attempt 1: patch the capture list"].startswith(
        "dry-run: would change eagle_config.eagle_aux_hidden_state_layer_ids in ")
    # the audit trail keeps each plan's `would` lines: relaunch's launch planned past the busy port
    db = sqlite3.connect(cfg.parent / "eagle.db")
    [launch] = [o for (o,) in db.execute(
        "select s.output from steps s join runs r on r.id = s.run_id where r.dry_run = 1 and r.playbook = 'relaunch' "
        "and s.name = 'launch SGLang'")]
    assert f"[dry-run] would find port {h.port} free (now in use by " in launch
    assert "[dry-run] would start " in launch and "sglang.launch_server" in launch
    approvals = db.execute("select count(*) from approvals a join runs r on r.id = a.run_id where r.dry_run = 1")
    assert approvals.fetchone() == (0,)     # a dry-run asks nobody


def test_a_stale_pid_file_is_left_by_a_dry_run_and_removed_by_the_stop(dry_host):
    """server.stop's one quiet change: the pid file of a server that is gone. A dry-run says what the
    stop says ("no server running") and leaves the file; the stop removes it."""
    h = dry_host
    h.reset()
    cfg = h.config()
    rc, doc = run(cfg, "hello")                  # the state folder, as a first run leaves it
    assert rc == 0, why(doc)
    gone = subprocess.Popen(["true"])
    gone.wait()
    pid_file = h.home / ".eaglebot" / "run" / f"server-{h.port}.pid"
    pid_file.parent.mkdir(exist_ok=True)
    pid_file.write_text(f"{gone.pid}\n")
    for p in (pid_file.parent, pid_file):
        os.chown(p, h.pw.pw_uid, h.pw.pw_gid)
    idle = [("server.stop", "ok"), ("gpu.cleanup", "ok")]
    rc, doc = run(cfg, "stop", "--dry-run")
    assert rc == 0 and steps(doc)[:2] == idle, why(doc)
    assert doc["steps"][0]["summary"] == f"no server running on port {h.port}" and pid_file.exists()
    rc, doc = run(cfg, "stop")
    assert rc == 0 and steps(doc)[:2] == idle, why(doc)
    assert doc["steps"][0]["summary"] == f"no server running on port {h.port}" and not pid_file.exists()
