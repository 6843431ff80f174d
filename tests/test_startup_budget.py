"""Start-up budgets: the instructions a fresh `eagle` command executes, counted by valgrind.

A count is the same on a busy machine as on a quiet one (within ~1%), so a budget can be a
test where a wall-clock target could not: a change that makes `eagle --help` load the engine,
`eagle history` load pydantic or a run load asyncssh for the local host shows here as millions of
instructions over budget, whatever module did it. The budgets are the counts measured on the tree
that set them plus ~12% (tests/bench/bench_startup.py --instructions prints the counts; lower a
budget when a change wins instructions back, raise one only with the reason in the commit).

End to end (valgrind runs each command ~20x slower): the `e2e` marker, run by .ci/run.

The floor that docs/benchmarks.md compares `eagle run hello` with (880 M on 2026-12-04): what a run
cannot avoid, as one script:

    import argparse, asyncio, sqlite3, yaml, pydantic
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    class M(pydantic.BaseModel):
        a: int = 1
    M(a=2); argparse.ArgumentParser().parse_args([]); yaml.safe_load("a: 1")
    async def f(): return 1
    asyncio.run(f()); sqlite3.connect(":memory:").execute("create table t(a)")
    ImmutableSandboxedEnvironment(undefined=StrictUndefined).from_string("echo {{ g }}").render(g=1)
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.helpers import write_yaml

pytestmark = pytest.mark.e2e     # valgrind: .ci/run installs it

# millions of instructions, the process and its children (python -c pass is ~90 M)
BUDGETS = {
    ("--help",): 235,
    ("history",): 500,
    ("show", "last"): 535,
    ("run", "hello", "-H", "local"): 1485,
}


def instructions(argv: list[str], cwd: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("EAGLE_CONFIG", "PYTHONDONTWRITEBYTECODE")}
    out = cwd / "cg"
    out.mkdir(exist_ok=True)
    for f in out.iterdir():
        f.unlink()
    res = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--trace-children=yes",
                          f"--cachegrind-out-file={out}/cg.%p", *argv], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    total = sum(int(ln.split()[1]) for f in out.iterdir() for ln in f.read_text().splitlines()
                if ln.startswith("summary:"))
    return total / 1e6


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("startup")
    write_yaml(d / "eagle.yaml", {"audit_db": "eagle.db"})
    env = {k: v for k, v in os.environ.items() if k not in ("EAGLE_CONFIG", "PYTHONDONTWRITEBYTECODE")}
    # the store, a run to show, and every module's bytecode written, as an installed package has them
    subprocess.run([sys.executable, "-m", "eaglebot", "run", "hello", "-H", "local"], cwd=d, env=env, check=True,
                   capture_output=True, timeout=300)
    return d


@pytest.mark.parametrize("args", list(BUDGETS), ids=lambda a: " ".join(a))
def test_command_stays_within_its_instruction_budget(home, args):
    n = instructions([sys.executable, "-m", "eaglebot", *args], home)
    assert n <= BUDGETS[args], f"eagle {' '.join(args)}: {n:.0f} M instructions, budget {BUDGETS[args]} M"
