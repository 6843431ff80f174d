"""Schedules checked when the config is loaded, not at 3 a.m.: each schedule's playbook
exists, its inputs are valid for that playbook's inputs, its hosts are known. `eagle lint`,
`eagle doctor`, `eagle schedule list` and the scheduler of `eagle serve` all ask here, and
each problem names the config file and the schedule's line."""
from __future__ import annotations

from dataclasses import dataclass

from eaglebot.config import Settings, yaml_line
from eaglebot.errors import UsageError
from eaglebot.engine.playbook import find_playbook, resolve_inputs
from eaglebot.engine.registry import SkillRegistry


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
