"""The `/eagle` command router: one grammar for Slack, `eagle chat` and `eagle console`.

`parse` is pure and cheap: the Slack handler parses, checks access (also pure) and
acks before anything touches the DB or a host; `handle` then does the work and
returns a `Reply`: plain text plus the same answer as typed data (`chat/reply.py`), which
each front end renders its own way. Runs go through `Engine.start`, the same entry point
as the CLI. This package imports no other front end.
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable, Protocol

from eaglebot.config import AccessConfig, Settings
from eaglebot.errors import EagleError, UsageError
from eaglebot.engine.output import printable
from eaglebot.engine.playbook import RESERVED, Playbook, load_playbook, playbook_files
from eaglebot.engine.redact import Redactor
from eaglebot.engine.registry import SkillRegistry
from eaglebot.engine.runner import Approver, Observer, RunRequest
from eaglebot.frontends.chat import tuning
from eaglebot.frontends.chat.reply import (CancelRequested, LogTail, Note, Reply, RunShown, error_reply,
                                           listing)
from eaglebot.frontends.format import describe_inputs, fmt_time, history_text, show_text, since, table
from eaglebot.frontends.services import Services
from eaglebot.history.view import HistoryRow, RunView, load_history
from eaglebot.store import Store

__all__ = ["Caller", "Command", "Frontend", "Reply", "authorize", "authorize_approval", "command_class", "error_reply",
           "handle", "parse", "unescape"]

MAX_TEXT = 4000          # a slash command is at most 4000 characters in Slack too
MAX_HISTORY = 50
LOG_LINES = 60
LOGS_PLAYBOOK = "server-logs"   # shipped: one read-only server.logs step

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")              # playbook / skill / metric-ish
_HOSTS = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(,[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})*$")
_METRIC = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,99}$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

# Access classes of the command words: a new word is classified by adding it to one set.
# A word in neither set needs an operator (closed by default).
VIEW_COMMANDS = {"playbooks", "hosts", "history", "show", "status", "logs", "schedule", "trend", *tuning.VIEW}
OPERATE_COMMANDS = {"run", "cancel", "rerun", "baseline", "pause", "resume", *tuning.OPERATE}
SCHEDULE_OPERATIONS = {"pause", "resume"}   # `/eagle schedule pause NAME` operates; `/eagle schedule` views

USAGE = """\
/eagle <playbook> [host[,host]] [key=value ...] [--dry-run]   run a playbook (e.g. relaunch gpu-01 spec_steps=5)
/eagle help [playbook|skill]        this help, or a playbook's inputs / a skill's parameters
/eagle playbooks | hosts            what can run, and where
/eagle history [playbook] [host] [n]
/eagle show ID                      one run: steps, metrics, warnings, regressions
/eagle status                       running runs and busy hosts
/eagle cancel ID | rerun ID         stop a run (its always-steps still run) / run it again
/eagle logs HOST                    tail of the inference server's log on a host
/eagle schedule [pause|resume NAME] scheduled runs and their next fire time; pause or resume one
/eagle baseline set ID              make a run the reference for its playbook + host
/eagle trend PLAYBOOK HOST METRIC   plot a metric over recent runs
""" + tuning.HELP


# -- parsing (pure) -----------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    name: str                                   # a built-in word, "run" or "error"
    args: tuple[str, ...] = ()
    playbook: str | None = None
    hosts: tuple[str, ...] = ()
    inputs: tuple[tuple[str, str], ...] = ()
    dry_run: bool = False
    error: str | None = None
    text: str = ""

    @property
    def run_id(self) -> int:
        return int(self.args[-1].lstrip("#"))


def unescape(text: str) -> str:
    """Undo Slack's escaping of &, < and > (in that order: `&amp;lt;` stays `&lt;`)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


_REDACT = Redactor()  # built-in token patterns + this process's secrets: before any truncation


def _shown(tok: str, n: int = 40) -> str:
    tok = _CONTROL.sub("?", _REDACT.text(tok))
    return repr(tok if len(tok) <= n else tok[:n] + "…")


def _err(text: str, msg: str) -> Command:
    return Command("error", error=msg, text=text[:200])


