"""Patch a JSON file on the host (a model's config.json): set and delete dotted keys, keep a backup.

`set` maps dotted paths to values (intermediate objects are created); `delete` lists
dotted paths that must exist. Nothing to change: `ok`. Otherwise the original bytes
are kept next to the file as `<file>.eagle-<run_id>-<step idx>.bak`, the file is
rewritten atomically with its mode, key order and indentation kept (a changed value's bytes
are replaced where they stand, the rest of the file untouched, where the layout allows), and the change
(hashes, unified diff, backup path) is recorded so `config.revert` can undo it. A
symlink (Hugging Face caches link into shared blobs) is replaced by a regular file,
never written through. Dry-run shows the diff and writes nothing.

```yaml
- skill: config.patch
  with:
    path: "{{ draft }}/config.json"
    set: {eagle_config.eagle_aux_hidden_state_layer_ids: [1, 23, 44]}
    delete: [eagle_config.stale_key]
```
Registers `path`, `backup_path`, `diff`, `keys` (the dotted paths changed), `json_patch` (the
change as an RFC 6902 JSON Patch, made by `jsonpatch`) and `values` ({dotted key: {before,
after}}, what fingerprints and attribution read; null is "unset").
"""
from __future__ import annotations

import copy
import asyncio
import json
import re
from typing import Any, Callable

import jsonpatch
from pydantic import Field, model_validator

from eaglebot.errors import StepFailed
from eaglebot.sdk import HOST_PATH, FileChange, Plan, SkillContext, SkillParams, StepResult
from eaglebot.skills.lib import files

NAME = "config.patch"


class Params(SkillParams):
    path: str = Field(description="the JSON file on the host", json_schema_extra=HOST_PATH)
    set: dict[str, Any] = Field(default_factory=dict,
                                description="dotted path -> value, e.g. {eagle_config.use_aux_hidden_state: true}")
    delete: list[str] = Field(default_factory=list, description="dotted paths to remove (each must exist)")
    force: bool = Field(False, description="patch a read-only file (mode without owner write) anyway")

    @model_validator(mode="after")
    def _something(self) -> "Params":
        if not self.set and not self.delete:
            raise ValueError("give `set` and/or `delete`")
        for key in [*self.set, *self.delete]:
            if not key or any(part == "" for part in key.split(".")):
                raise ValueError(f"invalid dotted path {key!r}")
        return self


class PatchError(ValueError):
    pass


def _kind(v: object) -> str:
    if isinstance(v, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
            type(None): "null"}.get(type(v), type(v).__name__)


def _walk(doc: dict[str, Any], parts: list[str], create: bool) -> dict[str, Any]:
    node: object = doc
    for i, part in enumerate(parts):
        if not isinstance(node, dict):
            raise PatchError(f"{'.'.join(parts[:i])} is {_kind(node)}, not an object")
        if part not in node:
            if not create:
                raise PatchError(f"key {'.'.join(parts[:i + 1])!r} does not exist")
            node[part] = {}
        node = node[part]
    if not isinstance(node, dict):
        raise PatchError(f"{'.'.join(parts)} is {_kind(node)}, not an object")
    return node


def apply(doc: dict[str, Any], set_: dict[str, Any], delete: list[str]) -> list[str]:
    """Apply the edits to `doc` in place (pure); returns the dotted paths whose value changed."""
    changed: list[str] = []
    for key, value in set_.items():
        *parents, leaf = key.split(".")
        try:
            node = _walk(doc, parents, create=True)
        except PatchError as e:
            raise PatchError(f"cannot set {key}: {e}") from None
        if leaf not in node or _canon(node[leaf]) != _canon(value):
            node[leaf] = value
            changed.append(key)
    for key in delete:
        *parents, leaf = key.split(".")
        try:
            node = _walk(doc, parents, create=False)
        except PatchError as e:
            raise PatchError(f"cannot delete {key}: {e}") from None
        if leaf not in node:
            raise PatchError(f"cannot delete {key}: key {key!r} does not exist")
        del node[leaf]
        changed.append(key)
    return changed


def lookup(doc: object, key: str) -> object:
    """The value at a dotted path, None when absent."""
    node = doc
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _canon(v: object) -> str:
    return json.dumps(v, sort_keys=True)


Style = tuple[int | str | None, bool, bool, tuple[str, str]]

