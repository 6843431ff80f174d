"""The layout's rules that a grep can check, and proof that the import-linter contract in
`.importlinter` really fails a layering violation (scripts/check-arch.sh runs it in CI)."""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SQL = re.compile(r"""["']\s*(select\s.+\sfrom\s|insert\s+(or\s+\w+\s+)?into\s|update\s+\w+\s+set\s|delete\s+from\s|"""
                 r"""create\s+(temp\s+)?(table|index)\s|pragma\s)""", re.I)
SQLITE_IMPORT = re.compile(r"^\s*(import|from)\s+(sqlite3|sqlite_utils)\b", re.M)


def _sources() -> list[Path]:
    return sorted((ROOT / "src" / "eaglebot").rglob("*.py"))


def test_sql_and_sqlite_imports_live_only_in_the_store():
    offenders = []
    for p in _sources():
        if (ROOT / "src" / "eaglebot" / "store") in p.parents:
            continue
        text = p.read_text()
        if SQLITE_IMPORT.search(text) or SQL.search(text):
            offenders.append(str(p.relative_to(ROOT)))
    assert offenders == []


def test_the_store_does_speak_sql_so_the_grep_above_can_see_it():
    store = (ROOT / "src" / "eaglebot" / "store" / "base.py").read_text()   # the connection and its transaction
    assert SQLITE_IMPORT.search(store) and SQL.search(store)


def _stage(tmp: Path) -> Path:
    stage = tmp / "stage"
    shutil.copytree(ROOT / "src" / "eaglebot", stage / "eaglebot", ignore=shutil.ignore_patterns("__pycache__"))
    return stage


def _lint(stage: Path) -> subprocess.CompletedProcess:
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--config", str(ROOT / ".importlinter"), "--no-cache"],
                          cwd=stage, env={"PYTHONPATH": str(stage), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("module, line, contract", [
    ("src/eaglebot/skills/wait.py", "from eaglebot.transport import LocalTransport", "Skills use ctx.host"),
    ("src/eaglebot/skills/wait.py", "from eaglebot.skills import shell", "No skill imports another skill"),
    ("src/eaglebot/engine/redact.py", "from eaglebot.frontends import format", "Layers"),
    ("src/eaglebot/history/trend.py", "import sqlite3", "Only the store speaks SQL"),
    # what chat/handlers.py and slack/* took from eagle serve's runtime before issue 36 moved it down
    ("src/eaglebot/frontends/chat/handlers.py", "from eaglebot.frontends.service.leader import Leadership",
     "eagle serve's runtime"),
    ("src/eaglebot/frontends/slack/execute.py", "from eaglebot.frontends.service import scheduler", "eagle serve's runtime"),
    ("src/eaglebot/frontends/format.py", "from eaglebot.frontends.service.reload import Reloader", "eagle serve's runtime"),
    ("src/eaglebot/facts/host_programs/spec_files.py", "from eaglebot.sdk import path_for_shell", "Host programs import nothing"),
    ("src/eaglebot/facts/host_programs/spec_files.py", "from eaglebot.facts.fact import program_answer", "facts by subject"),
    ("src/eaglebot/facts/gpu/health.py", "from eaglebot.facts.sglang import release", "facts by subject"),
])
def test_the_import_contract_fails_a_violation(tmp_path, module, line, contract):
    stage = _stage(tmp_path)
    assert _lint(stage).returncode == 0  # the tree as it is keeps every contract
    target = stage / Path(module).relative_to("src")
    target.write_text(target.read_text() + f"\n{line}  # injected by the test\n")
    res = _lint(stage)
    assert res.returncode != 0
    broken = [ln for ln in res.stdout.splitlines() if "BROKEN" in ln]
    assert any(contract in ln for ln in broken), res.stdout[-2000:]



def test_the_service_contract_places_every_part_of_the_front_ends():
    """A new module under src/eaglebot/frontends/ takes a layer in the service contract, or nothing
    would stop it importing eagle serve's runtime."""
    text = (ROOT / ".importlinter").read_text()
    section = text[text.index("[importlinter:contract:service]"):]
    section = section[:section.index("\n[", 1)]
    layers = section[section.index("layers =") + len("layers ="):]
    named = {m.strip() for m in re.split(r"[\s|:]+", layers) if m.strip()}
    parts = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / "src" / "eaglebot" / "frontends").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())}
    assert parts == named


MAX_LINES = 500