def _int_arg(word: str, args: list[str], text: str) -> Command:
    if len(args) != 1 or not re.fullmatch(r"#?\d{1,12}", args[0]):
        return _err(text, f"usage: /eagle {word} ID (a run number, e.g. `/eagle {word} 42`)")
    return Command(word, (args[0].lstrip("#"),), text=text)


def parse(text: str) -> Command:
    """Slash text -> Command. Pure: no DB, no host, no settings. Never raises."""
    if len(text) > MAX_TEXT:
        return _err(text, f"the command is too long ({len(text)} characters; the limit is {MAX_TEXT})")
    text = unescape(text).strip()
    if _CONTROL.search(text.replace("\x00", "")):
        return _err(text, "the command contains control characters; type it as plain text")
    cmd = _parse_words(text)
    # A NUL inside an input's value goes on to the engine, which refuses it naming the input
    # (an input error with its `rejected` row, like any other invalid value); anywhere else it is
    # refused here.
    names = (cmd.playbook or "") + "".join(cmd.hosts) + "".join(k for k, _ in cmd.inputs)
    if "\x00" in text and cmd.name != "error" and (cmd.name != "run" or "\x00" in names):
        return _err(text, "the command contains control characters; type it as plain text")
    return cmd


def _parse_words(text: str) -> Command:
    try:
        words = shlex.split(text)
    except ValueError as e:
        return _err(text, f"cannot read the command: {e} (quotes must be balanced, e.g. key=\"a b\")")
    if not words:
        return Command("help", text=text)
    word, args = words[0], words[1:]
    low = word.lower()
    if low in RESERVED:
        return _builtin(low, args, text)
    if not _NAME.match(word) or word.endswith((".yaml", ".yml")):
        return _err(text, f"unknown command {_shown(word)}: try `/eagle help` or `/eagle playbooks`")
    return _parse_run(word, args, text)


def _builtin(word: str, args: list[str], text: str) -> Command:
    if word == "schedule" and args and args[0] in SCHEDULE_OPERATIONS:
        if len(args) != 2 or not _NAME.match(args[1]):
            return _err(text, f"usage: /eagle schedule {args[0]} NAME (see `/eagle schedule`)")
        return Command(word, (args[0], args[1]), text=text)
    if word in ("playbooks", "hosts", "status", "schedule"):
        if args:
            return _err(text, f"/eagle {word} takes no arguments (got {_shown(args[0])})")
        return Command(word, text=text)
    if word == "help":
        if len(args) > 1 or (args and not _NAME.match(args[0])):
            return _err(text, "usage: /eagle help [playbook|skill]")
        return Command(word, tuple(args), text=text)
    if word == "show" and args == ["last"]:
        return Command(word, ("last",), text=text)
    if word in ("show", "cancel", "rerun"):
        return _int_arg(word, args, text)
    if word == "history":
        if len(args) > 3:
            return _err(text, "usage: /eagle history [playbook] [host] [n]")
        names: list[str] = []
        n = "10"
        for a in args:
            if a.isdigit() and len(a) <= 6:
                n = str(max(1, min(int(a), MAX_HISTORY)))
            elif _HOSTS.match(a) and "," not in a and len(names) < 2:
                names.append(a)
            else:
                return _err(text, f"usage: /eagle history [playbook] [host] [n] (got {_shown(a)})")
        return Command(word, (*names, n), text=text)
    if word == "logs":
        if len(args) != 1 or not _HOSTS.match(args[0]) or "," in args[0]:
            return _err(text, "usage: /eagle logs HOST")
        return Command(word, tuple(args), text=text)
    if word == "baseline":
        if len(args) != 2 or args[0] != "set" or not re.fullmatch(r"#?\d{1,12}", args[1]):
            return _err(text, "usage: /eagle baseline set ID")
        return Command(word, ("set", args[1].lstrip("#")), text=text)
    if word == "trend":
        if (len(args) != 3 or not _NAME.match(args[0]) or not _HOSTS.match(args[1]) or "," in args[1]
                or not _METRIC.match(args[2])):
            return _err(text, "usage: /eagle trend PLAYBOOK HOST METRIC (e.g. `/eagle trend bench gpu-01 output_throughput`)")
        return Command(word, tuple(args), text=text)
    if word in tuning.WORDS:
        targs, why = tuning.parse_tuning(word, args)
        return _err(text, why) if why else Command(word, targs, text=text)
    return _err(text, f"unknown command {_shown(word)}")  # pragma: no cover - RESERVED is covered above


