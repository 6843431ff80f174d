"""A plain (non-editable) `pip install .` ships every package of the source tree: the
setuptools package list in pyproject.toml names each folder with an __init__.py under bot/,
skills/ and playbooks/ (the simulated SGLang ships as package data)."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_source_package_is_in_the_setuptools_package_list():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {name: ROOT / path for name, path in conf["package-dir"].items()}
    found = set()
    for top, folder in dirs.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder)
            if "sglang_pkg" in rel.parts:      # package data: the SIMULATED sglang
                continue
            found.add(".".join([top, *rel.parts]))
    assert found == set(conf["packages"])
