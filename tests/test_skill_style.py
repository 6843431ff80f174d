"""The shipped skills fail one way: `raise StepFailed(...)` (eaglebot.sdk says why)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from eaglebot.engine.attempts import failed_result
from eaglebot.errors import StepFailed
from eaglebot.sdk import Metric

SKILLS = Path(__file__).resolve().parents[1] / "src" / "eaglebot" / "skills"
FILES = sorted([*SKILLS.glob("*.py"), *(SKILLS / "lib").glob("*.py")])


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(SKILLS)) for p in FILES])
def test_no_skill_returns_a_failed_result(path):
    calls = [n.lineno for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, ast.Attribute) and n.attr == "failed"
             and isinstance(n.value, ast.Name) and n.value.id == "StepResult"]
    assert calls == [], f"{path.name}:{calls}: raise StepFailed(...) instead"


def test_a_raised_failure_keeps_what_a_returned_one_would():
    e = StepFailed("GPU 0 uses 900 MiB", data={"memory": {"0": 900}}, output="evidence\n", warnings=["w"],
                   metrics=[Metric("gpu_free_s", 1.5, "s", "lower")])
    res = failed_result(e)
    assert (res.status, res.summary, res.data, res.output, res.warnings) == (
        "failed", "GPU 0 uses 900 MiB", {"memory": {"0": 900}}, "evidence\n", ["w"])
    assert [m.name for m in res.metrics] == ["gpu_free_s"]


# -- paths on the host (issue 29: a literal `~` reached Python twice, once in bench.serving, once in
# bench.correctness). The check chosen is this lint plus one resolver: `ctx.state_dir` is absolute
# (the host resolved it once per run), a Params field that is a path is marked HOST_PATH (the engine
# makes a user's `~/...` in it absolute), and `ctx.host_path` does the same for any other user path.

# A Params field whose name says "a path or program on the host" must be marked HOST_PATH.
PATH_NAMES = {"python", "model", "draft", "path", "paths", "cwd", "log_path", "folder", "file", "dir",
              "config_path", "nvidia_smi", "dmesg", "dcgmi", "binary"}


def _skill_modules():
    from eaglebot.engine.registry import shipped

    return sorted(shipped().items())


@pytest.mark.parametrize("name,skill", _skill_modules(), ids=[n for n, _ in _skill_modules()])
def test_every_path_parameter_is_resolved_on_the_host(name, skill):
    unmarked = [f for f, info in skill.Params.model_fields.items()
                if f in PATH_NAMES and not (isinstance(info.json_schema_extra, dict)
                                            and info.json_schema_extra.get("host_path"))]
    assert unmarked == [], f"{name}: mark {unmarked} with json_schema_extra=HOST_PATH (the host resolves ~ in them)"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(SKILLS)) for p in FILES])
def test_no_skill_writes_a_tilde_path_or_reads_the_raw_state_dir(path):
    """No string in a skill's code is a `~/...` path (only a user may give one), and the state folder
    is read through `processes.state_dir(ctx)` (absolute, or the step fails saying why), never as
    `ctx.state_dir` pasted into a command."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    tildes = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
              and n.value.startswith("~/") and id(n) not in docstrings]
    assert tildes == [], f"{path.name}:{tildes}: a `~` path in a skill (use ctx.state_dir / ctx.host_path)"
    raw = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "state_dir"
           and isinstance(n.value, ast.Name) and n.value.id == "ctx"]
    if path.name != "processes.py":
        assert raw == [], f"{path.name}:{raw}: use processes.state_dir(ctx)"


