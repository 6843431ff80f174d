"""The chat test bot as a team gets it: the complete example of docs/testing.md is written into
a folder outside the repository and pytest runs it there, the `chatbot` fixture coming from
eaglebot's `pytest11` entry point (the page's claims hold, or this fails)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def page_example() -> str:
    page = (ROOT / "docs" / "testing.md").read_text()
    m = re.search(r"^## A complete example\n.*?^````python\n(.*?)^````$", page, re.S | re.M)
    assert m, "docs/testing.md has no ````python example under 'A complete example'"
    return m.group(1)


def run_example(folder: Path, text: str) -> subprocess.CompletedProcess[str]:
    (folder / "test_our_chatops.py").write_text(text)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "test_our_chatops.py"], cwd=folder, capture_output=True, text=True, timeout=300)


def test_the_documented_example_passes_with_the_installed_plugin(tmp_path):
    res = run_example(tmp_path, page_example())
    assert res.returncode == 0, res.stdout + res.stderr
    assert "4 passed" in res.stdout


def test_the_documented_example_fails_when_the_bot_would_decide_otherwise(tmp_path):
    """It tests something: with UALICE an approver too, her click is not refused."""
    text = page_example().replace('{"drain-node": DRAIN})', '{"drain-node": DRAIN},\n'
                                  '                             access={"operators": ["UALICE"], '
                                  '"approvers": ["UBOSS", "UALICE"], "self_approval": True})')
    res = run_example(tmp_path, text)
    assert res.returncode == 1 and "1 failed, 3 passed" in res.stdout, res.stdout
    assert "only approvers" in res.stdout
