"""The `/eagle` command router: one grammar for Slack, `eagle chat` and `eagle console`.

`parse` is pure and cheap: the Slack handler parses, checks access (also pure) and
acks before anything touches the DB or a host; `handle` then does the work and
returns a `Reply` (text for a terminal, Block Kit blocks for Slack). Runs go through
`Engine.start`, the same entry point as the CLI.
"""
from __future__ import annotations

import asyncio
import functools
import getpass
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from eaglebot.frontends.slack import blocks as bk
from eaglebot.config import AccessConfig, Settings
from eaglebot.errors import EagleError, UsageError
from eaglebot.engine.playbook import RESERVED, Playbook, load_playbook, playbook_files
from eaglebot.engine.registry import SkillRegistry
from eaglebot.frontends.format import duration_s, fmt_time, fmt_value, history_text, show_text, since, table
from eaglebot.engine.runner import Approver, Observer, RunOutcome, RunRequest
from eaglebot.store import Store

MAX_TEXT = 4000          # a slash command is at most 4000 characters in Slack too
MAX_HISTORY = 50
LOG_LINES = 60
LOG_CHARS = 3500

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")              # playbook / skill / metric-ish
_HOSTS = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(,[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})*$")
_METRIC = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]{0,99}$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

VIEW_COMMANDS = {"playbooks", "hosts", "history", "show", "status", "logs", "schedule", "trend"}
OPERATE_COMMANDS = {"run", "cancel", "rerun", "baseline"}

USAGE = """\
/eagle <playbook> [host[,host]] [key=value ...] [--dry-run]   run a playbook (e.g. relaunch gpu-01 spec_steps=5)
/eagle help [playbook|skill]        this help, or a playbook's inputs / a skill's parameters
/eagle playbooks | hosts            what can run, and where
/eagle history [playbook] [host] [n]
/eagle show ID                      one run: steps, metrics, warnings, regressions
/eagle status                       running runs and busy hosts
/eagle cancel ID | rerun ID         stop a run (its always-steps still run) / run it again
/eagle logs HOST                    tail of the inference server's log on a host
/eagle schedule                     scheduled runs and their next fire time
/eagle baseline set ID              make a run the reference for its playbook + host
/eagle trend PLAYBOOK HOST METRIC   plot a metric over recent runs"""


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


def _shown(tok: str, n: int = 40) -> str:
    tok = _CONTROL.sub("?", tok)
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
    if _CONTROL.search(text):
        return _err(text, "the command contains control characters; type it as plain text")
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
    if word in ("playbooks", "hosts", "status", "schedule"):
        if args:
            return _err(text, f"/eagle {word} takes no arguments (got {_shown(args[0])})")
        return Command(word, text=text)
    if word == "help":
        if len(args) > 1 or (args and not _NAME.match(args[0])):
            return _err(text, "usage: /eagle help [playbook|skill]")
        return Command(word, tuple(args), text=text)
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


def authorize(access: AccessConfig, cmd: Command, user: str) -> str | None:
    """None when `user` may do `cmd`, else the sentence to show them."""
    if cmd.name in ("help", "error"):
        return None
    if cmd.name in OPERATE_COMMANDS:
        if not allowed(access.operators, user):
            return f"only operators can {_verb(cmd)}; ask an admin to add you to access.operators"
        if cmd.name == "run":
            return authorize_playbook(access, cmd.playbook or "", user)
        return None
    if cmd.name in VIEW_COMMANDS:
        if not (allowed(access.viewers, user) or allowed(access.operators, user)
                or allowed(access.approvers, user)):
            return f"only viewers can use /eagle {cmd.name}; ask an admin to add you to access.viewers"
    return None


def authorize_playbook(access: AccessConfig, playbook: str, user: str) -> str | None:
    allow = access.playbooks.get(playbook)
    if allow is not None and not allowed(allow, user):
        return f"you are not on the allowlist of playbook {playbook!r} (access.playbooks.{playbook})"
    return None


def _verb(cmd: Command) -> str:
    return {"run": f"run playbooks ({cmd.playbook})", "cancel": "cancel runs", "rerun": "re-run runs",
            "baseline": "set baselines"}.get(cmd.name, cmd.name)


# -- replies -----------------------------------------------------------------------------

@dataclass
class Reply:
    text: str
    blocks: list[dict] | None = None
    public: bool = False                 # in the channel (else only the requester sees it)
    exit_code: int = 0
    file: Path | None = None             # an image to upload (trend)
    run_id: int | None = None
    task: asyncio.Task | None = None     # a started run
    request: RunRequest | None = None

    @property
    def is_error(self) -> bool:
        return self.exit_code != 0 and self.task is None


