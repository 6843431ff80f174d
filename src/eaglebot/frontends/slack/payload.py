"""The shape of a signed Slack request, checked once before Bolt's listeners see it.

Bolt and our listeners read `body["user"]["id"]`, `body["actions"][0]` and the like: a signed
body whose `actions` is a string made Bolt answer 500 with a traceback, a string `user` made
the approval listener crash after the ack. A correct signature proves who sent a request,
not that it has the shape Slack documents, so a body that does not is refused (400).
Unknown keys are allowed: Slack adds fields over time.

The TypedDicts at the end are what the listeners read of a body that passed this check (each
key optional, as Bolt hands over the raw dict).
"""
from __future__ import annotations

from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, ValidationError


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Ref(_Open):
    """`user`, `team`, `channel`, `enterprise` of an interactive payload: an object with an id."""
    id: StrictStr


class _Action(_Open):
    action_id: StrictStr
    block_id: StrictStr | None = None
    value: StrictStr | None = None
    type: StrictStr | None = None
    action_ts: StrictStr | None = None


class _Container(_Open):
    type: StrictStr | None = None
    message_ts: StrictStr | None = None
    channel_id: StrictStr | None = None


class _Authorization(_Open):
    enterprise_id: StrictStr | None = None
    team_id: StrictStr | None = None
    user_id: StrictStr | None = None
    is_enterprise_install: StrictBool | None = None


class Interactive(_Open):
    """Any `payload=` or JSON body with a `type` (buttons, views, shortcuts, events)."""
    type: StrictStr
    user: _Ref | None = None
    team: _Ref | None = None
    enterprise: _Ref | StrictStr | None = None
    channel: _Ref | None = None
    container: _Container | None = None
    view: dict[str, Any] | None = None
    message: dict[str, Any] | None = None
    event: dict[str, Any] | None = None
    actions: list[_Action] | None = None
    authorizations: list[_Authorization] | None = None
    trigger_id: StrictStr | None = None
    response_url: StrictStr | None = None
    team_id: StrictStr | None = None
    enterprise_id: StrictStr | None = None
    is_enterprise_install: StrictBool | StrictStr | None = None


class BlockActions(Interactive):
    user: _Ref
    actions: list[_Action]


class SlashCommand(_Open):
    """A slash command: form fields (Socket Mode: the same keys as JSON), each a string."""
    command: StrictStr
    text: StrictStr = ""
    user_id: StrictStr
    channel_id: StrictStr | None = None
    team_id: StrictStr | None = None
    enterprise_id: StrictStr | None = None
    response_url: StrictStr | None = None
    trigger_id: StrictStr | None = None


def shape_problem(body: object) -> str | None:
    """None when `body` has the shape our listeners and Bolt rely on, else one line saying
    where it does not (field names only: never a value, which may carry a token)."""
    if not isinstance(body, dict):
        return "the body is not an object"
    if "ssl_check" in body and "command" not in body:
        return None
    model: type[_Open]
    if "command" in body:
        model = SlashCommand
    elif body.get("type") == "block_actions":
        model = BlockActions
    elif "type" in body:
        model = Interactive
    else:
        return "neither a command nor a payload"
    try:
        model.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        return f"malformed {body.get('type') or 'command'}: `{where}` {err['msg'].lower()}"
    except RecursionError:
        return "the payload is nested too deeply"
    return None


# -- what the listeners read, once `shape_problem` let the body through ------------------------

class SlashCommandBody(TypedDict, total=False):
    text: str | None
    user_id: str
    channel_id: str | None
    response_url: str | None


class _IdRef(TypedDict, total=False):
    id: str


class _ContainerRef(TypedDict, total=False):
    channel_id: str | None
    message_ts: str | None


class _MessageRef(TypedDict, total=False):
    ts: str


class BlockActionsBody(TypedDict, total=False):
    user: _IdRef
    channel: _IdRef | None
    container: _ContainerRef | None
    message: _MessageRef | None      # the message whose button was clicked (a health alert's, to edit it)
    response_url: str | None


class ActionBody(TypedDict, total=False):
    """One element of `actions`: the button that was clicked."""
    action_id: str
    value: str | None
