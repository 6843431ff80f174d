"""The worked plugin test in docs/skills.md runs: the skill and its test are written from the
page into a folder, as a team would keep them, and pytest runs the test there (the page's
claims about `eaglebot.testing` hold, or this fails)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from test_plugins import readme_example

ROOT = Path(__file__).resolve().parents[1]


def page_test() -> str:
    page = (ROOT / "docs" / "skills.md").read_text()
    m = re.search(r"^\*\*Testing it without a host\.\*\*.*?^````python\n(.*?)^````$", page, re.S | re.M)
    assert m, "docs/skills.md has no ````python test under 'Testing it without a host'"
    return m.group(1)


def test_the_documented_plugin_test_passes_against_the_documented_skill(tmp_path):
    (tmp_path / "disk_free.py").write_text(readme_example())
    (tmp_path / "test_disk_free.py").write_text(page_test())
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "test_disk_free.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "3 passed" in res.stdout


def test_the_documented_plugin_test_fails_when_the_skill_is_wrong(tmp_path):
    """It tests something: a skill that reads the wrong column of df fails it."""
    (tmp_path / "disk_free.py").write_text(readme_example().replace(".split()[3]", ".split()[2]"))
    (tmp_path / "test_disk_free.py").write_text(page_test())
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "test_disk_free.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "2 failed" in res.stdout, res.stdout