def error_reply(message: str, code: int = 2) -> Reply:
    return Reply(message, bk.error_blocks(message), exit_code=code)


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


async def audit_refusal(services: Any, user: str, cmd: Command, why: str, run_id: int | None = None) -> None:
    """Every refusal is an audit record: an `events` row of kind `access_denied`."""
    if run_id is None and cmd.name in ("cancel", "rerun", "show", "baseline"):
        try:
            run_id = cmd.run_id
        except (ValueError, IndexError):
            run_id = None
    what = cmd.text or cmd.name
    await services.store.add_event(run_id, "access_denied", f"{user}: /eagle {what[:300]}: {why}")


async def handle(services: Any, cmd: Command | str, caller: Caller) -> Reply:
    """Do what `/eagle <text>` asks. Never raises: errors become an error Reply."""
    if isinstance(cmd, str):
        cmd = parse(cmd)
    if cmd.name == "error":
        return error_reply(cmd.error or "invalid command")
    if caller.check_access:
        why = authorize(services.settings.access, cmd, caller.user)
        if why:
            await audit_refusal(services, caller.user, cmd, why)
            return error_reply(why)
    try:
        return await _HANDLERS[cmd.name](services, cmd, caller)
    except EagleError as e:
        return error_reply(services.redactor.text(str(e)), e.exit_code)
    except Exception as e:  # a bug must not take the bot down; the user gets one line
        import logging

        logging.getLogger("eaglebot.commands").exception("command %r failed", cmd.text)
        return error_reply(f"internal error: {type(e).__name__}: {services.redactor.text(str(e))[:300]}", 1)


# -- handlers ----------------------------------------------------------------------------

def _playbooks(settings: Settings) -> dict[str, Path]:
    return playbook_files(settings.playbooks_path)


def _load(settings: Settings, name: str, registry: SkillRegistry | None = None) -> Playbook:
    files = _playbooks(settings)
    if name not in files:
        raise UsageError(f"unknown playbook {name!r} (known: {', '.join(files) or 'none'})")
    path = files[name]
    st = path.stat()
    return _load_cached(str(path), st.st_mtime_ns, st.st_size, registry).model_copy(deep=True)


@functools.lru_cache(maxsize=256)
def _load_cached(path: str, mtime_ns: int, size: int, registry: SkillRegistry | None) -> Playbook:
    """Parsing and validating YAML on every slash command is the bot's busiest work: reuse it
    until the file changes (the key holds its mtime and size)."""
    return load_playbook(path, registry)


async def _help(services, cmd: Command, caller: Caller) -> Reply:
    if not cmd.args:
        text = f"{USAGE}\nskills: {', '.join(services.registry)}   (/eagle help SKILL)"
        return Reply(text, bk.text_blocks(text, code=True))
    name = cmd.args[0]
    files = await asyncio.to_thread(_playbooks, services.settings)
    if name in files:
        pb = await asyncio.to_thread(load_playbook, files[name], services.registry)
        text = _playbook_help(pb)
        return Reply(text, bk.text_blocks(text, code=True))
    if name in services.registry:
        text = services.registry.describe(name)
        return Reply(text, bk.text_blocks(text, code=True))
    raise UsageError(f"no playbook or skill named {name!r} (see /eagle playbooks)")


def _playbook_help(pb: Playbook) -> str:
    from eaglebot.frontends.cli.main import describe_inputs

    lines = [f"{pb.name}: {pb.description}".rstrip(": ")]
    inputs = describe_inputs(pb)
    lines += ["inputs:"] + [f"  {line}" for line in inputs] if inputs else ["inputs: none"]
    lines.append("steps: " + ", ".join(s.label for s in pb.steps))
    if pb.examples:
        lines.append("examples:")
        lines += [f"  {e}" for e in pb.examples]
    lines.append(f"usage: /eagle {pb.name} [host[,host]] [key=value ...] [--dry-run]")
    return "\n".join(lines)


async def _list_playbooks(services, cmd, caller) -> Reply:
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
    return Reply(text, bk.text_blocks(text, title="Playbooks", code=True))