MAX_BYTES = 64 * 1024 * 1024    # a config.json is KiBs; a weights file or /dev/zero is not
READ_TIMEOUT_S = 60.0
DIFF_CAP = 64 * 1024            # bytes of diff kept in the audit store; larger: head + tail + hash


def detect_style(text: str) -> Style:
    """(indent, ensure_ascii, trailing newline, separators) of an existing JSON text: a
    minified file stays minified (indent None, no spaces), an indented one keeps its width."""
    indent: int | str | None = 2
    m = re.search(r"^[\[{][ \t]*\r?\n([ \t]+)\S", text, re.M)
    if m:
        ws = m.group(1)
        indent = "\t" if "\t" in ws else len(ws)
    elif "\n" not in text.strip():
        indent = None
    ascii_only = all(ord(c) < 128 for c in text)
    key = ":" if '":' in text and not re.search(r'":\s', text) else ": "
    if indent is not None:
        item = ","
    elif "," in text:
        item = ", " if re.search(r",\s", text) else ","
    else:
        item = ", " if key == ": " else ","
    return indent, ascii_only, text.endswith("\n"), (item, key)


def dump(doc: object, style: Style) -> bytes:
    indent, ascii_only, newline, separators = style
    text = json.dumps(doc, indent=indent, ensure_ascii=ascii_only, separators=separators)
    return (text + ("\n" if newline else "")).encode("utf-8")


_WS = " \t\r\n"
# the stdlib's own JSON string reader: (text, index after the opening quote) -> (string, index after it)
_scanstring: Callable[[str, int], tuple[str, int]] = getattr(json.decoder, "scanstring")


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def value_span(text: str, parts: list[str]) -> tuple[int, int] | None:
    """Where the value at a dotted path is written in a JSON text, (start, end); None when it is not
    there. The last of duplicate keys, as json.loads keeps it."""
    dec = json.JSONDecoder()
    i = 0
    for depth, part in enumerate(parts):
        i = _skip(text, i)
        if i >= len(text) or text[i] != "{":
            return None
        i, found = _skip(text, i + 1), None
        while i < len(text) and text[i] != "}":
            if text[i] != '"':
                return None
            key, i = _scanstring(text, i + 1)
            i = _skip(text, i)
            if i >= len(text) or text[i] != ":":
                return None
            start = _skip(text, i + 1)
            _, end = dec.raw_decode(text, start)
            if key == part:
                found = (start, end)
            i = _skip(text, end)
            if i < len(text) and text[i] == ",":
                i = _skip(text, i + 1)
        if found is None:
            return None
        if depth == len(parts) - 1:
            return found
        i = found[0]
    return None


def edit_in_place(text: str, set_: dict[str, Any], expected: object, style: Style) -> str | None:
    """The file with only the set values' bytes replaced, each written as its old value was (on one
    line, or indented at its depth); None when the layout does not allow it (a new key, a delete),
    or the result would not read back as `expected`."""
    indent, ascii_only, _, separators = style
    out = text
    for key, value in set_.items():
        span = value_span(out, key.split("."))
        if span is None:
            return None
        start, end = span
        if "\n" in out[start:end] and indent is not None:
            line = out[out.rfind("\n", 0, start) + 1:start]
            lead = line[:len(line) - len(line.lstrip(" \t"))]
            new = json.dumps(value, indent=indent, ensure_ascii=ascii_only).replace("\n", "\n" + lead)
        else:
            item = ", " if re.search(r",\s", out[start:end]) or "," not in out[start:end] and \
                separators[0] != "," else ","
            new = json.dumps(value, ensure_ascii=ascii_only, separators=(item, separators[1]))
        out = out[:start] + new + out[end:]
    try:
        return out if json.loads(out) == expected else None
    except json.JSONDecodeError:
        return None


def capped_diff(diff: str, cap: int = DIFF_CAP) -> str:
    """The diff as stored: whole when small, else its head and tail and the whole one's hash."""
    raw = diff.encode("utf-8", "replace")
    if len(raw) <= cap:
        return diff
    half = cap // 4
    head = raw[:half].decode("utf-8", "ignore")
    tail = raw[-half:].decode("utf-8", "ignore")
    return (f"{head}\n… {len(raw) - 2 * half:,} bytes of the diff omitted (whole diff: {len(raw):,} bytes, "
            f"sha256 {files.sha256(raw)}) …\n{tail}")


