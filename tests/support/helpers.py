"""Small helpers shared by tests: write playbooks, run the real CLI, wait for conditions."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import yaml


def write_playbook(dir_: Path, name: str, body: str) -> Path:
    p = Path(dir_) / f"{name}.yaml"
    p.write_text(textwrap.dedent(body).lstrip())
    return p


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def eagle(*args: str, config: Path | None = None, cwd: Path | None = None, timeout: float = 120,
          env: dict | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run the real `eagle` CLI in a subprocess (no terminal: approvals are denied)."""
    argv = [sys.executable, "-m", "eaglebot", *args]
    if config is not None:
        argv += ["--config", str(config)]
    e = dict(os.environ)
    e.pop("EAGLE_CONFIG", None)
    e.update(env or {})
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=e,
                          input=stdin if stdin is not None else "")


def eagle_json(*args: str, **kw):
    res = eagle(*args, "--json", **kw)
    try:
        return res, json.loads(res.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"stdout is not one JSON document:\n{res.stdout}\nstderr:\n{res.stderr}")


def wait_for(cond, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie (a zombie holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def tagged_pids(tag: str) -> list[int]:
    """Live processes whose environment carries EAGLE_PROC_TAG=tag (what one step started)."""
    want = f"EAGLE_PROC_TAG={tag}".encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if want in f.read().split(b"\0") and pid_alive(int(d)):
                    out.append(int(d))
        except OSError:
            pass
    return out


def pid_folder(prefix: str, pid_files: tuple[str, ...] = ("*.pid", "*.pids")):
    """A fresh /tmp folder every user may write (another login's processes record their pids in it, in the
    files `pid_files` match), for a fixture to yield; on teardown every pid those files name is SIGKILLed
    (whatever a test started there is never left running) and the folder removed."""
    d = Path("/tmp") / f"eagle-{prefix}-{os.getpid()}-{os.urandom(3).hex()}"
    d.mkdir()
    os.chmod(d, 0o777)
    try:
        yield d
    finally:
        for f in {f for pattern in pid_files for f in d.glob(pattern) if f.is_file()}:
            for word in f.read_text().split():
                try:
                    os.kill(int(word), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
        shutil.rmtree(d, ignore_errors=True)
