"""Who is on a list, and the audit row every refusal leaves.

Apart from `access.py` because the handlers need these, and `access.py` reads the table of
words that names the handlers. A playbook's allowlist is checked where every run starts
(`Engine.prepare`, `AccessConfig.playbook_refusal`), whichever word asked for the run.
"""
from __future__ import annotations

from eaglebot.engine.output import printable
from eaglebot.frontends.chat.command import Command
from eaglebot.frontends.services import Services


def allowed(users: list[str], user: str) -> bool:
    return "*" in users or user in users


async def audit_refusal(services: Services, user: str, cmd: Command, why: str, run_id: int | None = None) -> None:
    """Every refusal is an audit record: an `events` row of kind `access_denied`."""
    if run_id is None and cmd.name in ("cancel", "rerun", "show", "baseline", "ack") and cmd.args != ("last",):
        try:
            run_id = cmd.run_id
        except (ValueError, IndexError):
            run_id = None
    what = services.redactor.text(printable(cmd.text or cmd.name))  # redact before truncating
    reason = services.redactor.text(printable(why))
    await services.store.call(lambda s: s.add_rejection("access_denied", printable(user), f"/eagle {what[:300]}",
                                                        reason, run_id))
