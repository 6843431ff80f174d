"""The check a reload makes of a configuration (its skills, every playbook, every schedule),
and its one-line answer for `/eagle reload` outside `eagle serve` (`eagle chat reload`).

Below `eagle serve`'s runtime (`service/reload.py` swaps what this passed) because the chat
front end asks it too, and a front end may not reach up into the service.
"""
from __future__ import annotations

import hashlib

from eaglebot.config import Settings
from eaglebot.engine.playbook import playbook_errors, playbook_files
from eaglebot.engine.registry import SkillRegistry
from eaglebot.engine.schedules import check_schedules
from eaglebot.errors import UsageError


def playbook_digests(settings: Settings) -> dict[str, object]:
    return {name: hashlib.sha256(p.read_bytes()).hexdigest() for name, p in playbook_files(settings.playbooks_path).items()}


def check(settings: Settings) -> tuple[SkillRegistry, dict[str, object]]:
    """The skills, every playbook and every schedule of `settings`, checked; raises UsageError
    (with file:line)."""
    registry = SkillRegistry.from_settings(settings)
    _, bad = playbook_errors(settings.playbooks_path, registry)
    if bad:
        raise bad[0][1]
    problems = check_schedules(settings, registry)
    if problems:
        raise UsageError(str(problems[0]))
    return registry, playbook_digests(settings)


def check_config(settings: Settings) -> str:
    """`/eagle reload` outside `eagle serve` (`eagle chat reload`): the check a reload would
    make, and how to make the running bot reload."""
    registry, playbooks = check(settings)
    where = settings.source or "the built-in defaults"
    return (f"{where}: {len(settings.hosts)} hosts, {len(playbooks)} playbooks, {len(registry)} skills and "
            f"{len(settings.schedules)} schedules check out; a running `eagle serve` applies them on SIGHUP "
            "(systemctl reload eaglebot) or `/eagle reload` in Slack")
