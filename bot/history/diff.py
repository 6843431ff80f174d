"""`eagle diff A B`: two runs side by side, from the audit store (inputs, launch arguments,
config as an RFC 6902 JSON Patch, versions, env, GPU health, metrics with delta %)."""
from __future__ import annotations

from typing import Any

import jsonpatch

from eaglebot.errors import UsageError
from eaglebot.history.attribution import config_value, health_changes, state_changes
from eaglebot.history.regress import host_state
from eaglebot.facts.sglang_args import launch_flags


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


def diff_runs(store: Any, a_id: int, b_id: int) -> dict[str, Any]:
    ra, rb = store.get_run(a_id), store.get_run(b_id)
    for rid, r in ((a_id, ra), (b_id, rb)):
        if r is None:
            raise UsageError(f"no run #{rid} (see `eagle history`)")
    assert ra is not None and rb is not None
    common = [h for h in ra.get("hosts") or [] if h in (rb.get("hosts") or [])]
    ha = common[0] if common else ((ra.get("hosts") or ["?"])[0])
    hb = common[0] if common else ((rb.get("hosts") or ["?"])[0])
    sa, sb = host_state(store, ha, a_id), host_state(store, hb, b_id)
    launch = {}
    if sa.get("launch_args") is not None or sb.get("launch_args") is not None:
        launch = _pairs(dict(launch_flags(list(sa.get("launch_args") or []))),
                        dict(launch_flags(list(sb.get("launch_args") or []))))
    ca, cb = config_docs(sa, sb)
    versions = {}
    if sa.get("sglang_version") != sb.get("sglang_version"):
        versions["sglang"] = (sa.get("sglang_version"), sb.get("sglang_version"))
    versions.update(_pairs(sa.get("packages") or {}, sb.get("packages") or {}))
    ma = {(m["host"], m["name"]): m for m in store.metrics(a_id)}
    mb = {(m["host"], m["name"]): m for m in store.metrics(b_id)}
    metrics = []
    for key in dict.fromkeys([*ma, *mb]):
        va = ma[key]["value"] if key in ma else None
        vb = mb[key]["value"] if key in mb else None
        delta = (100.0 * (vb - va) / abs(va)) if va not in (None, 0) and vb is not None else None
        metrics.append({"host": key[0], "name": key[1], "a": va, "b": vb,
                        "delta_pct": None if delta is None else round(delta, 2),
                        "unit": (ma.get(key) or mb.get(key) or {}).get("unit") or ""})
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
