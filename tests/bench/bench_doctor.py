"""How long `eagle doctor` takes on a first node (a script, not a test; issue 47).

The node of docs/first-node.md (tests/test_first_node.py's `fresh_node`: a real sshd on 127.0.0.1, a
new login user, 8 SIMULATED H200s and the SIMULATED SGLang 0.5.23 in its home), its eagle.yaml, the
host key pinned; then `python -m eaglebot doctor` in that folder, as a new process each time, for each
git revision asked for (extracted with `git archive`, run from that copy: the same node, the same
machine, one revision after the other). `--load N` keeps N busy-looping processes of this script's
own running meanwhile: the machine as loaded as when the issue measured 2.8-6.4 s. Prints per revision
the p50 and max wall time (process start to exit) and any FAIL line a run printed.

    .venv/bin/python tests/bench/bench_doctor.py [--repeat 7] [--load 2] [--rev main --rev HEAD]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_first_node import fresh_node, write_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def extract(rev: str, into: Path) -> Path:
    """The revision's package `eaglebot` under `into`, for PYTHONPATH; its folder. A revision before the src
    layout (issue 45) kept it in bot/, with skills/ and playbooks/ beside it: laid out as installed."""
    tree = into / "tree"
    tree.mkdir(parents=True)
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", rev],
                            check=True, capture_output=True, text=True).stdout.split()
    parts = ["src"] if "src" in listed else ["bot", "skills", "playbooks"]
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, *parts], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    if parts == ["src"]:
        return tree / "src"
    pkg = into / "path" / "eaglebot"
    pkg.parent.mkdir()
    shutil.move(tree / "bot", pkg)
    shutil.move(tree / "skills", pkg / "skills")
    shutil.move(tree / "playbooks", pkg / "playbooks")
    return pkg.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--load", type=int, default=0, help="busy processes running meanwhile")
    ap.add_argument("--rev", action="append", help="git revisions to time (default: HEAD)")
    a = ap.parse_args()
    revs = a.rev or ["HEAD"]
    with tempfile.TemporaryDirectory(prefix="bench-doctor-") as tmp, fresh_node(Path(tmp)) as (home, real):
        write_config(home, real)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EAGLE_", "PYTHONDONTWRITE"))}
        env.update(HOME=str(home))
        pinned = subprocess.run([sys.executable, "-m", "eaglebot", "hosts", "pin", "gpu-01", "--yes"],
                                cwd=home / "eagle", env=env, capture_output=True, text=True)
        assert pinned.returncode == 0, pinned.stderr
        paths = {rev: extract(rev, Path(tmp) / f"rev{i}") for i, rev in enumerate(revs)}
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.load)]
        try:
            envs = {rev: dict(env, PYTHONPATH=str(path)) for rev, path in paths.items()}
            for rev, run_env in envs.items():
                where = subprocess.run([sys.executable, "-c", "import eaglebot; print(eaglebot.__file__)"],
                                       env=run_env, capture_output=True, text=True).stdout
                assert where.startswith(str(paths[rev])), f"{rev}: eaglebot imported from {where}, not {paths[rev]}"
            walls: dict[str, list[float]] = {rev: [] for rev in revs}
            fails: dict[str, set[str]] = {rev: set() for rev in revs}
            for i in range(a.repeat + 1):   # the revisions in turn; the first round writes their bytecode: not counted
                for rev, run_env in envs.items():
                    t0 = time.monotonic()
                    res = subprocess.run([sys.executable, "-m", "eaglebot", "doctor"], cwd=home / "eagle",
                                         env=run_env, capture_output=True, text=True)
                    if i:
                        walls[rev].append(time.monotonic() - t0)
                        fails[rev] |= {line[:160] for line in res.stdout.splitlines() if line.startswith("FAIL")}
            for rev in revs:
                print(f"{rev}: eagle doctor p50 {statistics.median(walls[rev]):.2f} s, max {max(walls[rev]):.2f} s "
                      f"({a.repeat} runs, load {a.load})" + "".join(f"\n  {line}" for line in sorted(fails[rev])))
        finally:
            for p in busy:
                p.kill()
                p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
