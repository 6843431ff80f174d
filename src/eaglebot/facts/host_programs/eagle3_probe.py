"""Which target hidden states will SGLang hand an EAGLE-3 draft? Read from the host's own SGLang.

A program: eaglebot sends `eagle3_source.py` and this file, as one text, to the host's Python on
stdin (`eagle3.probe_program`; `python3 - ARCHS_JSON NUM_LAYERS CASES_JSON [ROOT [METHOD]]`;
standard library only, Python >= 3.9) and parses the one line it prints (`eagle3.parse_probe`).
Nothing of sglang is imported (so no torch): `importlib.util.find_spec` locates the package without running any of it,
and its source is read.
1. The architectures map to a model class as SGLang's ModelRegistry maps them: the first one
   (config order) that a `sglang/srt/models/*.py` names in its `EntryClass`.
2. The class's `set_eagle3_layers_to_capture` (along its MRO) is compiled from the installed file
   and RUN for each asked id list on a stand-in `self`: `.config.num_hidden_layers`, a last
   pipeline rank, `.model` / `.language_model` of the classes its `__init__` assigns (their own
   method bound to them) with N `.layers`; module globals it reads (`get_pp_group`, a logger,
   constants) are stand-ins. What it sets is read back: `layers_to_capture`, per-layer
   `_is_layer_to_capture` flags, or the exception SGLang would raise at start-up.
3. The `forward` of the class holding the list says what an id means there (evidence lines kept).
4. The function that reads the draft's key: nested under `eagle_config`, a top-level fallback?
"""
from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import os
import re
import sys
import time
import types
from typing import Any

from .eagle3_source import (Klass, Resolver, Source, absolute, find_method, mro, resolve_arch,  # host: inlined
                            top_level)  # host: inlined

MARK = "EAGLE3-PROBE"
UNAVAILABLE = "EAGLE3-PROBE-UNAVAILABLE"
METHOD = "set_eagle3_layers_to_capture"


# -- running the real method on a stand-in self ------------------------------------------------

class Ns:
    """A plain object; records who set which attribute (the stand-in `self` and its parts)."""

    _path: str
    _log: list[str]

    def __init__(self, path: str, log: list[str], **kw: Any) -> None:
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_log", log)
        for k, v in kw.items():
            object.__setattr__(self, k, v)

    def __setattr__(self, name: str, value: Any) -> None:
        self._log.append(f"{self._path}.{name}")
        object.__setattr__(self, name, value)


class _Logger:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _free_names(fn: ast.FunctionDef) -> set[str]:
    local = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    if fn.args.vararg:
        local.add(fn.args.vararg.arg)
    if fn.args.kwarg:
        local.add(fn.args.kwarg.arg)
    loads: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else local).add(n.id)
    return loads - local - set(dir(builtins))


def _constants(tree: ast.Module) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for node in top_level(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                pass
    return out


def compile_method(src: Source, owner: Klass, fn: ast.FunctionDef) -> types.FunctionType:
    """The installed method's code, compiled on its own (its file and line numbers kept), with
    stand-ins for the module globals it reads; annotations dropped (they would need typing/torch)."""
    copy = ast.parse(ast.unparse(fn)).body[0]
    assert isinstance(copy, ast.FunctionDef)
    ast.increment_lineno(copy, fn.lineno - copy.lineno)
    fn = copy
    for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
        a.annotation = None
    fn.returns, fn.decorator_list = None, []
    pp = types.SimpleNamespace(is_last_rank=True, is_first_rank=True, world_size=1, rank_in_group=0, rank=0)
    stand_ins: dict[str, Any] = {
        "get_pp_group": lambda *a, **k: pp,
        "get_parallel": lambda *a, **k: types.SimpleNamespace(pp_group=pp, tp_size=1, tp_rank=0, tp_group=pp),
        "get_tensor_model_parallel_world_size": lambda *a, **k: 1,
        "get_tensor_model_parallel_rank": lambda *a, **k: 0,
        "logger": _Logger(), "logging": types.SimpleNamespace(getLogger=lambda *a: _Logger()),
        "List": list, "Optional": None, "Tuple": tuple}
    tree = src.tree(owner.module)
    consts = _constants(tree) if tree else {}
    g: dict[str, Any] = {"__builtins__": builtins, "__name__": owner.module}
    for name in _free_names(fn):
        if name in stand_ins:
            g[name] = stand_ins[name]
        elif name in consts:
            g[name] = consts[name]
    path = src.file_of(owner.module) or owner.module
    ns: dict[str, Any] = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), g, ns)
    made: types.FunctionType = ns[fn.name]
    return made


