"""The commands that list and check what the config names: playbooks (and `eagle lint`),
skills and hosts."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from eaglebot.errors import UsageError
from eaglebot.frontends.cli.common import print_json
from eaglebot.frontends.cli.common import settings as _settings


def cmd_lint(args: argparse.Namespace) -> int:
    from eaglebot.engine.playbook import lint_playbook, playbook_files, read_playbook_text
    from eaglebot.engine.registry import SkillRegistry

    settings = _settings(args)
    registry = SkillRegistry.from_settings(settings)
    files = args.files or [str(p) for p in playbook_files(settings.playbooks_path).values()]
    bad = 0
    for f in files:
        try:
            pb, problems = lint_playbook(read_playbook_text(f), f, registry)
        except UsageError as e:
            pb, problems = None, [str(e)]
        if pb is None:
            for line in problems:   # every error of the file, not only the first
                print(line, file=sys.stderr)
            bad += 1
            continue
        print(f"ok {f} ({pb.name}: {len(pb.steps)} step{'' if len(pb.steps) == 1 else 's'})")
        if args.files and playbook_files(settings.playbooks_path).get(Path(f).stem, Path()).resolve() != Path(f).resolve():
            print(f"   valid, but not runnable by name: {not_by_name(Path(f), settings.playbooks_path)}")
    if not files:
        print("no playbooks found")
    if not args.files:
        from eaglebot.engine.schedules import check_schedules

        for problem in check_schedules(settings, registry):
            print(str(problem), file=sys.stderr)
            bad += 1
    return 2 if bad else 0


def not_by_name(f: Path, folder: Path | None) -> str:
    """How to run a valid playbook file that `eagle run NAME` does not find."""
    if folder is None:
        how = "set playbooks_dir in eagle.yaml to its folder"
    else:
        how = f"move it into playbooks_dir ({folder})"
    return f"`eagle run {f.stem}` looks in playbooks_dir and the shipped playbooks; {how}, or run `eagle run {f}`"


def cmd_playbooks(args: argparse.Namespace) -> int:
    from eaglebot.engine.playbook import load_playbook, playbook_files
    from eaglebot.engine.registry import SkillRegistry
    from eaglebot.frontends.format import describe_inputs

    settings = _settings(args)
    registry = SkillRegistry.from_settings(settings)
    listing: list[dict[str, Any]] = []
    for name, path in playbook_files(settings.playbooks_path).items():
        try:
            pb = load_playbook(path, registry)
        except UsageError as e:
            listing.append({"name": name, "path": str(path), "error": str(e)})
            continue
        listing.append({"name": name, "path": str(path), "description": pb.description,
                        "inputs": {k: v.model_dump(exclude_none=True) for k, v in pb.inputs.items()},
                        "input_help": describe_inputs(pb), "examples": pb.examples})
    if getattr(args, "json", False):
        print_json(listing)
        return 0
    for p in listing:
        if "error" in p:
            print(f"{p['name']}: INVALID: {p['error']}")
            continue
        print(f"{p['name']}: {p['description']}")
        for line in p["input_help"]:
            print(f"    {line}")
        for ex in p["examples"]:
            print(f"    e.g. {ex}")
    return 0


def cmd_skills(args: argparse.Namespace) -> int:
    from eaglebot.engine.registry import SkillRegistry

    registry = SkillRegistry.from_settings(_settings(args))
    from dataclasses import asdict

    from eaglebot.engine.params_doc import params_doc

    docs = {name: params_doc(registry.get_skill(name).Params) for name in registry}
    listing = [{"name": name, "summary": registry.summary(name), "source": registry.source(name),
                "params": [asdict(p) for p in docs[name]]} for name in registry]
    if getattr(args, "json", False):
        print_json(listing)
        return 0
    for name in registry:
        print(f"{name}: {registry.summary(name)}  [{registry.source(name)}]")
        for p in docs[name]:
            allowed = f"; {p.allowed}" if p.allowed else ""
            print(f"    {p.name}: {p.type} ({p.default}{allowed})")
    return 0


def cmd_hosts(args: argparse.Namespace) -> int:
    from eaglebot.frontends.format import table

    settings = _settings(args)
    rows: list[dict[str, Any]] = []
    # host -> its groups, in the groups' order: one pass over the members (a lookup per host in
    # each group's list was quadratic: 40,000 hosts in a group took 11.8 s)
    member_of: dict[str, list[str]] = {}
    for g, members in settings.groups.items():
        for m in dict.fromkeys(members):
            member_of.setdefault(m, []).append(g)
    for name, h in settings.hosts.items():
        groups = member_of.get(name, [])
        where = "this machine" if h.transport == "local" else f"{h.user + '@' if h.user else ''}{h.address}:{h.port}"
        rows.append({"name": name, "transport": h.transport, "address": where, "groups": groups,
                     "jump": h.jump, "vars": h.vars})
    if getattr(args, "json", False):
        print_json(rows)
        return 0
    from eaglebot.configfile import where_looked

    print(f"config: {settings.source}" if settings.source else f"config: built-in defaults: {where_looked()}")
    print(table(["host", "transport", "address", "groups", "jump"],
                [[r["name"], r["transport"], r["address"], ",".join(r["groups"]) or "-", r["jump"] or "-"]
                 for r in rows]))
    return 0
