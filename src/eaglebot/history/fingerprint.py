"""A host's fingerprint (pure): its known state, advanced by the steps and file changes
runs recorded (launch arguments, SGLang version, effective settings, environment, patched
config keys, file hashes, package versions, GPU health).

The store keeps a fingerprint per run (`runs.fingerprint`); `host_state.host_state` finds the
newest one at or before a run and advances it with `apply_steps` over what came after.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence


def json_value(v: object, default: object) -> Any:
    """A JSON column as a value: decoded text, a value the store decoded already, or `default`
    (empty, not text, or not JSON)."""
    if isinstance(v, (dict, list)):
        return v
    if not v or not isinstance(v, (str, bytes)):
        return default
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        return default


def empty_state() -> dict[str, Any]:
    """A host nothing is known about (every key a fingerprint may carry)."""
    return {"launch_args": None, "sglang_version": None, "effective": {}, "files": {}, "config": {},
            "packages": {}, "health": {}}


def apply_steps(state: dict[str, Any], steps: Sequence[Mapping[str, Any]],
                changes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Advance a host's state by finished steps and file changes (both oldest first)."""
    st: dict[str, Any] = json.loads(json.dumps(state or empty_state()))
    for k, v in empty_state().items():
        st.setdefault(k, v)
    for s in steps:
        data = json_value(s.get("data"), {})
        params = json_value(s.get("params"), {})
        if s.get("skill") == "server.launch" and isinstance(data, dict):
            if data.get("launch_args") is not None:
                st["launch_args"] = [str(a) for a in data["launch_args"]]
            if data.get("sglang_version"):
                st["sglang_version"] = str(data["sglang_version"])
            if isinstance(data.get("effective"), dict):
                st["effective"] = data["effective"]
            if isinstance(data.get("env"), dict):
                st["env"] = {str(k): str(v) for k, v in data["env"].items()}
        if s.get("skill") == "config.patch" and isinstance(data, dict) and isinstance(data.get("values"), dict):
            path = str(data.get("path") or params.get("path") or "?")
            for k, ba in data["values"].items():
                if isinstance(ba, dict):
                    st.setdefault("config_before", {}).setdefault(path, {}).setdefault(k, ba.get("before"))
                    st["config"].setdefault(path, {})[k] = ba.get("after")
        if s.get("skill") == "config.patch" and isinstance(params, dict) and isinstance(params.get("set"), dict):
            path = str(params.get("path") or "?")
            st["config"].setdefault(path, {}).update(params["set"])
        if s.get("skill") == "gpu.health" and isinstance(data, dict) and isinstance(data.get("health"), dict):
            st["health"] = data["health"]
        if isinstance(data, dict) and isinstance(data.get("package_versions"), dict):
            st["packages"].update({str(k): str(v) for k, v in data["package_versions"].items()})
    for c in changes:
        st["files"][c["path"]] = c.get("after_sha256")
    return st
