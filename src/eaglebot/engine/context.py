"""The variables a run's steps see on one host, rendered once before the first step."""
from __future__ import annotations

import re
from typing import Any, Callable

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
                flat[k] = templating.unresolved(k, missing_host_var(missing[0], host, pb, k),
                                                (missing[0], _given_as(missing[0], pb, k)))
    return flat


def _given_as(name: str, pb: Playbook, needed_by: str | None = None) -> str | None:
    """The input that would give a missing variable: itself, or the input whose default needs it."""
    return name if name in pb.inputs else needed_by if needed_by in pb.inputs else None


def missing_host_var(name: str, host: str, pb: Playbook, needed_by: str | None = None) -> str:
    """The one message for a variable a step needs that neither the host nor the user gave."""
    return missing_host_vars([(name, _given_as(name, pb, needed_by))], host)


def missing_host_vars(found: list[tuple[str, str | None]], host: str) -> str:
    """`missing_host_var`'s message for every variable missing on host at once:
    (name, the input that would give it) each."""
    ways = " ".join(f"-e {g}=..." for g in dict.fromkeys(g for _, g in found if g))
    how = f" or pass {ways}" if ways else ""
    if len(found) == 1:
        return f"host var `{found[0][0]}` is not set on {host}; set it in eagle.yaml under hosts.{host}.vars{how}"
    names = ", ".join(f"`{n}`" for n, _ in found[:-1]) + f" and `{found[-1][0]}`"
    return f"host vars {names} are not set on {host}; set them in eagle.yaml under hosts.{host}.vars{how}"


_UNDEFINED = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)' is undefined")
# Stands in for a var found missing, so the next pass finds the next one (compared by identity:
# a var may hold the same text, and an undefined value's == raises).
_PLACEHOLDER = "<missing>"
_Found = tuple[str, tuple[str, str | None]]   # (the ctx key to stand in for, (missing var, its input))


def missing_var_error(pb: Playbook, ctx: dict[str, Any], host: str,
                      shell_param: Callable[[str, str], bool] = lambda skill, key: False) -> str | None:
    """Before any step runs: every variable a step that would run needs and nobody set, in one
    sentence (`missing_host_vars`), else None. A step whose `when` is false is not asked; a
    name a step registers is left for the run (its value comes later). Each pass over the
    steps finds the first missing variable of some template; a placeholder then stands in for
    it and the next pass looks again, until none is left (the steps as they would render)."""
    registered = {s.register_ for s in (*pb.steps, *pb.always) if s.register_}
    markers: dict[str, _Found] = {}
    for k, v in ctx.items():
        if templating.is_unresolved(v):
            reason, missing = templating.unresolved_reason(v)
            if missing is not None:
                markers[reason] = (k, missing)
    probe = dict(ctx)
    found: dict[str, str | None] = {}
    for _ in range(len(ctx) + 64):   # each pass stands in for one more name: bounded
        hit = _first_missing(pb, probe, registered, shell_param, markers)
        if hit is None or probe.get(hit[0]) is _PLACEHOLDER:
            break
        key, (name, given_as) = hit
        found.setdefault(name, given_as)
        probe[key] = _PLACEHOLDER
    return missing_host_vars(list(found.items()), host) if found else None


def _first_missing(pb: Playbook, ctx: dict[str, Any], registered: set[str], shell_param: Callable[[str, str], bool],
                   markers: dict[str, _Found]) -> _Found | None:
    """The first template of a step that would run that fails on a variable nobody set."""
    for step in (*pb.steps, *pb.always):
        failures: list[str] = []
        if step.when is not None:
            try:
                if not templating.evaluate(step.when, ctx):
                    continue
            except templating.TemplateFailure as e:
                failures.append(str(e))
        for key, value in step.with_.items():
            try:
                templating.render_value(value, ctx, shell=shell_param(step.skill, key))
            except templating.TemplateFailure as e:
                failures.append(str(e))
        for msg in failures:
            for reason, marker in markers.items():
                if reason in msg and ctx.get(marker[0]) is not _PLACEHOLDER:
                    return marker
            m = _UNDEFINED.search(msg)
            if m and m.group(1) not in registered and m.group(1) not in ctx:
                return m.group(1), (m.group(1), _given_as(m.group(1), pb))
    return None


def explain_undefined(msg: str, pb: Playbook, ctx: dict[str, Any], host: str,
                      registered: set[str] | None = None) -> str | None:
    """`missing_host_var`'s message when a template failure `msg` is a variable nobody set
    (not one a step registers), else None."""
    if msg.startswith("host var `"):
        return msg
    if registered is None:
        registered = {s.register_ for s in (*pb.steps, *pb.always) if s.register_}
    m = _UNDEFINED.search(msg)
    if m and m.group(1) not in registered and m.group(1) not in ctx:
        return missing_host_var(m.group(1), host, pb)
    return None


def layers_value(layers: list[dict[str, Any]], key: str) -> Any:
    """The highest-priority raw (unrendered) value of `key` among the variable layers."""
    for layer in reversed(layers):
        if key in layer:
            return layer[key]
    return None