def _assigned_classes(res: Resolver, k: Klass, attr: str) -> list[Klass]:
    """Classes `__init__` (along the MRO) assigns to `self.<attr>`: `X(...)`, `a if c else b`, or a
    `self._factory(...)` whose returns are followed."""
    out: list[Klass] = []
    chain = mro(k)

    def add(c: Klass | None) -> None:
        if c is not None and c is not k and c not in out:
            out.append(c)

    def from_name(module: str, fn: ast.FunctionDef, name: str) -> Klass | None:
        # a parameter (`language_model_cls=Qwen3LLMModel`): the default of the most derived
        # __init__ that declares it (a subclass passes its own default up through super())
        for c in chain:
            init = next((f for f in c.node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            if init is None:
                continue
            params = init.args.args[-len(init.args.defaults):] if init.args.defaults else []
            for p, d in zip(params, init.args.defaults):
                if p.arg == name:
                    return res.expr_class(c.module, d)
        for n in ast.walk(fn):  # an import inside the function
            if isinstance(n, ast.ImportFrom):
                for a in n.names:
                    if (a.asname or a.name) == name:
                        return res.lookup(absolute(module, n), a.name)
        return res.lookup(module, name)

    def from_expr(module: str, fn: ast.FunctionDef, e: ast.expr, depth: int = 0) -> None:
        if isinstance(e, ast.IfExp):
            from_expr(module, fn, e.body, depth)
            from_expr(module, fn, e.orelse, depth)
        elif isinstance(e, ast.Call):
            f = e.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" and depth < 3:
                m = find_method(k, f.attr)
                if m is not None:  # a factory method: follow its returns
                    for n in ast.walk(m[1]):
                        if isinstance(n, ast.Return) and n.value is not None:
                            from_expr(m[0].module, m[1], n.value, depth + 1)
                    return
                for c in chain:  # a class attribute (`body_cls = qwen3_5.Qwen3_5ForCausalLM`)
                    for s in c.node.body:
                        if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == f.attr
                                                             for t in s.targets):
                            add(res.expr_class(c.module, s.value))
                            return
                return
            add(from_name(module, fn, f.id) if isinstance(f, ast.Name) else res.expr_class(module, f))

    for c in chain:
        init = next((f for f in c.node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        for n in ast.walk(init) if init else []:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name) \
                            and t.value.id == "self":
                        assert init is not None
                        from_expr(c.module, init, n.value)
        if out:
            return out
    return out


def _inner(res: Resolver, k: Klass, attr: str, method: str) -> Klass | None:
    cands = _assigned_classes(res, k, attr)
    for c in cands:
        if find_method(c, method) is not None:
            return c
    for c in cands:
        fwd = find_method(c, "forward")
        if fwd is not None and "layers_to_capture" in ast.unparse(fwd[1]):
            return c
    return cands[0] if cands else None


def stand_in(src: Source, res: Resolver, k: Klass | None, n: int, path: str, log: list[str],
             depth: int = 0, method: str = METHOD) -> Ns:
    text = types.SimpleNamespace(num_hidden_layers=n)
    config = types.SimpleNamespace(num_hidden_layers=n, text_config=text)
    s = Ns(path, log, _klass=k, config=config, pp_group=types.SimpleNamespace(is_last_rank=True, is_first_rank=True),
           start_layer=0, end_layer=n, layers=[types.SimpleNamespace() for _ in range(n)], layers_to_capture=[])
    if k is not None:
        m = find_method(k, method)
        if m is not None:
            object.__setattr__(s, method, types.MethodType(compile_method(src, m[0], m[1]), s))
        if depth < 3:
            for attr in ("model", "language_model"):
                object.__setattr__(s, attr, stand_in(src, res, _inner(res, k, attr, method), n, f"{path}.{attr}",
                                                     log, depth + 1, method))
    return s


def run_case(src: Source, res: Resolver, k: Klass, n: int, ids: list[int] | None,
             method: str = METHOD) -> dict[str, Any]:
    log: list[str] = []
    me = stand_in(src, res, k, n, "self", log, method=method)
    out: dict[str, Any] = {"ids": ids, "error": None}
    try:
        getattr(me, method)(None if ids is None else list(ids))
    except Exception as e:  # what SGLang itself raises at start-up
        out["error"] = f"{type(e).__name__}: {e}"
    out["aux_enabled"] = me.__dict__.get("capture_aux_hidden_states")
    for path in ("self.model", "self.language_model", "self.model.model", "self.language_model.model", "self"):
        obj: Any = me
        for part in path.split(".")[1:]:
            obj = obj.__dict__.get(part)
            if obj is None:
                break
        if obj is not None and f"{path}.layers_to_capture" in log:
            holder = obj.__dict__.get("_klass")
            raw = obj.__dict__["layers_to_capture"]
            out.update(holder=path, holder_class=repr(holder) if holder else None,
                       raw=[int(v) for v in raw] if isinstance(raw, (list, tuple)) else None,
                       flags=[i for i, layer in enumerate(obj.__dict__["layers"])
                              if getattr(layer, "_is_layer_to_capture", False)])
            return out
    out.update(holder=None, holder_class=None, raw=None, flags=[])
    return out


# -- what an id means in the forward ---------------------------------------------------------

def classify_forward(src: Source, res: Resolver, holder: str | None) -> dict[str, Any]:
    if not holder:
        return {"known": False, "evidence": []}
    module, _, name = holder.rpartition(".")
    k = res.lookup(module, name)
    # the forwards along the MRO, as far as each hands on to `super().forward(...)` (a subclass that
    # only scales the embedding leaves the capture to its parent's loop)
    found: list[tuple[Klass, ast.FunctionDef]] = []
    for c in mro(k) if k else []:
        fwd = next((f for f in c.node.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
        if fwd is None:
            continue
        found.append((c, fwd))
        if "layers_to_capture" in ast.unparse(fwd) or "super().forward" not in ast.unparse(fwd):
            break
    if not found:
        return {"known": False, "evidence": []}
    owner, fn = found[-1]
    body, ev = "", []
    for c, f in found:
        path = src.file_of(c.module) or c.module
        lines = src.text(path).splitlines()[f.lineno - 1:f.end_lineno]
        body += "\n".join(lines) + "\n"
        ev += [f"{src.rel(path)}:{f.lineno + i}: {ln.strip()}" for i, ln in enumerate(lines)
               if re.search(r"layers_to_capture|_is_layer_to_capture|aux_hidden_states\.append\(|capture_output=|"
                            r"AuxHiddenStatePacker", ln)]
    path = src.file_of(owner.module) or owner.module
    flags = bool(re.search(r"_is_layer_to_capture", body))
    entry = bool(re.search(r"\b(i|layer_idx|layer_id|logical_id)\s+in\s+self\.layers_to_capture", body))
    after = bool(re.search(r"\bi\s*\+\s*1\s+in\s+self\.layers_to_capture", body))
    # none of the capture patterns SGLang's forwards use: what an id means there is not known
    return {"known": flags or entry or after, "file": src.rel(path), "line": fn.lineno,
            "holder": f"{owner.module}.{owner.name}", "flags": flags, "entry_list": entry, "after_list": after,
            "start_in_list": bool(re.search(r"self\.start_layer\s+in\s+self\.layers_to_capture", body)),
            "end_of_stack": bool(re.search(r"(self\.end_layer|num_layers|self\.config\.num_hidden_layers|"
                                           r"len\(self\.layers\))\s+in\s+self\.layers_to_capture", body)),
            # 0.5.17's Llama-style forwards append `hidden_states + residual` with no guard: at layer 0
            # the residual is still None, so capturing the embedding raises a TypeError.
            "unguarded_sum": bool(re.search(r"append\(\s*hidden_states\s*\+\s*residual\s*\)", body)),
            "packer": "AuxHiddenStatePacker" in body, "evidence": ev[:12]}


# -- where the draft's key is read --------------------------------------------------------------

def find_reader(src: Source) -> dict[str, Any] | None:
    """The function that sets the capture ids SGLang passes to the target from the draft's config."""
    top = os.path.join(src.root, "srt")
    for d, _dirs, files in os.walk(top):
        if "models" in os.path.relpath(d, top).split(os.sep)[:1]:
            continue  # model files read the key for the draft network itself, not for the target
        for fn in sorted(files):
            if not fn.endswith(".py"):
                continue
            path = os.path.join(d, fn)
            text = src.text(path)
            if "eagle_aux_hidden_state_layer_ids" not in text or "eagle_config" not in text:
                continue
            try:
                tree = ast.parse(text, path)
            except SyntaxError:
                continue
            for f in ast.walk(tree):
                if not isinstance(f, ast.FunctionDef):
                    continue
                for n in ast.walk(f):
                    if isinstance(n, ast.Assign) and any(
                            isinstance(t, ast.Attribute) and t.attr == "eagle_aux_hidden_state_layer_ids"
                            for t in n.targets) and "eagle_aux_hidden_state_layer_ids" in ast.unparse(n.value):
                        body = ast.unparse(f)
                        use_aux = re.search(r"get\(\s*['\"]use_aux_hidden_state['\"]\s*,\s*(True|False)", body)
                        return {"file": f"{src.rel(path)}:{n.lineno}", "function": f.name,
                                "nested": "eagle_config" in ast.unparse(n.value),
                                "top_level": bool(re.search(r"getattr\(\s*[\w.]*hf_config\s*,\s*['\"]"
                                                            r"eagle_aux_hidden_state_layer_ids", body)),
                                "use_aux_default": use_aux.group(1) == "True" if use_aux else None}
    return None


def version(src: Source) -> str | None:
    """The version the package's own files say (setuptools-scm's _version.py), else its metadata."""
    for name in ("_version.py", "version.py"):
        p = os.path.join(src.root, name)
        if os.path.isfile(p):
            m = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", src.text(p))
            if m:
                return m.group(1)
    try:
        from importlib import metadata
        return metadata.version("sglang")
    except Exception:
        return None


def probe(archs: list[str], n: int, cases: list[list[int] | None], root: str | Source | None = None,
          method: str = METHOD) -> dict[str, Any]:
    """The probe's answer (a Source may be passed again: the capture script asks hundreds of times).
    `method`: the target's hook to run (`set_dflash_layers_to_capture` for DFLASH's capture)."""
    t0 = time.monotonic()
    if root is None:
        spec = importlib.util.find_spec("sglang")
        if spec is None or not spec.submodule_search_locations:
            raise LookupError(f"this Python ({sys.executable}) has no sglang package")
        root = list(spec.submodule_search_locations)[0]
    src = root if isinstance(root, Source) else Source(root)
    if not os.path.isdir(os.path.join(src.root, "srt", "models")):
        raise LookupError(f"the sglang package at {src.root} has no srt/models (not a full SGLang install)")
    res = Resolver(src)
    out: dict[str, Any] = {"sglang": version(src), "root": src.root, "archs": archs, "num_layers": n}
    found = resolve_arch(src, res, archs)
    if "reader" not in src.memo:
        src.memo["reader"] = find_reader(src)
    out["reader"] = src.memo["reader"]
    if found is None:
        out.update(arch=None, error=f"no SGLang model file names {', '.join(archs) or 'an architecture'} in its "
                                    f"EntryClass (SGLang would fall back to the Transformers backend)")
        out["elapsed_s"] = round(time.monotonic() - t0, 3)
        return out
    arch, k = found
    m = find_method(k, method)
    out.update(arch=arch, module=k.module, cls=repr(k), error=None)
    if m is None:
        algo = "EAGLE3" if method == METHOD else "DFLASH"
        out["error"] = f"{arch} ({k.module}) has no {method}: SGLang refuses {algo} for this target at start-up"
        out["elapsed_s"] = round(time.monotonic() - t0, 3)
        return out
    out["method"] = f"{src.rel(src.file_of(m[0].module) or m[0].module)}:{m[1].lineno} ({m[0].name})"
    out["cases"] = [run_case(src, res, k, n, ids, method) for ids in cases]
    holders = [c["holder_class"] for c in out["cases"] if c.get("holder_class")]
    out["forward"] = classify_forward(src, res, holders[0] if holders else None)
    out["elapsed_s"] = round(time.monotonic() - t0, 3)
    return out


def main(argv: list[str]) -> int:
    try:
        archs, n, cases = json.loads(argv[0]), int(argv[1]), json.loads(argv[2])
        root = argv[3] if len(argv) > 3 and argv[3] else None
        result = probe(archs, n, cases, root, *argv[4:5])
    except LookupError as e:
        print(f"{UNAVAILABLE} {e}")
        return 3
    except Exception as e:  # the probe never stops the check: the caller falls back to the table
        print(f"{UNAVAILABLE} the probe failed: {type(e).__name__}: {e}")
        return 3
    print(f"{MARK} {json.dumps(result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
