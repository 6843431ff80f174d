"""The surface of an installed SGLang that eaglebot relies on, read from its source: a fingerprint.

A program: eaglebot sends this file's text to the host's Python on stdin (`facts.sglang.drift.program`;
`python3 - [SGLANG_ROOT]`; standard library only, Python >= 3.9) and parses the one line it prints
(`facts.sglang.drift.parse`). Nothing of sglang is imported (no torch, no GPU, about a second):
`importlib.util.find_spec` locates the package without running it, and its files are read.

- flags: the launch flag table wherever the release keeps it (explicit `add_argument` calls in
  `server_args.py`; `A[T, "help"]` / `A[T, Arg(...)]` fields of the ServerArgs dataclass in 0.5.17,
  of the `arg_groups/fields/*.py` namespaces in 0.5.23), as argparse would register them; the
  deprecated ones (a `Deprecated*` action) with the flag they name instead, and the date a "TODO:
  remove ... after YYYY-MM-DD" comment above a flag gives for its removal.
- env: the SGLANG_* variables its `Envs` class declares, every other one its source names anywhere
  (`read`: read directly, or at least mentioned; a variable outside both is one no code can read),
  and the retired ones (the deprecation registry, `deprecated_name=` aliases, a "NAME has been
  removed" warning) with what SGLang says instead.
- fields: the per-request `spec_*` keys of `/generate`'s meta_info, the `/server_info` acceptance keys
  (and those it synthesizes, with a removal date where a TODO gives one), the Prometheus spec metrics.
- hooks: every `set_{eagle3,dflash,dspark}_layers_to_capture` in `srt/models/*.py` with a hash of its
  body (its AST without docstring, positions or comments), so a changed body shows though what it
  means is not known; the attributes it sets and whether it shifts ids by one.
- adaptive: the built-in `DEFAULT_ADAPTIVE_CONFIG` (candidate steps per batch-size slot).
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import re
import sys
import textwrap
import time
from typing import Any, Dict, List, Optional, Set

MARK = "EAGLE-SURFACE"
UNAVAILABLE = "EAGLE-SURFACE-UNAVAILABLE"
HOOKS_AT = re.compile(r"^([ \t]*)def set_(?:eagle3|dflash|dspark)_layers_to_capture\b", re.M)
ENV_NAME = re.compile(r"SGL(?:ANG)?_[A-Z0-9_]+")   # a literal start: re skips to it fast
# os.getenv("X"), os.environ.get("X"), os.environ["X"], "X" in os.environ, get_bool_env_var("X"), ...
REMOVAL_DUE = re.compile(r"(?:remove|drop)\b[^\n]*?\bafter (\d{4}-\d{2}-\d{2})", re.I)
ENV_REMOVED = re.compile(r"(SGL(?:ANG)?_[A-Z0-9_]+) (?:has been|was|is) (removed|deprecated)\b\W*(.*)", re.S)


def _read(path: str) -> str:
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        return f.read()


def _parse(path: str) -> Optional[ast.Module]:
    try:
        return ast.parse(_read(path), path)
    except (OSError, SyntaxError, ValueError):
        return None


def _str(node: Optional[ast.expr]) -> Optional[str]:
    """A literal string: a constant, implicit concatenation, `a + b`, or an f-string's literal parts."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _str(node.left), _str(node.right)
        return a + b if a is not None and b is not None else None
    return None


def _name(node: Optional[ast.expr]) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ""


def _kw(call: ast.Call, key: str) -> Optional[ast.expr]:
    return next((k.value for k in call.keywords if k.arg == key), None)


def _strs(node: Optional[ast.expr]) -> List[str]:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [s for s in (_str(e) for e in node.elts) if s is not None]
    return []


# -- the flag table ----------------------------------------------------------------------------

def _add(table: Dict[str, Any], options: List[str], dest: str, action: str, new_flag: Optional[str],
         where: str) -> None:
    if action == "BooleanOptionalAction":   # argparse adds the negative spelling itself
        options = options + ["--no-" + o[2:] for o in options if o.startswith("--")]
    for o in options:
        table["options"][o] = dest
        if "Deprecated" in action:
            table["deprecated"][o] = new_flag or ""
    table["where"].setdefault(where, 0)
    table["where"][where] += len(options)


