"""A plain (non-editable) `pip install .` ships every module of the source tree: setuptools finds the
packages under src/ by their __init__.py (pyproject.toml), so a folder of Python files without one would
silently not ship. The simulated SGLang under eaglebot/sim/sglang_pkg ships as package data."""
from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def test_every_folder_of_python_files_under_src_is_a_package_that_ships():
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = set(find_packages(str(SRC), exclude=find["exclude"]))
    folders = {".".join(p.parent.relative_to(SRC).parts) for p in SRC.rglob("*.py")
               if "sglang_pkg" not in p.parts and "__pycache__" not in p.parts}
    assert folders - shipped == set()
    assert {"eaglebot", "eaglebot.skills", "eaglebot.playbooks", "eaglebot.facts.host_programs"} <= shipped