def test_no_module_is_longer_than_the_limit():
    """A module past 500 lines holds more than one thing: split it by responsibility."""
    long = {str(p.relative_to(ROOT)): n for p in _sources()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


# The seams from a listener or the CLI to ctx.host: no parameter or attribute typed Any. (JSON
# and YAML values a user wrote, in templating, playbook inputs and limits, are what they are.)
SEAMS = ["src/eaglebot/history", "src/eaglebot/tuning", "src/eaglebot/frontends/slack", "src/eaglebot/frontends/chat", "src/eaglebot/skills",
         *(f"src/eaglebot/engine/{m}.py" for m in ("runner", "steps", "attempts", "records", "context", "procs",
                                          "registry", "shipped"))]
ANY_ANNOTATION = re.compile(r":\s*Any\b")


def test_no_any_on_the_seams():
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for d in SEAMS for p in (sorted((ROOT / d).rglob("*.py")) if (ROOT / d).is_dir() else [ROOT / d])
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if ANY_ANNOTATION.search(line)]
    assert found == []


# The whole store: a caller is typed with the slice of it that it uses (store/protocol.py; from the
# event loop, its door: `Door[EngineStore]`), never with all of it. Only the places that open the
# store, and so own and close it, name the whole (issue 36: "every caller of the store is typed
# with a slice, not the whole protocol").
WHOLE_STORE = {"StoreProtocol", "Store", "AsyncStore"}
OPENERS = {
    "src/eaglebot/frontends/cli/common.py": {"open_store", "store_only", "read_store", "view_store", "empty_store"},
    "src/eaglebot/frontends/cli/tuning_cmds.py": {"_store"},
    # opens the store (`Services.open`), closes it (`close`), and hands each consumer its slice
    "src/eaglebot/frontends/services.py": {"Services.__init__"},
}


def _names_in(annotation: ast.expr) -> set[str]:
    """The names an annotation mentions, quoted ones included (`"Store | None"`); a `Literal`'s
    strings are values, not names."""
    found: set[str] = set()
    todo = [annotation]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Subscript) and _names_in(node.value) & {"Literal"}:
            continue
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                todo.append(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                pass
        todo.extend(ast.iter_child_nodes(node))
    return found


def whole_store_annotations(source: str) -> list[tuple[str, str]]:
    """(where, name) for each annotation in `source` that names the whole store; `where` is the
    qualified name of the function (its parameters and return) or of the annotated variable."""
    out: list[tuple[str, str]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                where = ".".join([*scope, child.name])
                a = child.args
                anns = [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                        if x is not None and x.annotation is not None]
                for ann in [*anns, *([child.returns] if child.returns else [])]:
                    out.extend((where, n) for n in sorted(_names_in(ann) & WHOLE_STORE))
                visit(child, [*scope, child.name])
            elif isinstance(child, ast.ClassDef):
                visit(child, [*scope, child.name])
            else:
                if isinstance(child, ast.AnnAssign):
                    target = ast.unparse(child.target)
                    out.extend((".".join([*scope, target]), n)
                               for n in sorted(_names_in(child.annotation) & WHOLE_STORE))
                visit(child, scope)

    with warnings.catch_warnings():   # a module's own invalid escape is the compiler's to report
        warnings.simplefilter("ignore", DeprecationWarning)
        tree = ast.parse(source)
    visit(tree, [])
    return out


def test_every_user_of_the_store_is_typed_with_a_slice():
    found: dict[str, set[str]] = {}
    for p in sorted((ROOT / "src" / "eaglebot").rglob("*.py")):
        if (ROOT / "src" / "eaglebot" / "store") not in p.parents:
            for where, name in whole_store_annotations(p.read_text(encoding="utf-8")):
                found.setdefault(str(p.relative_to(ROOT)), set()).add(f"{where} ({name})")
    whole = {f"{rel}: {w}" for rel, ws in found.items() for w in ws
             if w.split(" (")[0] not in OPENERS.get(rel, set())}
    # each: type it with the slice it uses (store/protocol.py; a new consumer may need a new slice there)
    assert sorted(whole) == []
    # and the allow-list names only places that still open the store
    assert {rel: {w.split(" (")[0] for w in ws} for rel, ws in found.items()} == OPENERS


@pytest.mark.parametrize("source, expected", [
    ("def f(store: StoreProtocol) -> None: ...", [("f", "StoreProtocol")]),
    ("class C:\n    async def g(self, s: 'Door[StoreProtocol] | None') -> int: ...", [("C.g", "StoreProtocol")]),
    ("class C:\n    store: store.Store\n", [("C.store", "Store")]),
    ("def f(x: Callable[[Store], T]) -> T: ...", [("f", "Store")]),
    ("def f() -> Iterator[AsyncStore]: ...", [("f", "AsyncStore")]),
    ("def f(store: HistoryStore, run: RunsFace) -> StoreError: ...", []),
    ("def f(kind: Literal['Store', 'a b'], n: 'not a type!') -> None: ...", []),
])
def test_the_slice_check_sees_the_whole_store_however_it_is_written(source, expected):
    assert whole_store_annotations(source) == expected
