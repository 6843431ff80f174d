"""Who may do what: the access classes of the command words (each word's entry in
`chat/words.py`) and the checks, all pure; the audit row every refusal leaves is
`refusal.audit_refusal`, also importable from here.

The router (`router.admit`) is the one caller of `authorize` for a command, whichever front end
it came from; Slack's buttons call `authorize_approval` for their clicks.
"""
from __future__ import annotations

from eaglebot.config import AccessConfig
from eaglebot.frontends.chat.command import Access, Command
from eaglebot.frontends.chat.refusal import allowed as allowed, audit_refusal as audit_refusal
from eaglebot.frontends.chat.words import BY_NAME, RUN


def command_class(cmd: Command) -> Access:
    """`free` (help, errors), `view`, `operate` or `approve`: the word's entry in `chat/words.py`
    says which; a name with no entry needs an operator (closed by default)."""
    if cmd.name == "error":
        return "free"
    entry = BY_NAME.get(cmd.name, RUN)
    return entry.access_of(cmd.args)


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
        if cmd.name == "run":   # answered in Slack's ack; the engine checks every run of every word again
            return access.playbook_refusal(cmd.playbook or "", user)
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


def _verb(cmd: Command) -> str:
    if cmd.name == "schedule" and cmd.args:
        return f"{cmd.args[0]} schedules"
    if cmd.name == "run":
        return f"run playbooks ({cmd.playbook})"
    entry = BY_NAME.get(cmd.name)
    return (entry.verb or entry.name) if entry else cmd.name