def _field_options(cls: ast.ClassDef, table: Dict[str, Any], where: str) -> None:
    """`name: A[T, "help"]` or `name: A[T, Arg(...)]`, as `add_cli_args_from_dataclass` registers them."""
    for st in cls.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        ann = st.annotation
        if not (isinstance(ann, ast.Subscript) and _name(ann.value) in ("A", "Annotated")):
            continue
        sl = ann.slice
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        arg: Optional[ast.Call] = None
        has_help = False
        for e in elts[1:]:
            if isinstance(e, ast.Call) and _name(e.func) == "Arg":
                arg = e
                break
            if _str(e) is not None:
                has_help = True
                break
        if arg is None and not has_help:
            continue
        name = st.target.id
        if arg is not None:
            no_cli = _kw(arg, "no_cli")
            if isinstance(no_cli, ast.Constant) and no_cli.value is True:
                continue
            cli = _str(_kw(arg, "cli_name")) or "--" + name.replace("_", "-")
            options = [cli] + _strs(_kw(arg, "aliases"))
            action = _name(_kw(arg, "action"))
            kwargs = _kw(arg, "action_kwargs")
            new_flag = None
            if isinstance(kwargs, ast.Dict):
                for k, v in zip(kwargs.keys, kwargs.values):
                    if _str(k) == "new_flag":
                        new_flag = _str(v)
        else:
            options, action, new_flag = ["--" + name.replace("_", "-")], "", None
        _add(table, options, name, action, new_flag, where)


def _due(lines: List[str], lineno: int) -> Optional[str]:
    """The date of a "TODO: remove ... after YYYY-MM-DD" comment just above a line (1-based)."""
    above = "\n".join(ln for ln in lines[max(0, lineno - 4):lineno - 1] if ln.strip().startswith("#"))
    m = REMOVAL_DUE.search(above)
    return m.group(1) if m else None


def _explicit_options(tree: ast.Module, lines: List[str], table: Dict[str, Any], where: str) -> None:
    """`parser.add_argument("--flag", ...)` calls with literal option strings."""
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"):
            continue
        options = [s for s in (_str(a) for a in n.args) if s is not None and s.startswith("-")]
        if not options or len(options) != len(n.args):
            continue
        long = next((o for o in options if o.startswith("--")), options[0])
        dest = _str(_kw(n, "dest")) or long.lstrip("-").replace("-", "_")
        _add(table, options, dest, _name(_kw(n, "action")), _str(_kw(n, "new_flag")), where)
        due = _due(lines, n.lineno)
        if due:
            for o in options:
                table["removal_due"][o] = due


def synthesized(tree: ast.Module, lines: List[str]) -> Dict[str, str]:
    """`/server_info` keys `ServerArgs.resolved_dict` adds by hand (`resolved["key"] = ...`), with
    the date a TODO above it gives for their removal ("" when none)."""
    out: Dict[str, str] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef) and n.name == "resolved_dict":
            for st in ast.walk(n):
                if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Subscript):
                    key = _str(st.targets[0].slice) if isinstance(st.targets[0].slice, ast.expr) else None
                    if key:
                        out[key] = _due(lines, st.lineno) or ""
    return out


def flag_table(root: str) -> Dict[str, Any]:
    table: Dict[str, Any] = {"options": {}, "deprecated": {}, "removal_due": {}, "where": {}, "allow_abbrev": True}
    srt = os.path.join(root, "srt")
    sa_path = os.path.join(srt, "server_args.py")
    tree = _parse(sa_path)
    if tree is None:
        return table
    if re.search(r"allow_abbrev\s*=\s*False", _read(sa_path)):
        table["allow_abbrev"] = False
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and n.name == "ServerArgs":
            _field_options(n, table, "server_args.py")
    fields = os.path.join(srt, "arg_groups", "fields")
    if os.path.isdir(fields):
        for fn in sorted(os.listdir(fields)):
            ft = _parse(os.path.join(fields, fn)) if fn.endswith(".py") else None
            for n in ft.body if ft else []:
                if isinstance(n, ast.ClassDef) and any(isinstance(s, ast.Assign) and any(
                        _name(t) == "_NS_PATH" for t in s.targets) for s in n.body):
                    _field_options(n, table, "arg_groups/fields/" + fn)
    _explicit_options(tree, _read(sa_path).splitlines(), table, "server_args.py")
    table["options"] = dict(sorted(table["options"].items()))
    table["deprecated"] = dict(sorted(table["deprecated"].items()))
    return table