async def _hosts(services, cmd, caller) -> Reply:
    s = services.settings
    locks = {lk["host"]: lk["run_id"] for lk in await services.store.locks()}
    rows = []
    for name, h in s.hosts.items():
        where = "local" if h.transport == "local" else f"{h.user + '@' if h.user else ''}{h.address}:{h.port}"
        groups = ",".join(g for g, m in s.groups.items() if name in m) or "-"
        rows.append([name, where, groups, f"busy (run #{locks[name]})" if name in locks else "idle"])
    text = table(["host", "address", "groups", "state"], rows)
    return Reply(text, bk.text_blocks(text, title="Hosts", code=True))


def _key_metrics(store_sync, run_ids: list[int]) -> dict[int, str]:
    """The first metric each run recorded: the number people look for in a history table."""
    if not run_ids:
        return {}
    marks = ",".join("?" * len(run_ids))
    rows = store_sync.db.execute(
        f"select run_id, name, value, unit from metrics where id in "
        f"(select min(id) from metrics where run_id in ({marks}) group by run_id)", run_ids).fetchall()
    return {r[0]: f"{r[1]}={fmt_value(r[2], r[3] or '')}" for r in rows}


async def _history(services, cmd: Command, caller) -> Reply:
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

    def query(s: Store) -> tuple[list[dict], dict[int, str]]:
        runs = s.history(playbook=playbook, host=host, limit=int(n))
        return runs, _key_metrics(s, [r["id"] for r in runs])

    runs, keys = await services.store.call(query)
    text = history_text(runs, keys)
    title = "History" + (f" of {playbook}" if playbook else "") + (f" on {host}" if host else "")
    return Reply(text, bk.text_blocks(text, title=title, code=True), public=True)


def view_from_store(run: dict, steps: list[dict], metrics: list[dict], warnings: list[dict],
                    regressions: list[dict]) -> dict:
    """A run as the dict `blocks.run_summary_blocks` renders (same shape as a live run's)."""
    multi = len(run.get("hosts") or []) > 1
    return {
        "run_id": run["id"], "playbook": run["playbook"], "hosts": run.get("hosts") or [],
        "actor": run.get("actor"), "status": run["status"], "dry_run": bool(run.get("dry_run")),
        "duration_s": duration_s(run), "error": run.get("error"),
        "steps": [{"host": s["host"], "name": s["name"], "status": s["status"], "summary": s["summary"] or "",
                   "duration_ms": s["duration_ms"] or 0, "multi_host": multi,
                   "output_tail": (s.get("output") or "")[-4000:] if s["status"] == "failed" else ""}
                  for s in steps],
        "metrics": [{"host": m["host"], "name": m["name"], "value": m["value"], "unit": m["unit"]} for m in metrics],
        "warnings": [(f"{w['host']}: " if w.get("host") else "") + w["message"] for w in warnings],
        "regressions": regressions,
    }


async def _show(services, cmd: Command, caller) -> Reply:
    rid = cmd.run_id

    def load(s: Store) -> tuple | None:
        run = s.get_run(rid)
        if run is None:
            return None
        return run, s.steps(rid), s.metrics(rid), s.warnings(rid), s.regressions(rid), s.changes(rid)

    got = await services.store.call(load)
    if got is None:
        raise UsageError(f"no run #{rid} (see /eagle history)")
    run, steps, metrics, warnings, regs, changes = got
    text = show_text(run, steps, metrics, warnings, regs, changes)
    blocks = bk.run_summary_blocks(view_from_store(run, steps, metrics, warnings, regs))
    return Reply(text, blocks, public=True, run_id=rid)


async def _status(services, cmd, caller) -> Reply:
    runs = await services.store.running_runs()
    locks = await services.store.locks()
    rows = [[f"#{r['id']}", r["playbook"], ",".join(r.get("hosts") or []) or "-", r.get("actor") or "-",
             r.get("origin") or "-", fmt_time(r.get("started_at")), since(r.get("started_at"))] for r in runs]
    parts = [table(["id", "playbook", "hosts", "who", "via", "started (UTC)", "since"], rows)
             if rows else "no runs are running"]
    if locks:
        parts.append("busy hosts: " + ", ".join(f"{lk['host']} (run #{lk['run_id']})" for lk in locks))
    else:
        parts.append("busy hosts: none")
    text = "\n\n".join(parts)
    return Reply(text, bk.text_blocks(text, title="Status", code=True), public=True)