async def run(ctx: SkillContext, params: Params) -> StepResult:
    path = params.path
    st = await files.stat(ctx, path)
    if st is None:
        raise StepFailed(f"cannot read {path} on {ctx.host_name}: No such file or directory")
    if st.kind != "regular file":
        raise StepFailed(f"{path} on {ctx.host_name} is a {st.kind}, not a regular file")
    if st.size > MAX_BYTES:
        raise StepFailed(f"{path} on {ctx.host_name} is {st.size:,} bytes; config.patch reads at most "
                         f"{MAX_BYTES // 2**20} MiB")
    if why := await files.owner_problem(ctx, path, st, "patch"):
        raise StepFailed(why)
    if not st.mode & 0o200 and not params.force:
        raise StepFailed(f"{path} on {ctx.host_name} is read-only (mode {st.mode:04o}); "
                         f"set force: true to patch it anyway")
    try:
        before = await asyncio.wait_for(files.read(ctx, path), READ_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise StepFailed(f"reading {path} on {ctx.host_name} took over {READ_TIMEOUT_S:g}s; gave up")
    if len(before) > MAX_BYTES:
        raise StepFailed(f"{path} on {ctx.host_name} grew past {MAX_BYTES // 2**20} MiB while reading")
    try:
        text = before.decode("utf-8")
        doc = json.loads(text)
    except UnicodeDecodeError:
        raise StepFailed(f"{path} on {ctx.host_name} is not UTF-8 text, so not a JSON file")
    except json.JSONDecodeError as e:
        raise StepFailed(f"{path} on {ctx.host_name} is not valid JSON "
                         f"(line {e.lineno} column {e.colno}: {e.msg})")
    if not isinstance(doc, dict):
        raise StepFailed(f"{path} on {ctx.host_name} holds {_kind(doc)}, not a JSON object")
    original = copy.deepcopy(doc)
    try:
        keys = apply(doc, params.set, params.delete)
    except PatchError as e:
        raise StepFailed(f"{e} in {path}")
    data: dict[str, Any] = {"path": path, "keys": keys, "backup_path": None, "diff": "",
                            "json_patch": jsonpatch.make_patch(original, doc).patch,
                            "values": {k: {"before": lookup(original, k), "after": lookup(doc, k)} for k in keys}}
    if not keys:
        return StepResult.ok(f"{path} already has {', '.join(params.set)}", data=data)
    style = detect_style(text)
    # only the changed values' bytes, where the layout allows: the audit diff is the change itself
    in_place = edit_in_place(text, {k: params.set[k] for k in keys if k in params.set}, doc, style) \
        if not params.delete and all(k in params.set for k in keys) else None
    after = in_place.encode("utf-8") if in_place is not None else dump(doc, style)
    if after == before:
        return StepResult.ok(f"{path} already has {', '.join(keys)}", data=data)
    diff = capped_diff(files.unified_diff(path, before, after))
    data["diff"] = diff
    async def patch() -> StepResult:
        mode = st.mode
        bak = files.backup_path(path, ctx.run_id, ctx.step_idx)
        await files.write(ctx, bak, before, mode)
        await files.write(ctx, path, after, mode)
        # The patched file keeps its owner in write_file (or is refused); the backup is a new file.
        owner_warning = await files.keep_owner(ctx, bak, st.uid, st.gid)
        warnings = [owner_warning] if owner_warning else []
        # Read back: a racing writer or a full disk must not pass silently.
        check = await files.read(ctx, path)
        if check != after:
            raise StepFailed(f"{path} on {ctx.host_name} changed under us while patching; the original is in {bak}")
        data["backup_path"] = bak
        stored = capped_diff(diff)
        data["diff"] = stored
        ctx.log(stored.rstrip("\n"))
        change = FileChange(path, files.sha256(before), files.sha256(after), stored, bak)
        return StepResult.changed(f"patched {path}: {', '.join(keys)} (backup {bak})", changes=[change], data=data,
                                  output=stored, warnings=warnings)

    return await ctx.carry_out(Plan([f"patch {path} ({', '.join(keys)}):\n{diff}"],
                                    f"would change {', '.join(keys)} in {path}", patch, data=data, output=diff))