# -- environment variables ---------------------------------------------------------------------

def env_vars(root: str, texts: Dict[str, str]) -> Dict[str, Any]:
    declared: List[str] = []
    # name -> {"kind": "renamed" (SGLang forwards it to the new name), "deprecated" (still read, with a
    # warning) or "removed" (only a warning is left), "say": what SGLang says instead}
    retired: Dict[str, Dict[str, str]] = {}
    environ = os.path.join(root, "srt", "environ.py")
    tree = _parse(environ) if os.path.isfile(environ) else None
    for n in tree.body if tree else []:
        if isinstance(n, ast.ClassDef) and n.name == "Envs":
            for st in n.body:
                if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call):
                    for t in st.targets:
                        if isinstance(t, ast.Name) and ENV_NAME.fullmatch(t.id):
                            declared.append(t.id)
                            old = _str(_kw(st.value, "deprecated_name"))
                            if old:
                                retired[old] = {"kind": "renamed", "say": f"use {t.id}"}
        # the deprecation registry (0.5.23): {"NAME": _DeprecatedEnv(replacement=..., note=...)}
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Dict) and \
                "DEPRECATED" in _name(n.targets[0] if isinstance(n, ast.Assign) else n.target).upper():
            for k, v in zip(n.value.keys, n.value.values):
                name = _str(k)
                if name and isinstance(v, ast.Call):
                    repl, note = _str(_kw(v, "replacement")), _str(_kw(v, "note"))
                    retired[name] = {"kind": "renamed" if repl else "removed",
                                     "say": " ".join(x for x in ((f"use {repl}." if repl else ""), note or "") if x)}
    read: Set[str] = set()
    for path, text in texts.items():
        if "SGL" not in text:
            continue
        read.update(ENV_NAME.findall(text))
        if ENV_REMOVED.search(text):   # an ad-hoc warning: its whole (implicitly concatenated) text
            warned = _parse(path)
            for node in ast.walk(warned) if warned else []:
                m = ENV_REMOVED.search(_str(node) or "") if isinstance(node, (ast.Constant, ast.JoinedStr)) else None
                if m:
                    retired.setdefault(m.group(1), {"kind": m.group(2), "say": " ".join(m.group(3).split())})
    return {"declared": sorted(set(declared)), "read": sorted(read - set(declared)),
            "retired": dict(sorted(retired.items()))}


# -- field names ---------------------------------------------------------------------------------

def _quoted(text: str, pattern: str) -> List[str]:
    return sorted(set(re.findall(r"[\"'](" + pattern + r")[\"']", text)))


def field_names(root: str, texts: Dict[str, str]) -> Dict[str, Any]:
    srt = os.path.join(root, "srt")
    tm = texts.get(os.path.join(srt, "managers", "tokenizer_manager.py"), "")
    managers = "".join(t for p, t in texts.items() if os.path.join(srt, "managers") in p)
    metrics = "".join(t for p, t in texts.items() if os.path.join(srt, "observability") in p
                      or p.endswith("metrics_collector.py"))
    sa = os.path.join(srt, "server_args.py")
    tree = _parse(sa) if os.path.isfile(sa) else None
    return {"server_info_synthesized": synthesized(tree, texts.get(sa, "").splitlines()) if tree else {},
            "per_request": _quoted(tm, r"spec_[a-z_]+"),
            "server_info": _quoted(managers, r"avg_spec_[a-z_]+") + (["internal_states"] if "internal_states"
                                                                      in managers else []),
            "metrics": sorted(set(re.findall(r"name=[\"']sglang:(spec_[a-z_]+)[\"']", metrics)))}


# -- capture hooks -----------------------------------------------------------------------------

def _body_hash(fn: ast.FunctionDef) -> str:
    body = fn.body[1:] if fn.body and isinstance(fn.body[0], ast.Expr) and _str(fn.body[0].value) is not None \
        else fn.body
    shape = ast.dump(ast.Module(body=body, type_ignores=[]), include_attributes=False) + ast.dump(fn.args)
    return hashlib.sha256(shape.encode()).hexdigest()[:16]


