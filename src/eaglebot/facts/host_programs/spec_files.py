"""What a speculative method's pre-flight needs from a GPU host, read there in one pass: the model
folders' config.json, their weight names and the draft's `fc` shape, their tokenizers' hashes, and
the speculative algorithms the installed SGLang accepts.

A program: eaglebot sends this file's text to the host's Python on stdin (`facts.spec.methods.program`;
`python3 - REQUEST_JSON`; standard library only, Python >= 3.9) and parses the one line it prints
(`facts.spec.methods.parse`). Nothing is imported from sglang or torch and no tensor is loaded:
- weights: `model.safetensors.index.json`'s `weight_map` names; without an index, the header of
  each `*.safetensors` file (8 bytes of little-endian length, then that many bytes of JSON: names,
  dtypes, shapes; the tensors after it are never read). Reported as counts per name prefix, the
  decoder-layer numbers named, the parts of each layer at or past the config's
  `num_hidden_layers` (where DeepSeek-style checkpoints keep their MTP head), and the shape of the
  draft's `fc.weight` (DFlash's projection of the captured hidden states).
- tokenizer: sha256 of `tokenizer.json`'s vocabulary (its model's vocab and merges and the added
  tokens, as canonical JSON: two copies that differ only in formatting or truncation/padding
  settings hash the same), else of the vocabulary files (`tokenizer.model`, `vocab.json` +
  `merges.txt`, `vocab.txt`).
- sglang: the version and the `--speculative-algorithm` names its source accepts (the members of
  `SpeculativeAlgorithm` in `srt/speculative/spec_info.py` and the aliases `from_string` maps: the
  registry's `_RESERVED_ALIASES`, or a `"NEXTN"` rewrite in the launch-argument code of releases
  before the registry). A plugin-registered name cannot be seen without running SGLang.
"""
from __future__ import annotations

import ast
import glob
import hashlib
import importlib.util
import json
import os
import re
import struct
import sys
from typing import Any, Dict, List, Optional, Set

MARK = "EAGLE-SPEC-FILES"
UNAVAILABLE = "EAGLE-SPEC-FILES-UNAVAILABLE"
MAX_HEADER = 100 * 1024 * 1024          # a safetensors header is JSON; a bigger one is not a header
FC_NAMES = ("fc.weight", "model.fc.weight", "encoder.fc.weight")   # SGLang's DFlash loader's aliases
_LAYER = re.compile(r"^(?:model\.)?(?:language_model\.)?(?:model\.)?layers\.(\d+)\.([^.]+)")
_NUM = re.compile(r"\.\d+(\.|$)")


def _config(folder: str) -> Dict[str, Any]:
    path = os.path.join(folder, "config.json")
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except OSError as e:
        return {"error": f"cannot read {path}: {e.strerror or e}"}
    try:
        doc = json.loads(text)
    except ValueError as e:
        return {"error": f"{path} is not valid JSON ({e})"}
    return {"doc": doc} if isinstance(doc, dict) else {"error": f"{path} is not a JSON object"}