async def _cancel(services, cmd: Command, caller: Caller) -> Reply:
    rid = cmd.run_id
    run = await services.store.get_run(rid)
    if run is None:
        raise UsageError(f"no run #{rid} (see /eagle status)")
    if not await services.store.request_cancel(rid):
        raise UsageError(f"run #{rid} is not running (it {run['status']})")
    services.engine.cancel(rid)  # at once when it runs here; other processes see the DB flag
    await services.store.add_event(rid, "cancel_requested", f"by {caller.user}")
    text = f"cancel requested for run #{rid} ({run['playbook']}) by {caller.user}; its always-steps still run"
    return Reply(text, [bk.section(f":no_entry_sign: cancel requested for run #{rid} "
                                   f"(*{bk.escape(run['playbook'])}*) by {bk.mention(caller.user)}; "
                                   "its always-steps still run")], public=True, run_id=rid)


async def _start(services, req: RunRequest, caller: Caller) -> Reply:
    observer = caller.frontend.observer(req)
    approver = caller.frontend.approver(req, observer)
    run_id, task = await services.engine.start(req, observer, approver)
    name = req.playbook.name if isinstance(req.playbook, Playbook) else req.playbook
    text = f"run #{run_id}: {name} started" + (" (dry-run)" if req.dry_run else "")
    return Reply(text, [bk.section(bk.escape(text))], public=True, run_id=run_id, task=task, request=req)


async def _run(services, cmd: Command, caller: Caller) -> Reply:
    try:
        pb = await asyncio.to_thread(_load, services.settings, cmd.playbook)
    except UsageError as e:
        req = RunRequest(cmd.playbook or "?", list(cmd.hosts), dict(cmd.inputs), actor=caller.user,
                         origin=caller.origin, dry_run=cmd.dry_run, channel=caller.channel)
        await services.engine.record_rejected(req, e)
        raise
    req = RunRequest(pb, list(cmd.hosts) or None, dict(cmd.inputs), actor=caller.user, origin=caller.origin,
                     dry_run=cmd.dry_run, channel=caller.channel)
    return await _start(services, req, caller)


async def _rerun(services, cmd: Command, caller: Caller) -> Reply:
    rid = cmd.run_id
    run = await services.store.get_run(rid)
    if run is None:
        raise UsageError(f"no run #{rid} (see /eagle history)")
    if caller.check_access and (why := authorize_playbook(services.settings.access, run["playbook"], caller.user)):
        await audit_refusal(services, caller.user, cmd, why, rid)
        return error_reply(why)
    pb = await asyncio.to_thread(_load, services.settings, run["playbook"])
    req = RunRequest(pb, list(run.get("hosts") or []) or None, dict(run.get("inputs") or {}),
                     actor=caller.user, origin=caller.origin, dry_run=bool(run.get("dry_run")),
                     rerun_of=rid, channel=caller.channel)
    return await _start(services, req, caller)


async def _logs(services, cmd: Command, caller) -> Reply:
    from eaglebot.transport import path_for_shell

    host = cmd.args[0]
    settings = services.settings
    if host not in settings.hosts:
        raise UsageError(f"unknown host {host!r} (known: {', '.join(sorted(settings.hosts))})")
    hv = settings.hosts[host].vars
    launched = await services.store.last_step_data(host, "server.launch", "log_path")
    if hv.get("server_log"):
        files = path_for_shell(str(hv["server_log"]))
    elif launched:  # the log the last server.launch on that host recorded
        files = path_for_shell(str(launched["log_path"]))
    else:
        d = path_for_shell(settings.state_dir.rstrip("/"))
        files = " ".join(f"{d}/{g}" for g in ("*.log", "log/*.log", "logs/*.log"))
    # The host var `server_log`, else the last launch's log, else the newest log in state_dir.
    script = (f'f=$(ls -1t {files} 2>/dev/null | head -n 1); '
              f'if [ -z "$f" ]; then echo "no server log found" >&2; exit 3; fi; '
              f'echo "== $f"; tail -n {LOG_LINES} "$f"')
    res = await services.pool.get(host).run(script, timeout=20)
    if res.exit_status == 3:
        raise UsageError(f"no server log on {host} (looked in {settings.state_dir}; set the host var server_log)")
    if not res.ok:
        raise UsageError(f"could not read the log on {host}: {(res.stderr or res.stdout).strip()[:300]}")
    out = services.redactor.text(res.stdout)
    shown, cut = bk.tail(out, LOG_CHARS)
    blocks = [bk.header(f"server log on {host}")] + bk.code_sections(shown, max_blocks=2, keep="tail")
    if cut:
        blocks.append(bk.context(f"_showing the last {len(shown)} characters of the last {LOG_LINES} lines_"))
    return Reply(out, blocks, public=True)