def _parse_run(playbook: str, args: list[str], text: str) -> Command:
    hosts: tuple[str, ...] = ()
    inputs: dict[str, str] = {}
    dry = False
    for i, tok in enumerate(args):
        if tok in ("--dry-run", "--dryrun", "--check"):
            dry = True
        elif tok.startswith("-"):
            return _err(text, f"unknown option {_shown(tok)}: the only option is --dry-run")
        elif "=" in tok:
            key, value = tok.split("=", 1)
            if not _KEY.match(key):
                return _err(text, f"{_shown(key)} is not an input name: inputs are key=value with a plain name")
            if key in inputs:
                return _err(text, f"input {key!r} is given twice")
            inputs[key] = value
        elif i == 0:
            if not _HOSTS.match(tok):
                return _err(text, f"{_shown(tok)} is not a host name: hosts are letters, digits, '.', '_', '-', "
                                  "separated by commas")
            hosts = tuple(h for h in tok.split(",") if h)
        else:
            return _err(text, f"unexpected argument {_shown(tok)}: after the hosts, inputs are key=value "
                              f"(see `/eagle help {playbook}`)")
    return Command("run", playbook=playbook, hosts=hosts, inputs=tuple(inputs.items()), dry_run=dry, text=text)


# -- access (pure) ------------------------------------------------------------------------

def allowed(users: list[str], user: str) -> bool:
    return "*" in users or user in users


def command_class(cmd: Command) -> str:
    """`free` (help, errors), `view` or `operate`."""
    if cmd.name in ("help", "error"):
        return "free"
    if cmd.name == "schedule" and cmd.args and cmd.args[0] in SCHEDULE_OPERATIONS:
        return "operate"
    return "view" if cmd.name in VIEW_COMMANDS else "operate"


def authorize(access: AccessConfig, cmd: Command, user: str, *, configured: bool = True) -> str | None:
    """None when `user` may do `cmd`, else the sentence to show them (naming the eagle.yaml key)."""
    kind = command_class(cmd)
    if kind == "free":
        return None
    if kind == "operate":
        if not allowed(access.operators, user):
            if not configured:
                return (f"running is closed by default: eagle.yaml has no `access` section, so Slack users may only "
                        f"view; to {_verb(cmd)}, add your Slack user id ({user}) to access.operators in eagle.yaml")
            return f"only operators can {_verb(cmd)}; add your Slack user id ({user}) to access.operators in eagle.yaml"
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
            "ack": "acknowledge regressions"}.get(cmd.name, cmd.name)


# -- replies -----------------------------------------------------------------------------

class Frontend(Protocol):
    """What a front end gives the router for runs: a progress view and who approves."""

    def observer(self, req: RunRequest) -> Observer | None: ...

    def approver(self, req: RunRequest, observer: Observer | None) -> Approver | None: ...


class _NoFrontend:
    def observer(self, req: RunRequest) -> Observer | None:
        return None

    def approver(self, req: RunRequest, observer: Observer | None) -> Approver | None:
        return None


@dataclass
class Caller:
    user: str
    channel: str | None = None
    origin: str = "slack"
    check_access: bool = True
    frontend: Frontend = field(default_factory=_NoFrontend)


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


async def handle(services: Services, cmd: Command | str, caller: Caller) -> Reply:
    """Do what `/eagle <text>` asks. Never raises: errors become an error Reply."""
    if isinstance(cmd, str):
        cmd = parse(cmd)
    if cmd.name == "error":
        return error_reply(services.redactor.text(cmd.error or "invalid command"))
    if caller.check_access:
        why = authorize(services.settings.access, cmd, caller.user, configured=services.settings.access_configured)
        if why:
            await audit_refusal(services, caller.user, cmd, why)
            return error_reply(why)
    try:
        return await _HANDLERS[cmd.name](services, cmd, caller)
    except EagleError as e:
        return error_reply(services.redactor.text(str(e)), e.exit_code)
    except Exception as e:  # a bug must not take the bot down; the user gets one line
        logging.getLogger("eaglebot.chat").exception("command %r failed", cmd.text)
        return error_reply(f"internal error: {type(e).__name__}: {services.redactor.text(str(e))[:300]}", 1)


