"""Who may do what: the access classes of the command words and the checks, all pure,
plus the audit row every refusal leaves.

The router (`router.admit`) is the one caller of `authorize` for a command, whichever front end
it came from; Slack's buttons call `authorize_approval` for their clicks.
"""
from __future__ import annotations

from eaglebot.config import AccessConfig
from eaglebot.engine.output import printable
from eaglebot.frontends.chat import tuning
from eaglebot.frontends.chat.grammar import SCHEDULE_OPERATIONS, Command
from eaglebot.frontends.services import Services

# Access classes of the command words: a new word is classified by adding it to this set.
# A word not in it needs an operator (closed by default).
VIEW_COMMANDS = {"playbooks", "hosts", "history", "show", "status", "logs", "schedule", "trend", "fleet", *tuning.VIEW}
APPROVE_COMMANDS = {"reload"}   # the bot's own configuration: approvers only


def allowed(users: list[str], user: str) -> bool:
    return "*" in users or user in users


def command_class(cmd: Command) -> str:
    """`free` (help, errors), `view`, `operate` or `approve`."""
    if cmd.name in ("help", "error"):
        return "free"
    if cmd.name in APPROVE_COMMANDS:
        return "approve"
    if cmd.name == "schedule" and cmd.args and cmd.args[0] in SCHEDULE_OPERATIONS:
        return "operate"
    return "view" if cmd.name in VIEW_COMMANDS else "operate"


def authorize(access: AccessConfig, cmd: Command, user: str, *, configured: bool = True) -> str | None:
    """None when `user` may do `cmd`, else the sentence to show them (naming the eagle.yaml key)."""
    kind = command_class(cmd)
    if kind == "free":
        return None
    if kind == "approve":
        if not allowed(access.approvers, user):
            return (f"only approvers can {_verb(cmd)}; add your Slack user id ({user}) to "
                    "access.approvers in eagle.yaml")
        return None
    if kind == "operate":
        if not allowed(access.operators, user):
            if not configured:
                return (f"running is closed by default: eagle.yaml has no `access` section, so Slack users may only "
                        f"view; to {_verb(cmd)}, add your Slack user id ({user}) to access.operators in eagle.yaml")
            return f"only operators can {_verb(cmd)}; add your Slack user id ({user}) to access.operators in eagle.yaml"
        if cmd.name == "run" and cmd.force and not allowed(access.approvers, user):
            return (f"only approvers can run on a quarantined host (--force); add your Slack user id ({user}) "
                    f"to access.approvers in eagle.yaml")
        if cmd.name == "run":
            return authorize_playbook(access, cmd.playbook or "", user)
        return None
    if not (allowed(access.viewers, user) or allowed(access.operators, user)
            or allowed(access.approvers, user)):
        return (f"only viewers can use /eagle {cmd.name}; add your Slack user id ({user}) to access.viewers "
                "in eagle.yaml")
    return None


def authorize_approval(access: AccessConfig, user: str, requester: str | None, *,
                       configured: bool = True) -> str | None:
    """None when `user` may approve or deny a confirm step of a run `requester` started."""
    if not allowed(access.approvers, user):
        if not configured:
            return ("approving is closed by default: eagle.yaml has no `access` section; add your Slack user id "
                    f"({user}) to access.approvers in eagle.yaml")
        return f"only approvers can approve or deny; add your Slack user id ({user}) to access.approvers in eagle.yaml"
    if requester and user == requester and not access.self_approval:
        return ("you requested this run, so you cannot approve its confirm steps yourself; ask another approver "
                "(or set access.self_approval: true in eagle.yaml)")
    return None


def authorize_playbook(access: AccessConfig, playbook: str, user: str) -> str | None:
    allow = access.playbooks.get(playbook)
    if allow is not None and not allowed(allow, user):
        return f"you are not on the allowlist of playbook {playbook!r} (access.playbooks.{playbook})"
    return None


def _verb(cmd: Command) -> str:
    if cmd.name == "schedule" and cmd.args:
        return f"{cmd.args[0]} schedules"
    return {"run": f"run playbooks ({cmd.playbook})", "cancel": "cancel runs", "rerun": "re-run runs",
            "baseline": "set baselines", "bisect": "bisect runs", "sweep": "run sweeps",
            "ack": "acknowledge regressions", "reload": "reload the configuration"}.get(cmd.name, cmd.name)


async def audit_refusal(services: Services, user: str, cmd: Command, why: str, run_id: int | None = None) -> None:
    """Every refusal is an audit record: an `events` row of kind `access_denied`."""
    if run_id is None and cmd.name in ("cancel", "rerun", "show", "baseline", "ack") and cmd.args != ("last",):
        try:
            run_id = cmd.run_id
        except (ValueError, IndexError):
            run_id = None
    what = services.redactor.text(printable(cmd.text or cmd.name))  # redact before truncating
    await services.store.add_rejection("access_denied", printable(user), f"/eagle {what[:300]}",
                                       services.redactor.text(printable(why)), run_id)