async def _schedule(services, cmd, caller) -> Reply:
    from eaglebot.frontends.scheduler import schedule_rows

    rows = await services.store.call(lambda s: schedule_rows(services.settings, s))
    if not rows:
        text = "no schedules configured (add `schedules:` to eagle.yaml)"
    else:
        text = table(["name", "playbook", "hosts", "cron", "tz", "next fire", "last run"],
                     [[r["name"], r["playbook"], ",".join(r.get("hosts") or []) or "-", r["cron"],
                       r.get("timezone") or "UTC", r.get("next_fire") or "-",
                       f"#{r['last_run_id']} {r.get('last_status') or ''}".strip() if r.get("last_run_id") else "-"]
                      for r in rows])
    return Reply(text, bk.text_blocks(text, title="Schedules", code=True), public=True)


async def _baseline(services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.history.regress import set_baseline

    rid = cmd.run_id
    text = await services.store.call(lambda s: set_baseline(s, rid, caller.user))
    await services.store.add_event(rid, "baseline_set", f"by {caller.user}")
    return Reply(text, [bk.section(":triangular_flag_on_post: " + bk.escape(text))], public=True, run_id=rid)


async def _trend(services, cmd: Command, caller) -> Reply:
    from eaglebot.history.trend import plot_trend

    playbook, host, metric = cmd.args
    out = Path(tempfile.mkdtemp(prefix="eagle-trend-")) / f"{playbook}-{host}-{metric}.png".replace("/", "_")
    path = await services.store.call(lambda s: plot_trend(s, playbook, host, metric, out, limit=30))
    text = f"{metric} of {playbook} on {host} over recent runs: {path}"
    return Reply(text, [bk.section(bk.escape(text))], public=True, file=Path(path))


_HANDLERS: dict[str, Callable[..., Any]] = {
    "help": _help, "playbooks": _list_playbooks, "hosts": _hosts, "history": _history, "show": _show,
    "status": _status, "cancel": _cancel, "rerun": _rerun, "logs": _logs, "schedule": _schedule,
    "baseline": _baseline, "trend": _trend, "run": _run,
}


# -- terminal front ends: `eagle chat`, `eagle console` ------------------------------------

class TextFrontend:
    """Runs started from `eagle chat`/`console` report like `eagle run`: progress on stderr,
    approvals asked on the terminal when there is one."""

    def __init__(self, interactive: bool = False, verbose: bool = False):
        self.interactive = interactive
        self.verbose = verbose

    def observer(self, req: RunRequest) -> Observer | None:
        from eaglebot.frontends.cli.main import TerminalObserver

        return TerminalObserver(verbose=self.verbose)

    def approver(self, req: RunRequest, observer: Observer | None) -> Approver | None:
        from eaglebot.frontends.cli.main import terminal_approver

        return terminal_approver if self.interactive else None


async def _text_command(services, text: str, frontend: TextFrontend) -> int:
    from eaglebot.frontends.cli.main import outcome_text

    caller = Caller(getpass.getuser(), origin="cli", check_access=False, frontend=frontend)
    reply = await handle(services, text, caller)
    if reply.task is not None:
        outcome: RunOutcome = await reply.task
        print(outcome_text(outcome))
        return outcome.exit_code
    print(("eagle: " if reply.is_error else "") + reply.text, file=sys.stderr if reply.is_error else sys.stdout)
    return reply.exit_code


def chat_main(settings: Settings, text: str) -> int:
    """`eagle chat "TEXT"`: exactly `/eagle TEXT`, rendered as text."""
    from eaglebot.frontends.services import Services

    async def main() -> int:
        services = await Services.open(settings)
        try:
            return await _text_command(services, text, TextFrontend())
        finally:
            await services.close()

    return asyncio.run(main())


def console_main(settings: Settings) -> int:
    """`eagle console`: each line is `/eagle <line>`; `exit` or end of input quits."""
    from eaglebot.frontends.services import Services

    async def main() -> int:
        services = await Services.open(settings)
        frontend = TextFrontend(interactive=sys.stdin.isatty())
        try:
            while True:
                try:
                    line = await asyncio.to_thread(input, "eagle> " if sys.stdin.isatty() else "")
                except EOFError:
                    break
                line = line.strip()
                if line in ("exit", "quit"):
                    break
                if not line:
                    continue
                await _text_command(services, line, frontend)  # each line reports its own result
        finally:
            await services.close()
        return 0

    return asyncio.run(main())