# -- handlers ----------------------------------------------------------------------------

def _playbooks(settings: Settings) -> dict[str, Path]:
    return playbook_files(settings.playbooks_path)


def _load(services: Services, name: str) -> Playbook:
    files = _playbooks(services.settings)
    if name not in files:
        raise UsageError(f"unknown playbook {name!r} (known: {', '.join(files) or 'none'})")
    path = files[name]
    st = path.stat()
    return _load_cached(str(path), st.st_mtime_ns, st.st_size, services.registry).model_copy(deep=True)


@functools.lru_cache(maxsize=256)
def _load_cached(path: str, mtime_ns: int, size: int, registry: SkillRegistry) -> Playbook:
    """Parsing and validating YAML on every slash command is the bot's busiest work: reuse it
    until the file changes (the key holds its mtime and size, and the registry it was checked
    against)."""
    return load_playbook(path, registry)


async def _help(services: Services, cmd: Command, caller: Caller) -> Reply:
    if not cmd.args:
        return listing(f"{USAGE}\nskills: {', '.join(services.registry)}   (/eagle help SKILL)")
    name = cmd.args[0]
    files = await asyncio.to_thread(_playbooks, services.settings)
    if name in files:
        pb = await asyncio.to_thread(load_playbook, files[name], services.registry)
        return listing(_playbook_help(pb))
    if name in services.registry:
        return listing(services.registry.describe(name))
    raise UsageError(f"no playbook or skill named {name!r} (see /eagle playbooks)")


def _playbook_help(pb: Playbook) -> str:
    lines = [f"{pb.name}: {pb.description}".rstrip(": ")]
    inputs = describe_inputs(pb)
    lines += ["inputs:"] + [f"  {line}" for line in inputs] if inputs else ["inputs: none"]
    lines.append("steps: " + ", ".join(s.label for s in pb.steps))
    if pb.examples:
        lines.append("examples:")
        lines += [f"  {e}" for e in pb.examples]
    lines.append(f"usage: /eagle {pb.name} [host[,host]] [key=value ...] [--dry-run]")
    return "\n".join(lines)


async def _list_playbooks(services: Services, cmd: Command, caller: Caller) -> Reply:
    def collect() -> list[list[str]]:
        rows = []
        for name, path in _playbooks(services.settings).items():
            try:
                pb = load_playbook(path, services.registry)
                rows.append([name, pb.description[:80], ", ".join(pb.inputs) or "-"])
            except EagleError as e:
                rows.append([name, f"INVALID: {str(e)[:80]}", "-"])
        return rows

    rows = await asyncio.to_thread(collect)
    text = table(["playbook", "description", "inputs"], rows) if rows else "no playbooks"
    return listing(text, "Playbooks")


async def _hosts(services: Services, cmd: Command, caller: Caller) -> Reply:
    s = services.settings
    locks = {lk["host"]: lk["run_id"] for lk in await services.store.locks()}
    rows = []
    for name, h in s.hosts.items():
        where = "local" if h.transport == "local" else f"{h.user + '@' if h.user else ''}{h.address}:{h.port}"
        groups = ",".join(g for g, m in s.groups.items() if name in m) or "-"
        rows.append([name, where, groups, f"busy (run #{locks[name]})" if name in locks else "idle"])
    text = table(["host", "address", "groups", "state"], rows)
    return listing(text, "Hosts")


async def _history(services: Services, cmd: Command, caller: Caller) -> Reply:
    *names, n = cmd.args
    settings = services.settings
    playbook = host = None
    if names:
        files = await asyncio.to_thread(_playbooks, settings)
        first = names[0]
        if len(names) == 1 and first not in files and (first in settings.hosts or first in settings.groups):
            host = first
        else:
            playbook = first
            host = names[1] if len(names) > 1 else None

    def query(s: Store) -> tuple[list[HistoryRow], str]:
        from eaglebot.history.incidents import open_text

        return load_history(s, playbook=playbook, host=host, limit=int(n)), open_text(s, playbook=playbook, host=host)

    rows, open_incidents = await services.store.call(query)
    title = "History" + (f" of {playbook}" if playbook else "") + (f" on {host}" if host else "")
    return listing(history_text(rows) + (f"\n\n{open_incidents}" if open_incidents else ""), title, public=True)


