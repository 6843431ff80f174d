"""The host programs (eaglebot.facts.host_programs) keep the constraints their package docstring
states: each compiles to Python 3.9's grammar and imports only the standard library, file by file
and as the text eaglebot sends (eagle3_source + eagle3_probe joined). import-linter checks the same
from the other side (.importlinter, "Host programs import nothing of eaglebot")."""
from __future__ import annotations

import ast
import sys
from importlib import resources

import pytest

from eaglebot.facts.sglang import drift
from eaglebot.facts.spec import eagle3, methods

PACKAGE = "eaglebot.facts.host_programs"
FILES = sorted(p.name for p in resources.files(PACKAGE).iterdir() if p.name.endswith(".py") and p.name != "__init__.py")
SENT = {"eagle3_probe (sent)": eagle3.probe_program, "sglang_surface (sent)": drift.program,
        "spec_files (sent)": methods.program}


def _foreign_imports(text: str, name: str) -> list[str]:
    """The imports of `text` that are neither the standard library nor a sibling inlined on the host."""
    compile(text, name, "exec")
    tree = ast.parse(text, name, feature_version=(3, 9))
    lines = text.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:   # a sibling program: only on lines the sender drops
                span = range(node.lineno - 1, node.end_lineno or node.lineno)
                if not all(lines[i].endswith("# host: inlined") for i in span):
                    found.append(f"line {node.lineno}: relative import not marked `# host: inlined`")
                continue
            mods = [node.module or ""]
        else:
            continue
        found += [f"line {node.lineno}: {m}" for m in mods
                  if m.split(".")[0] not in sys.stdlib_module_names and m != "__future__"]
    return found


def test_every_host_program_is_listed():
    assert FILES == ["eagle3_probe.py", "eagle3_source.py", "sglang_surface.py", "spec_files.py"]


@pytest.mark.parametrize("name", FILES)
def test_a_host_program_file_compiles_for_3_9_and_imports_only_the_standard_library(name):
    text = resources.files(PACKAGE).joinpath(name).read_text()
    assert _foreign_imports(text, name) == []
    # importing it here (for its constants, or to run its functions in process) runs no program:
    # at the top level only definitions, and the work under `if __name__ == "__main__":`
    top = ast.parse(text).body
    assert [type(n).__name__ for n in top if not isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef,
            ast.ClassDef, ast.Assign, ast.AnnAssign)) and not (isinstance(n, ast.Expr) and n is top[0])
            and not (isinstance(n, ast.If) and ast.unparse(n.test) == "__name__ == '__main__'")] == []


@pytest.mark.parametrize("name", sorted(SENT))
def test_the_text_sent_to_the_host_imports_only_the_standard_library(name):
    text = SENT[name]()
    assert _foreign_imports(text, name) == []
    assert "# host: inlined" not in text


def test_the_check_sees_a_foreign_import():
    """The check above is not vacuous: eaglebot, sglang, an unmarked sibling and 3.10 syntax are caught."""
    assert _foreign_imports("import eaglebot.sdk\nfrom sglang import srt\nimport json\n", "x") == [
        "line 1: eaglebot.sdk", "line 2: sglang"]
    assert _foreign_imports("from .eagle3_source import mro\n", "x") == [
        "line 1: relative import not marked `# host: inlined`"]
    with pytest.raises(SyntaxError):
        _foreign_imports("match x:\n    case 1:\n        pass\n", "x")
