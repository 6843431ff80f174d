"""Static reading of an installed SGLang's source: files, classes, their bases and MRO, and the
model class an architecture name maps to (SGLang's ModelRegistry rule), without importing it.

The first half of the host program `eagle3_probe` (sent together with it, standard library only).
"""
from __future__ import annotations

import ast
import os
import re
from typing import Any

_ENTRY = re.compile(r"^EntryClass\s*=\s*(\[[^\]]*\]|\([^)]*\)|[\w.]+)", re.M)


class Source:
    """The installed sglang package's files, parsed on demand."""

    def __init__(self, root: str) -> None:
        self.root = root                        # .../site-packages/sglang
        self.base = os.path.dirname(root)
        self._trees: dict[str, ast.Module | None] = {}
        self._texts: dict[str, str] = {}
        self.memo: dict[str, Any] = {}

    def file_of(self, module: str) -> str | None:
        rel = module.replace(".", os.sep)
        for cand in (os.path.join(self.base, rel + ".py"), os.path.join(self.base, rel, "__init__.py")):
            if os.path.isfile(cand):
                return cand
        return None

    def text(self, path: str) -> str:
        if path not in self._texts:
            with open(path, encoding="utf-8-sig") as f:
                self._texts[path] = f.read()
        return self._texts[path]

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self.file_of(module)
            try:
                self._trees[module] = ast.parse(self.text(path), path) if path else None
            except (OSError, SyntaxError, ValueError):
                self._trees[module] = None
        return self._trees[module]

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.base)


def top_level(tree: ast.Module) -> list[ast.stmt]:
    """Module statements, including those inside top-level `if` / `try` blocks (guarded imports)."""
    out: list[ast.stmt] = []
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        out.append(node)
        if isinstance(node, ast.If):
            todo[:0] = node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo[:0] = node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
    return out


def absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")[:-node.level]
    return ".".join(parts + ([node.module] if node.module else []))


class Klass:
    """A class found in the source: its module, definition and resolved bases."""

    def __init__(self, module: str, node: ast.ClassDef) -> None:
        self.module, self.node, self.name = module, node, node.name
        self.bases: list[Klass] = []

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}"


class Resolver:
    def __init__(self, src: Source) -> None:
        self.src = src
        self._classes: dict[tuple[str, str], Klass | None] = {}

    def lookup(self, module: str, name: str, depth: int = 0) -> Klass | None:
        """The class `name` means in `module` (defined there, imported, or an alias)."""
        key = (module, name)
        if key in self._classes:
            return self._classes[key]
        self._classes[key] = None  # a cycle resolves to nothing
        found: Klass | None = None
        tree = self.src.tree(module)
        if tree is not None and depth < 8:
            for node in top_level(tree):
                if isinstance(node, ast.ClassDef) and node.name == name:
                    found = Klass(module, node)
                elif isinstance(node, ast.ImportFrom):
                    for a in node.names:
                        if (a.asname or a.name) == name:
                            target = absolute(module, node)
                            if target.startswith("sglang"):
                                found = self.lookup(target, a.name, depth + 1) or found
                elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and any(
                        isinstance(t, ast.Name) and t.id == name for t in node.targets):
                    found = self.lookup(module, node.value.id, depth + 1) or found
        if found is not None and not found.bases:
            found.bases = [b for b in (self.expr_class(module, e, depth + 1) for e in found.node.bases) if b]
        self._classes[key] = found
        return found

    def expr_class(self, module: str, expr: ast.expr, depth: int = 0) -> Klass | None:
        """A class from a `Name` or a `module_alias.Name` expression."""
        if isinstance(expr, ast.Name):
            return self.lookup(module, expr.id, depth)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            tree = self.src.tree(module)
            for node in top_level(tree) if tree else []:
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if (a.asname or a.name.split(".")[0]) == expr.value.id and a.name.startswith("sglang"):
                            return self.lookup(a.name, expr.attr, depth)
                if isinstance(node, ast.ImportFrom):
                    for a in node.names:
                        if (a.asname or a.name) == expr.value.id:
                            return self.lookup(f"{absolute(module, node)}.{a.name}", expr.attr, depth)
        return None


def mro(k: Klass) -> list[Klass]:
    """C3 linearization over the classes the source defines (classes outside sglang end it)."""
    seqs = [mro(b) for b in k.bases] + [list(k.bases)]
    out = [k]
    while True:
        seqs = [s for s in seqs if s]
        if not seqs:
            return out
        for s in seqs:
            head = s[0]
            if not any(head in t[1:] for t in seqs):
                break
        else:  # not linearizable: fall back to depth-first order
            rest = [c for s in seqs for c in s]
            return out + [c for i, c in enumerate(rest) if c not in rest[:i]]
        out.append(head)
        seqs = [t[1:] if t[0] is head else t for t in seqs]


def find_method(k: Klass, name: str) -> tuple[Klass, ast.FunctionDef] | None:
    for c in mro(k):
        for f in c.node.body:
            if isinstance(f, ast.FunctionDef) and f.name == name:
                return c, f
    return None


# -- the architecture's class ---------------------------------------------------------------

def entry_modules(src: Source) -> dict[str, list[str]]:
    """Name in some module's `EntryClass` -> the modules naming it (a text scan, no parse)."""
    if "entries" in src.memo:
        return dict(src.memo["entries"])
    out: dict[str, list[str]] = {}
    d = os.path.join(src.root, "srt", "models")
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".py"):
            continue
        for m in _ENTRY.finditer(src.text(os.path.join(d, fn))):
            for name in re.findall(r"[A-Za-z_][\w.]*", m.group(1)):
                out.setdefault(name.split(".")[-1], []).append("sglang.srt.models." + fn[:-3])
    src.memo["entries"] = out
    return out


def resolve_arch(src: Source, res: Resolver, archs: list[str]) -> tuple[str, Klass] | None:
    """SGLang's ModelRegistry: an EntryClass class's __name__ is its architecture; the first of
    the config's architectures that one has wins."""
    emap = entry_modules(src)
    for arch in archs:
        for module in emap.get(arch, []):
            k = res.lookup(module, arch)
            if k is not None and k.name == arch:
                return arch, k
    return None
