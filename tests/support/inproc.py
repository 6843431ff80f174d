"""The `eagle` CLI called in this process: the same argv, exit code, stdout and stderr as
`helpers.eagle`, without an interpreter start-up per call (the hostile-input and fault
tests make dozens of calls). Tests that need a real process (environment, signals, a
process that dies) keep using `helpers.eagle`."""
from __future__ import annotations

import io
import json
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from eaglebot.frontends.cli.main import main


def eagle_here(*args: str, config: Path | None = None, cwd: Path | None = None,
               timeout: float | None = None) -> subprocess.CompletedProcess:
    argv = [*args] + (["--config", str(config)] if config is not None else [])
    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_cfg = os.getcwd(), os.environ.pop("EAGLE_CONFIG", None)
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as e:  # argparse
                rc = e.code if isinstance(e.code, int) else 2
    finally:
        os.chdir(old_cwd)
        if old_cfg is not None:
            os.environ["EAGLE_CONFIG"] = old_cfg
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def eagle_here_json(*args: str, **kw):
    res = eagle_here(*args, "--json", **kw)
    try:
        return res, json.loads(res.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"stdout is not one JSON document:\n{res.stdout}\nstderr:\n{res.stderr}")
