"""`eagle diff A B`: two runs side by side (inputs, launch arguments, config as an RFC 6902
JSON Patch, versions, env, GPU health, metrics with delta %), compared from the rows
`loader.diff_rows` reads (pure)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonpatch

from eaglebot.errors import UsageError
from eaglebot.facts.sglang.cmdline import launch_flags
from eaglebot.history.attribution import config_value, health_changes, state_changes
from eaglebot.store.rows import MetricRow, RunRow


def _pairs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {k: (a.get(k), b.get(k)) for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)}


def _nested(docs: dict[str, Any]) -> dict[str, Any]:
    """{file: {"a.b": v}} -> {file: {"a": {"b": v}}}: the patch then addresses the config
    document's own structure (`/<file>/eagle_config/eagle_aux_hidden_state_layer_ids/0`)."""
    out: dict[str, Any] = {}
    for path, keys in docs.items():
        doc: dict[str, Any] = {}
        for dotted, value in keys.items():
            node = doc
            *parents, last = str(dotted).split(".")
            for part in parents:
                nxt = node.get(part)
                if not isinstance(nxt, dict):
                    nxt = node[part] = {}
                node = nxt
            node[last] = value
        out[path] = doc
    return out


def config_docs(sa: dict[str, Any], sb: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each state's known config keys as {file: {dotted key: value}} (unknown = absent)."""
    da: dict[str, Any] = {}
    db: dict[str, Any] = {}
    paths = dict.fromkeys([*(sa.get("config") or {}), *(sb.get("config") or {})])
    for p in paths:
        keys = dict.fromkeys([*((sa.get("config") or {}).get(p) or {}), *((sb.get("config") or {}).get(p) or {})])
        for k in keys:
            va, vb = config_value(sa, p, k, sb), config_value(sb, p, k, sa)
            if va is not None:
                da.setdefault(p, {})[k] = va
            if vb is not None:
                db.setdefault(p, {})[k] = vb
    return da, db


_FOLDER_VARS = ("draft", "model")   # the host vars that name model folders, most specific first


def file_label(path: str, variables: dict[str, Any], home: str = "") -> str:
    """A config file as its user knows it: under a model folder of the host's vars
    (`{draft}/config.json`), else under the home folder (`~/...`), else as recorded."""
    for var in _FOLDER_VARS:
        folder = variables.get(var)
        if isinstance(folder, str) and folder.strip("/") and path.startswith(folder.rstrip("/") + "/"):
            return "{" + var + "}/" + path[len(folder.rstrip("/")) + 1:]
    if home and home != "/" and path.startswith(home.rstrip("/") + "/"):
        return "~/" + path[len(home.rstrip("/")) + 1:]
    return path


def _leaves(value: object, other: object, key: str, out: dict[str, Any]) -> None:
    """Flatten `value` into {dotted key: leaf}; a list is walked by index ([0]) only when
    `other` is a list of the same length (else the whole list is one value)."""
    if isinstance(value, dict) and isinstance(other, dict | None):
        for k, v in value.items():
            _leaves(v, (other or {}).get(k), f"{key}.{k}" if key else str(k), out)
    elif isinstance(value, list) and isinstance(other, list) and len(other) == len(value) and key:
        for i, v in enumerate(value):
            _leaves(v, other[i], f"{key}[{i}]", out)
    else:
        out[key] = value


def config_changes(ca: dict[str, Any], cb: dict[str, Any], vars_a: dict[str, Any], vars_b: dict[str, Any],
                   home: str = "") -> list[dict[str, Any]]:
    """Each changed config value: {file, label, key (dotted, `[i]` for list items), a, b}."""
    out: list[dict[str, Any]] = []
    na, nb = _nested(ca), _nested(cb)
    for path in dict.fromkeys([*na, *nb]):
        fa: dict[str, Any] = {}
        fb: dict[str, Any] = {}
        _leaves(na.get(path, {}), nb.get(path), "", fa)
        _leaves(nb.get(path, {}), na.get(path), "", fb)
        label = file_label(path, vars_b or vars_a, home)
        for key in dict.fromkeys([*fa, *fb]):
            if fa.get(key) != fb.get(key):
                out.append({"file": path, "label": label, "key": key, "a": fa.get(key), "b": fb.get(key)})
    return out


@dataclass(frozen=True)
class DiffRows:
    """Two runs as the store has them: each run, the host compared, its state and metrics."""

    run_a: RunRow
    run_b: RunRow
    host_a: str
    host_b: str
    state_a: dict[str, Any]
    state_b: dict[str, Any]
    metrics_a: list[MetricRow]
    metrics_b: list[MetricRow]
    home: str = ""   # the reader's home folder: files under it are shown as ~/...


def _host_vars(run: RunRow, host: str) -> dict[str, Any]:
    per_host = run.get("vars") or {}
    v = per_host.get(host) if isinstance(per_host, dict) else None
    return v if isinstance(v, dict) else {}


def pick_hosts(a_id: int, ra: RunRow | None, b_id: int, rb: RunRow | None) -> tuple[RunRow, str, RunRow, str]:
    """Both runs (UsageError when one is missing) and the host to compare on each: the first
    host they share, else each run's first host."""
    for rid, r in ((a_id, ra), (b_id, rb)):
        if r is None:
            raise UsageError(f"no run #{rid} (see `eagle history`)")
    assert ra is not None and rb is not None
    common = [h for h in ra.get("hosts") or [] if h in (rb.get("hosts") or [])]
    ha = common[0] if common else ((ra.get("hosts") or ["?"])[0])
    hb = common[0] if common else ((rb.get("hosts") or ["?"])[0])
    return ra, ha, rb, hb


def compare(d: DiffRows) -> dict[str, Any]:
    """The diff document (`diff_json` makes its --json form)."""
    ra, rb, ha, hb, sa, sb = d.run_a, d.run_b, d.host_a, d.host_b, d.state_a, d.state_b
    a_id, b_id = ra["id"], rb["id"]
    launch = {}
    if sa.get("launch_args") is not None or sb.get("launch_args") is not None:
        launch = _pairs(dict(launch_flags(list(sa.get("launch_args") or []))),
                        dict(launch_flags(list(sb.get("launch_args") or []))))
    ca, cb = config_docs(sa, sb)
    versions = {}
    if sa.get("sglang_version") != sb.get("sglang_version"):
        versions["sglang"] = (sa.get("sglang_version"), sb.get("sglang_version"))
    versions.update(_pairs(sa.get("packages") or {}, sb.get("packages") or {}))
    ma = {(m["host"], m["name"]): m for m in d.metrics_a}
    mb = {(m["host"], m["name"]): m for m in d.metrics_b}
    metrics = []
    for key in dict.fromkeys([*ma, *mb]):
        va = ma[key]["value"] if key in ma else None
        vb = mb[key]["value"] if key in mb else None
        delta = (100.0 * (vb - va) / abs(va)) if va not in (None, 0) and vb is not None else None
        metrics.append({"host": key[0], "name": key[1], "a": va, "b": vb,
                        "delta_pct": None if delta is None else round(delta, 2),
                        "unit": (ma[key] if key in ma else mb[key])["unit"] or ""})
    ranked = state_changes(sa, sb, b_id)
    return {
        "a": {"id": a_id, "playbook": ra["playbook"], "host": ha, "status": ra["status"],
              "started_at": ra.get("started_at")},
        "b": {"id": b_id, "playbook": rb["playbook"], "host": hb, "status": rb["status"],
              "started_at": rb.get("started_at")},
        "inputs": _pairs(ra.get("inputs") or {}, rb.get("inputs") or {}),
        "launch": launch,
        "config": {"a": _nested(ca), "b": _nested(cb)},
        "config_patch": jsonpatch.make_patch(_nested(ca), _nested(cb)).patch,
        "config_changes": config_changes(ca, cb, _host_vars(ra, ha), _host_vars(rb, hb), d.home),
        "versions": versions,
        "env": _pairs(sa.get("env") or {}, sb.get("env") or {}),
        "health": [c.text() for c in health_changes(sa, sb, b_id)],
        "metrics": metrics,
        "ranked": [{**c.as_json(), "text": c.text()} for c in ranked],
    }


def diff_json(d: dict[str, Any]) -> dict[str, Any]:
    """The --json document: pairs become {"a": .., "b": ..}."""
    def pairs(p: dict[str, tuple[Any, Any]]) -> dict[str, dict[str, Any]]:
        return {k: {"a": v[0], "b": v[1]} for k, v in p.items()}

    return {**d, "inputs": pairs(d["inputs"]), "launch": pairs(d["launch"]), "versions": pairs(d["versions"]),
            "env": pairs(d["env"])}