async def _show(services: Services, cmd: Command, caller: Caller) -> Reply:
    if cmd.args == ("last",):
        last = await services.store.last_run_id()
        if last is None:
            raise UsageError("no runs yet (see /eagle playbooks)")
        cmd = Command("show", (str(last),), text=cmd.text)
    rid = cmd.run_id
    view = await services.store.call(lambda s: RunView.load(s, rid))
    if view is None:
        raise UsageError(f"no run #{rid} (see /eagle history)")
    return Reply(show_text(view), RunShown(view), public=True, run_id=rid)


async def _status(services: Services, cmd: Command, caller: Caller) -> Reply:
    runs = await services.store.running_runs()
    locks = await services.store.locks()
    rows = [[f"#{r['id']}", r["playbook"], ",".join(r.get("hosts") or []) or "-", r.get("actor") or "-",
             r.get("origin") or "-", fmt_time(r.get("started_at")), since(r.get("started_at"))] for r in runs]
    parts = [table(["id", "playbook", "hosts", "who", "via", "started (UTC)", "since"], rows)
             if rows else "no runs are running"]
    if locks:
        parts.append("busy hosts: " + ", ".join(f"{lk['host']} (run #{lk['run_id']}"
                                                f"{': ' + lk['reason'] if lk['reason'] else ''})" for lk in locks))
    else:
        parts.append("busy hosts: none")
    text = "\n\n".join(parts)
    return listing(text, "Status", public=True)


async def _cancel(services: Services, cmd: Command, caller: Caller) -> Reply:
    rid = cmd.run_id
    run = await services.store.get_run(rid)
    if run is None:
        raise UsageError(f"no run #{rid} (see /eagle status)")
    if not await services.store.request_cancel(rid):
        raise UsageError(f"run #{rid} is not running (it {run['status']})")
    services.engine.cancel(rid)  # at once when it runs here; other processes see the DB flag
    await services.store.add_event(rid, "cancel_requested", f"by {caller.user}")
    text = f"cancel requested for run #{rid} ({run['playbook']}) by {caller.user}; its always-steps still run"
    return Reply(text, CancelRequested(rid, run["playbook"], caller.user), public=True, run_id=rid)


async def _start(services: Services, req: RunRequest, caller: Caller) -> Reply:
    observer = caller.frontend.observer(req)
    approver = caller.frontend.approver(req, observer)
    run_id, task = await services.engine.start(req, observer, approver)
    name = req.playbook.name if isinstance(req.playbook, Playbook) else req.playbook
    text = f"run #{run_id}: {name} started" + (" (dry-run)" if req.dry_run else "")
    return Reply(text, Note(text), public=True, run_id=run_id, task=task, request=req)


async def _run(services: Services, cmd: Command, caller: Caller) -> Reply:
    try:
        pb = await asyncio.to_thread(_load, services, cmd.playbook or "")
    except UsageError as e:
        req = RunRequest(cmd.playbook or "?", list(cmd.hosts), dict(cmd.inputs), actor=caller.user,
                         origin=caller.origin, dry_run=cmd.dry_run, channel=caller.channel, text=cmd.text)
        await services.engine.record_rejected(req, e)
        raise
    req = RunRequest(pb, list(cmd.hosts) or None, dict(cmd.inputs), actor=caller.user, origin=caller.origin,
                     dry_run=cmd.dry_run, channel=caller.channel, text=cmd.text)
    return await _start(services, req, caller)


async def _rerun(services: Services, cmd: Command, caller: Caller) -> Reply:
    rid = cmd.run_id
    run = await services.store.get_run(rid)
    if run is None:
        raise UsageError(f"no run #{rid} (see /eagle history)")
    if caller.check_access and (why := authorize_playbook(services.settings.access, run["playbook"], caller.user)):
        await audit_refusal(services, caller.user, cmd, why, rid)
        return error_reply(why)
    pb = await asyncio.to_thread(_load, services, run["playbook"])
    req = RunRequest(pb, list(run.get("hosts") or []) or None, dict(run.get("inputs") or {}),
                     actor=caller.user, origin=caller.origin, dry_run=bool(run.get("dry_run")),
                     rerun_of=rid, channel=caller.channel)
    return await _start(services, req, caller)


