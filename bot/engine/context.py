"""The variables a run's steps see on one host, rendered once before the first step."""
from __future__ import annotations

from typing import Any

from eaglebot.engine import templating
from eaglebot.engine.playbook import Playbook


def host_context(hostvars: dict[str, Any], pb: Playbook, host: str, inputs: dict[str, Any], run_id: int,
                 dry_run: bool) -> dict[str, Any]:
    """Flat variables for one host. Priority: user inputs > host vars > input defaults > vars."""
    layers: list[dict[str, Any]] = [
        {"host": host, "run_id": run_id, "playbook": pb.name, "dry_run": dry_run},
        dict(pb.vars),
        {k: s.default for k, s in pb.inputs.items() if s.default is not None},
        dict(hostvars),
        dict(inputs),
    ]
    flat: dict[str, Any] = {}
    for layer in layers:
        flat.update(layer)
    # Defaults and vars may refer to each other ("{{ draft }}/config.json"). Each template
    # is rendered once, from the playbook's or config's text, against values that are
    # already final: a user's value is data and is never compiled as a template.
    pending = {k: v for k, v in flat.items() if k not in inputs and templating.contains_template(v)}
    for k in pending:
        del flat[k]
    while pending:
        progress = False
        for k, v in list(pending.items()):
            if templating.names_used(v) & set(pending):
                continue  # wait for the vars it uses
            try:
                flat[k] = templating.render_value(v, flat)
            except templating.TemplateFailure as e:
                flat[k] = templating.unresolved(k, str(e))
            del pending[k]
            progress = True
        if not progress:  # a cycle: each of them is an error when a step uses it
            for k in pending:
                flat[k] = templating.unresolved(k, f"{k!r} refers to itself through "
                                                   f"{', '.join(sorted(pending))}")
            break
    for k, v in list(flat.items()):
        if templating.is_unresolved(v):
            missing = [n for n in templating.names_used(layers_value(layers, k)) if n not in flat]
            if missing:
                flat[k] = templating.unresolved(
                    k, f"host var `{missing[0]}` is not set on {host} (needed by `{k}`)")
    return flat


def layers_value(layers: list[dict[str, Any]], key: str) -> Any:
    """The highest-priority raw (unrendered) value of `key` among the variable layers."""
    for layer in reversed(layers):
        if key in layer:
            return layer[key]
    return None