def test_the_host_resolves_home_and_state_folder_in_one_round_trip(tmp_path, monkeypatch):
    import subprocess

    from eaglebot.facts.host import paths

    home = tmp_path / "home"
    home.mkdir()
    (home / "real").mkdir()
    (home / "link").symlink_to(home / "real")
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "SCRATCH": str(home / "link")}
    for state_dir, want in [("~/.eaglebot", home / ".eaglebot"), ("$SCRATCH/eb", home / "real" / "eb"),
                            ("${SCRATCH}/x y", home / "real" / "x y"), ("rel/dir", home / "rel" / "dir")]:
        out = subprocess.run(["sh", "-c", paths.command(state_dir)], capture_output=True, text=True, env=env,
                             cwd=home)
        got = paths.parse(out.stdout)
        assert (got.home, got.state_dir) == (str(home), str(want)) and want.is_dir()
    # a dry run names the folder and makes nothing
    out = subprocess.run(["sh", "-c", paths.command("~/not-yet", create=False)], capture_output=True,
                         text=True, env=env, cwd=home)
    assert paths.parse(out.stdout).state_dir == f"{home}/not-yet" and not (home / "not-yet").exists()
    # what a user typed is never shell code: a `$(...)` in state_dir stays literal
    out = subprocess.run(["sh", "-c", paths.command("~/$(touch pwned)")], capture_output=True, text=True,
                         env=env, cwd=home)
    assert not (home / "pwned").exists()
    with pytest.raises(ValueError, match="absolute"):
        paths.parse("EAGLE-HOST-PATHS /home/x\nmkdir: cannot create directory: Permission denied\n")


@pytest.mark.e2e  # a mypy run
def test_mypy_strict_catches_a_misspelt_result_keyword_in_a_plugin(tmp_path):
    """The keywords of StepFailed and of StepResult's constructors are declared: a plugin author's
    type checker names the misspelling before it ever runs (at run time it fails the step, named:
    tests/test_skill_exceptions.py)."""
    import shutil
    import subprocess
    import sys

    import eaglebot

    stage = tmp_path / "stage" / "eaglebot"
    stage.mkdir(parents=True)
    (stage / "__init__.py").write_text("")
    (stage / "py.typed").write_text("")
    for mod in ("errors.py", "sdk.py"):   # the two modules a skill's results come from import nothing else of ours
        shutil.copy(Path(eaglebot.__file__).parent / mod, stage / mod)
    plugin = tmp_path / "team_skill.py"
    plugin.write_text(
        "from eaglebot.errors import StepFailed\nfrom eaglebot.sdk import StepResult\n\n\n"
        "def fails() -> None:\n    raise StepFailed('disk full', warnigs=['x'])\n\n\n"
        "def works() -> StepResult:\n    return StepResult.ok('fine', metrix=[])\n")
    res = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(plugin)],
                         capture_output=True, text=True, env={"MYPYPATH": str(stage.parent), "PATH": "/usr/bin:/bin"},
                         timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert 'Unexpected keyword argument "warnigs" for "StepFailed"; did you mean "warnings"?' in res.stdout
    assert 'Unexpected keyword argument "metrix" for "ok" of "StepResult"; did you mean "metrics"?' in res.stdout


# -- dry-run (issue 36 item 4): a skill probes, builds a `Plan` and hands it to `ctx.carry_out`, the
# one place a dry-run differs (eaglebot.sdk). A skill that read `ctx.dry_run` itself would have a
# second branch to keep in step with the first; one that called `ctx.would` would log "would ..."
# in real runs too. No shipped skill needs either: the allow-list is empty.
DRY_RUN_ALLOWED: dict[str, str] = {}


def dry_run_reads(source: str) -> list[int]:
    """Lines that read `dry_run` (an attribute, or by name through getattr) or call `.would(...)`."""
    tree = ast.parse(source)
    return sorted({n.lineno for n in ast.walk(tree)
                   if (isinstance(n, ast.Attribute) and n.attr in ("dry_run", "would"))
                   or (isinstance(n, ast.Constant) and n.value == "dry_run")})


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(SKILLS)) for p in FILES])
def test_no_skill_reads_dry_run_it_hands_a_plan_to_carry_out(path):
    reads = dry_run_reads(path.read_text())
    if path.name in DRY_RUN_ALLOWED:
        assert reads, f"{path.name} no longer reads dry_run: take it off DRY_RUN_ALLOWED"
        return
    assert reads == [], (f"{path.name}:{reads}: build a Plan(actions, summary, apply) and "
                         f"`return await ctx.carry_out(plan)` instead of a dry-run branch of its own")


def test_the_dry_run_lint_sees_each_way_of_reading_it():
    assert dry_run_reads("if ctx.dry_run:\n    pass\n") == [1]
    assert dry_run_reads("x = 1\nif getattr(ctx, 'dry_run'):\n    ctx.would('rm x')\n") == [2, 3]
    assert dry_run_reads("return await ctx.carry_out(Plan(['rm x'], 'would remove x', apply))\n") == []