async def _logs(services: Services, cmd: Command, caller: Caller) -> Reply:
    """`/eagle logs HOST`: the shipped `server-logs` playbook, run through the engine like any
    other (a run row, the step's output in the audit store, redaction), silently: the reply is
    the log. Its only skill is read-only, so it takes no host lock and works mid-relaunch."""
    host = cmd.args[0]
    req = RunRequest(LOGS_PLAYBOOK, [host], {"lines": LOG_LINES}, actor=caller.user, origin=caller.origin,
                     channel=caller.channel)
    outcome = await services.engine.run(req)
    steps = await services.store.steps(outcome.run_id)
    step = next((s for s in steps if s["skill"] == "server.logs"), None)
    if outcome.status != "succeeded" or step is None:
        why = outcome.error or f"{host}: could not read the server log"
        return error_reply(f"{why} (run #{outcome.run_id})", code=outcome.exit_code or 1)
    data = json.loads(step["data"] or "{}")
    text = f"== {data.get('log_path', '?')}\n" + (step["output"] or "").strip("\n")
    return Reply(text, LogTail(host, text, LOG_LINES), public=True, run_id=outcome.run_id)


async def _schedule(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.frontends.scheduler import schedule_rows, schedule_state

    if cmd.args:
        return await _schedule_pause(services, cmd, caller)
    rows = await services.store.call(lambda s: schedule_rows(services.settings, s))
    if not rows:
        text = "no schedules configured (add `schedules:` to eagle.yaml)"
    else:
        text = table(["name", "playbook", "hosts", "cron", "tz", "next fire", "last run", "state"],
                     [[r["name"], r["playbook"], ",".join(r.get("hosts") or []) or "-", r["cron"],
                       r.get("timezone") or "UTC", r.get("next_fire") or "-",
                       f"#{r['last_run_id']} {r.get('last_status') or ''}".strip() if r.get("last_run_id") else "-",
                       schedule_state(r)]
                      for r in rows])
        errors = [e for r in rows for e in r.get("errors") or []]
        if errors:
            text += "\n\n" + "\n".join(errors)
    return listing(text, "Schedules", public=True)


async def _schedule_pause(services: Services, cmd: Command, caller: Caller) -> Reply:
    """`/eagle schedule pause|resume NAME`: persisted in the store, audited, shown by `schedule`."""
    verb, name = cmd.args
    names = [s.name for s in services.settings.schedules]
    if name not in names:
        raise UsageError(f"unknown schedule {name!r} (known: {', '.join(names) or 'none'})")
    paused = verb == "pause"
    changed = await services.store.set_schedule_paused(name, paused, caller.user)
    if not changed:
        raise UsageError(f"schedule {name!r} is already {'paused' if paused else 'active'}")
    await services.store.add_event(None, f"schedule_{'paused' if paused else 'resumed'}", f"{name} by {caller.user}")
    text = (f"schedule {name} paused by {caller.user}: it will not run until `/eagle schedule resume {name}`"
            if paused else f"schedule {name} resumed by {caller.user}")
    return Reply(text, Note(text), public=True)


async def _baseline(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.history.regress import set_baseline

    rid = cmd.run_id
    text = await services.store.call(lambda s: set_baseline(s, rid, caller.user))
    await services.store.add_event(rid, "baseline_set", f"by {caller.user}")
    return Reply(text, Note(text, mark="baseline"), public=True, run_id=rid)


async def _trend(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.frontends.plot import plot_trend

    playbook, host, metric = cmd.args
    out = Path(tempfile.mkdtemp(prefix="eagle-trend-")) / f"{playbook}-{host}-{metric}.png".replace("/", "_")
    path = await services.store.call(lambda s: plot_trend(s, playbook, host, metric, out, limit=30))
    text = f"{metric} of {playbook} on {host} over recent runs: {path}"
    return Reply(text, Note(text), public=True, file=Path(path))


_HANDLERS: dict[str, Callable[[Services, Command, Caller], Awaitable[Reply]]] = {
    "help": _help, "playbooks": _list_playbooks, "hosts": _hosts, "history": _history, "show": _show,
    "status": _status, "cancel": _cancel, "rerun": _rerun, "logs": _logs, "schedule": _schedule,
    "baseline": _baseline, "trend": _trend, "run": _run, **tuning.HANDLERS,
}