def _header(path: str) -> Dict[str, Any]:
    """A safetensors file's header (name -> {dtype, shape, ...}), read without its tensors."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{os.path.basename(path)} is shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER:
            raise ValueError(f"{os.path.basename(path)} declares a {n}-byte header: not a safetensors file")
        doc = json.loads(f.read(n).decode("utf-8"))
    if not isinstance(doc, dict):
        raise ValueError(f"{os.path.basename(path)}'s header is not a JSON object")
    doc.pop("__metadata__", None)
    return doc


def _prefix(name: str) -> str:
    """`model.layers.61.eh_proj.weight` -> `model.layers`; `mtp.fc.weight` -> `mtp.fc`."""
    cut = _NUM.search(name)
    head = name[:cut.start()] if cut else name
    return ".".join(head.split(".")[:2])


def _weights(folder: str, num_layers: Optional[int]) -> Dict[str, Any]:
    index = os.path.join(folder, "model.safetensors.index.json")
    files: Dict[str, str] = {}        # tensor name -> file (relative)
    out: Dict[str, Any] = {}
    try:
        if os.path.isfile(index):
            with open(index, encoding="utf-8-sig") as f:
                wm = json.load(f).get("weight_map")
            if not isinstance(wm, dict):
                return {"error": f"{index} has no weight_map"}
            files = {str(k): str(v) for k, v in wm.items()}
            out["source"] = "model.safetensors.index.json"
            headers: Dict[str, Dict[str, Any]] = {}
        else:
            shards = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
            if not shards:
                others = sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.bin")))
                return {"source": None, "error": "no safetensors weights" + (f" ({len(others)} .bin files)"
                                                                            if others else "")}
            headers = {os.path.basename(p): _header(p) for p in shards}
            files = {name: fn for fn, h in headers.items() for name in h}
            out["source"] = "safetensors headers"
    except (OSError, ValueError) as e:
        return {"error": f"cannot read the weight names in {folder}: {e}"}
    prefixes: Dict[str, int] = {}
    layers: Set[int] = set()
    extra: Dict[str, Set[str]] = {}
    for name in files:
        p = _prefix(name)
        prefixes[p] = prefixes.get(p, 0) + 1
        m = _LAYER.match(name)
        if m:
            layers.add(int(m.group(1)))
            if num_layers is not None and int(m.group(1)) >= num_layers:
                extra.setdefault(m.group(1), set()).add(m.group(2))
    out.update(count=len(files), prefixes=prefixes, layers=sorted(layers),
               extra_layers={k: sorted(v) for k, v in extra.items()})
    fc = next((n for n in FC_NAMES if n in files), None)
    if fc is not None:
        try:
            h = headers.get(files[fc]) if files[fc] in headers else _header(os.path.join(folder, files[fc]))
            entry = (h or {}).get(fc) or {}
            out["fc"] = {"name": fc, "file": files[fc], "shape": entry.get("shape"), "dtype": entry.get("dtype")}
        except (OSError, ValueError) as e:
            out["fc"] = {"name": fc, "file": files[fc], "error": str(e)}
    return out


def _tokenizer(folder: str) -> Dict[str, Any]:
    tj = os.path.join(folder, "tokenizer.json")
    if os.path.isfile(tj):
        try:
            with open(tj, encoding="utf-8") as f:
                doc = json.load(f)
            model = doc.get("model") or {}
            added = sorted((t.get("id"), t.get("content")) for t in doc.get("added_tokens") or []
                           if isinstance(t, dict))
            canon = json.dumps([model.get("type"), model.get("vocab"), model.get("merges"), added],
                               sort_keys=True, ensure_ascii=False)
            vocab = model.get("vocab")
            return {"file": "tokenizer.json", "sha256": hashlib.sha256(canon.encode("utf-8")).hexdigest(),
                    "size": len(vocab) + len(added) if isinstance(vocab, (dict, list)) else None}
        except (OSError, ValueError, AttributeError, TypeError) as e:
            return {"error": f"cannot read {tj}: {e}"}
    for names in (("tokenizer.model",), ("vocab.json", "merges.txt"), ("vocab.json",), ("vocab.txt",)):
        paths = [os.path.join(folder, n) for n in names]
        if all(os.path.isfile(p) for p in paths):
            h = hashlib.sha256()
            for p in paths:
                with open(p, "rb") as f:
                    h.update(f.read())
            return {"file": " + ".join(names), "sha256": h.hexdigest()}
    return {"error": f"no tokenizer.json or vocabulary file in {folder}"}


def _num_layers(doc: Dict[str, Any]) -> Optional[int]:
    n = doc.get("num_hidden_layers")
    if n is None and isinstance(doc.get("text_config"), dict):
        n = doc["text_config"].get("num_hidden_layers")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def folder(path: str, what: List[str]) -> Dict[str, Any]:
    """The facts of one model folder that `what` asks for ("config", "weights", "tokenizer")."""
    if not os.path.isdir(path):
        return {"path": path, "exists": False}
    out: Dict[str, Any] = {"path": path, "exists": True}
    cfg = _config(path)
    out["config"] = cfg.get("doc")
    if "error" in cfg:
        out["config_error"] = cfg["error"]
    if "weights" in what:
        out["weights"] = _weights(path, _num_layers(out["config"] or {}))
    if "tokenizer" in what:
        out["tokenizer"] = _tokenizer(path)
    return out


def _enum_members(tree: ast.Module, cls: str) -> List[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [t.id for s in node.body if isinstance(s, ast.Assign) for t in s.targets
                    if isinstance(t, ast.Name) and t.id.isupper()]
    return []


def _read(path: str) -> str:
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        return f.read()


def algorithms(root: str) -> Dict[str, Any]:
    """The `--speculative-algorithm` names an SGLang source tree accepts (NONE left out: it means none)."""
    spec = os.path.join(root, "srt", "speculative")
    try:
        members = _enum_members(ast.parse(_read(os.path.join(spec, "spec_info.py"))), "SpeculativeAlgorithm")
    except (OSError, SyntaxError, ValueError) as e:
        return {"error": f"cannot read srt/speculative/spec_info.py: {e}"}
    if not members:
        return {"error": "srt/speculative/spec_info.py has no SpeculativeAlgorithm enum"}
    aliases: Dict[str, str] = {}
    reg = os.path.join(spec, "spec_registry.py")
    if os.path.isfile(reg):
        m = re.search(r"_RESERVED_ALIASES\s*=\s*frozenset\(\s*(\{[^}]*\})", _read(reg))
        for name in ast.literal_eval(m.group(1)) if m else ():
            aliases[str(name)] = "EAGLE"                 # from_string: a reserved alias is EAGLE
    else:
        for rel in ("srt/server_args.py", "srt/arg_groups/speculative_hook.py"):
            p = os.path.join(root, rel)
            if os.path.isfile(p) and re.search(r"==\s*[\"']NEXTN[\"']", _read(p)):
                aliases["NEXTN"] = "EAGLE"
    return {"names": [n for n in members if n != "NONE"], "aliases": aliases}


def _version(root: str) -> Optional[str]:
    for name in ("_version.py", "version.py"):
        p = os.path.join(root, name)
        if os.path.isfile(p):
            m = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", _read(p))
            if m:
                return m.group(1)
    return None


def sglang(root: Optional[str]) -> Dict[str, Any]:
    if root is None:
        spec = importlib.util.find_spec("sglang")
        if spec is None or not spec.submodule_search_locations:
            return {"error": f"this Python ({sys.executable}) has no sglang package"}
        root = list(spec.submodule_search_locations)[0]
    out: Dict[str, Any] = {"root": root, "version": _version(root)}
    if not os.path.isdir(os.path.join(root, "srt", "speculative")):
        out["error"] = f"the sglang package at {root} has no srt/speculative (not a full SGLang install)"
        return out
    out.update(algorithms(root))
    return out


def read(request: Dict[str, Any]) -> Dict[str, Any]:
    """The answer to one request: {"model": path, "draft": path, "what": [...], "sglang_root": path}."""
    what = list(request.get("what") or [])
    out: Dict[str, Any] = {"sglang": sglang(request.get("sglang_root"))}
    for key in ("model", "draft"):
        if request.get(key):
            out[key] = folder(os.path.expanduser(str(request[key])), what)
    return out


def main(argv: List[str]) -> int:
    try:
        result = read(json.loads(argv[0]))
    except Exception as e:  # never stops the check: the caller says what could not be read
        print(f"{UNAVAILABLE} the reader failed: {type(e).__name__}: {e}")
        return 3
    print(f"{MARK} {json.dumps(result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
