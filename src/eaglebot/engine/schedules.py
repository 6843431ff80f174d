"""Schedules checked when the config is loaded, not at 3 a.m.: each schedule's playbook
exists, its inputs are valid for that playbook's inputs, its hosts are known. `eagle lint`,
`eagle doctor`, `eagle schedule list` and the scheduler of `eagle serve` all ask here, and
each problem names the config file and the schedule's line.

`playbook: tune` (a reserved word, so never a playbook's name) is a nightly `eagle tune`: its
inputs are the tuning's (`TUNE_KEYS`: the playbook it relaunches, batch sizes, budget, ...; `inputs`
the playbook's own), on one host; it proposes, it never applies, so `apply` is refused."""
from __future__ import annotations

from dataclasses import dataclass

from eaglebot.config import Settings, yaml_line
from eaglebot.errors import UsageError
from eaglebot.engine.playbook import find_playbook, resolve_inputs
from eaglebot.engine.registry import SkillRegistry


TUNE = "tune"
TUNE_KEYS = ("playbook", "batch_sizes", "budget", "repeats", "steps", "topk", "draft_tokens", "max_launches",
             "flap_trace", "flap_settle", "inputs")


def tune_problems(inputs: dict[str, object], hosts: list[str], settings: Settings,
                  registry: SkillRegistry | None) -> list[str]:
    out = []
    if "apply" in inputs:
        out.append("a scheduled tune proposes a new config and never applies it: remove `apply` "
                   "(the proposal's button or `eagle tune apply RUN` deploys it after an approval)")
    unknown = [k for k in inputs if k not in TUNE_KEYS and k != "apply"]
    if unknown:
        out.append(f"tune takes no input {unknown[0]!r} (its inputs: {', '.join(TUNE_KEYS)})")
    if len(hosts) != 1:
        out.append("a scheduled tune tunes one host: give exactly one in hosts")
    name = inputs.get("playbook")
    if not isinstance(name, str):
        out.append("a scheduled tune needs inputs.playbook, the playbook it relaunches (e.g. relaunch)")
        return out
    try:
        pb = find_playbook(name, settings.playbooks_path, registry)
    except UsageError as e:
        return [*out, str(e)]
    given = inputs.get("inputs")
    if given is not None and not isinstance(given, dict):
        out.append("inputs.inputs is a mapping of the playbook's own inputs")
    elif given:
        try:
            resolve_inputs(pb, dict(given))
        except UsageError as e:
            out.append(str(e))
    return out


@dataclass(frozen=True)
class ScheduleProblem:
    name: str
    where: str        # "path/eagle.yaml:42"
    message: str

    def __str__(self) -> str:
        return f"{self.where}: schedule {self.name!r}: {self.message}"


def check_schedules(settings: Settings, registry: SkillRegistry | None = None) -> list[ScheduleProblem]:
    """Every problem of every configured schedule (empty when all can run)."""
    source = settings.source
    try:
        text = source.read_text() if source else ""
    except OSError:
        text = ""
    problems: list[ScheduleProblem] = []
    seen: set[str] = set()
    for i, cfg in enumerate(settings.schedules):
        line = yaml_line(text, ("schedules", i)) if text else None
        where = f"{source or 'eagle.yaml'}" + (f":{line}" if line else "")

        def bad(msg: str) -> None:
            problems.append(ScheduleProblem(cfg.name, where, msg))

        if cfg.name in seen:
            bad("another schedule has the same name")
        seen.add(cfg.name)
        try:
            settings.resolve_hosts(list(cfg.hosts) or None)
        except UsageError as e:
            bad(str(e))
        if cfg.playbook == TUNE:
            for msg in tune_problems(dict(cfg.inputs), list(cfg.hosts), settings, registry):
                bad(msg)
            continue
        try:
            pb = find_playbook(cfg.playbook, settings.playbooks_path, registry)
        except UsageError as e:
            bad(str(e))
            continue
        try:
            resolve_inputs(pb, dict(cfg.inputs))
        except UsageError as e:
            bad(str(e))
    return problems