def _methods(text: str) -> List[Any]:
    """(class, method node) of each capture hook of a model file, parsed alone: the hook's own lines
    (to the next line indented no deeper than its `def`) and the top-level class above it. A model
    file is thousands of lines; parsing only the hooks keeps the sentinel at about a second."""
    lines = text.splitlines()
    found = []
    for m in HOOKS_AT.finditer(text):
        start = text.count("\n", 0, m.start())
        indent = len(m.group(1))
        cls = next((c.group(1) for c in (re.match(r"class (\w+)", lines[k]) for k in range(start, -1, -1)) if c),
                   None) if indent else None
        end = start + 1
        while end < len(lines):
            ln = lines[end]
            if ln.strip() and not ln.lstrip().startswith(("#", ")", "]")) and len(ln) - len(ln.lstrip()) <= indent:
                break
            end += 1
        try:
            fn = ast.parse(textwrap.dedent("\n".join(lines[start:end]))).body[0]
        except (SyntaxError, IndexError):
            continue
        if cls and isinstance(fn, ast.FunctionDef):
            found.append((cls, fn))
    return found


def hooks(root: str, texts: Dict[str, str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    models = os.path.join(root, "srt", "models")
    for path in sorted(p for p in texts if os.path.dirname(p) == models):
        if "_layers_to_capture" not in texts[path]:
            continue
        for cls, fn in _methods(texts[path]):
            src = ast.unparse(fn) if hasattr(ast, "unparse") else ""
            sets = sorted({t.attr for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign))
                           for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                           if isinstance(t, ast.Attribute)} |
                          ({"_is_layer_to_capture"} if "_is_layer_to_capture" in src else set()))
            key = f"models/{os.path.basename(path)}:{cls}.{fn.name}"
            out[key] = {"hash": _body_hash(fn), "sets": sets, "plus_one": bool(re.search(r"\+\s*1\b", src))}
    return out


# -- adaptive defaults ---------------------------------------------------------------------------

def adaptive(root: str) -> Optional[Dict[str, Any]]:
    path = os.path.join(root, "srt", "speculative", "adaptive_spec_params.py")
    tree = _parse(path) if os.path.isfile(path) else None
    for n in tree.body if tree else []:
        if not isinstance(n, (ast.Assign, ast.AnnAssign)):
            continue
        target = n.targets[0] if isinstance(n, ast.Assign) else n.target
        if _name(target) == "DEFAULT_ADAPTIVE_CONFIG" and n.value is not None:
            try:
                table = ast.literal_eval(n.value)
            except ValueError:
                return None
            return {slot: list(cfg.get("candidate_steps", [])) for slot, cfg in table.items()}
    return None


# -- the whole fingerprint -----------------------------------------------------------------------

def version(root: str) -> Optional[str]:
    for name in ("_version.py", "version.py"):
        p = os.path.join(root, name)
        if os.path.isfile(p):
            m = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", _read(p))
            if m:
                return m.group(1)
    return None


def fingerprint(root: str) -> Dict[str, Any]:
    t0 = time.monotonic()
    if not os.path.isdir(os.path.join(root, "srt", "models")):
        raise LookupError(f"the sglang package at {root} has no srt/models (not a full SGLang install)")
    texts: Dict[str, str] = {}
    for d, _dirs, files in os.walk(root):
        for fn in files:
            if fn.endswith(".py"):
                p = os.path.join(d, fn)
                try:
                    texts[p] = _read(p)
                except OSError:
                    pass
    out: Dict[str, Any] = {"sglang": version(root), "root": root, "flags": flag_table(root),
                           "env": env_vars(root, texts), "fields": field_names(root, texts),
                           "hooks": hooks(root, texts), "adaptive": adaptive(root)}
    out["elapsed_s"] = round(time.monotonic() - t0, 3)
    return out


def main(argv: List[str]) -> int:
    try:
        root = argv[0] if argv else None
        if root is None:
            spec = importlib.util.find_spec("sglang")
            if spec is None or not spec.submodule_search_locations:
                raise LookupError(f"this Python ({sys.executable}) has no sglang package")
            root = list(spec.submodule_search_locations)[0]
        result = fingerprint(root)
    except LookupError as e:
        print(f"{UNAVAILABLE} {e}")
        return 3
    except Exception as e:  # never stops a launch check: the caller falls back to the record
        print(f"{UNAVAILABLE} the sentinel failed: {type(e).__name__}: {e}")
        return 3
    print(f"{MARK} {json.dumps(result, sort_keys=True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
