"""What each `/eagle` word does, once the router admitted it: one coroutine per word, named
by its entry in `chat/words.py`.

Runs go through `Engine.start`, the same entry point as the CLI. Each handler returns a
`Reply` (`chat/reply.py`); an `EagleError` it raises becomes an error reply in the router.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import asyncio
import functools
import json
import tempfile
import threading
from pathlib import Path

from eaglebot.config import Settings
from eaglebot.engine.playbook import RESERVED, Playbook, load_playbook, playbook_files, unknown_playbook
from eaglebot.engine.registry import SkillRegistry
from eaglebot.engine.runner import RunRequest
from eaglebot.errors import EagleError, UsageError
from eaglebot.frontends.chat.caller import Caller
from eaglebot.frontends.chat.command import Command
from eaglebot.frontends.chat.reply import CancelRequested, LogTail, Note, Reply, RunShown, error_reply, listing
from eaglebot.frontends.recap_text import RECAP_LINES, recap_block
from eaglebot.frontends.replicas_text import LEADER, leader_of, replica_rows, replicas_text
from eaglebot.frontends.format import describe_inputs, fmt_local, fmt_time, history_text, show_text, since, table
from eaglebot.frontends.services import Services
from eaglebot.history.view import HistoryRow, RunView, load_history
from eaglebot.suggest import did_you_mean, nearest

if TYPE_CHECKING:
    from eaglebot.store.protocol import HistoryStore

LOG_LINES = 60
LOGS_PLAYBOOK = "server-logs"   # shipped: one read-only server.logs step


def _playbooks(settings: Settings) -> dict[str, Path]:
    return playbook_files(settings.playbooks_path)


def _load(services: Services, name: str) -> Playbook:
    files = _playbooks(services.settings)
    if name not in files:
        word = nearest(name, RESERVED) if nearest(name, files) is None else None
        raise UsageError(f"unknown command or playbook {name!r}; did you mean `/eagle {word}`?" if word else
                         unknown_playbook(name, files, services.settings.playbooks_path, by_path=False))
    path = files[name]
    st = path.stat()
    return _load_cached(str(path), st.st_mtime_ns, st.st_size, services.registry).model_copy(deep=True)


@functools.lru_cache(maxsize=256)
def _load_cached(path: str, mtime_ns: int, size: int, registry: SkillRegistry) -> Playbook:
    """Parsing and validating YAML on every slash command is the bot's busiest work: reuse it
    until the file changes (the key holds its mtime and size, and the registry it was checked
    against)."""
    return load_playbook(path, registry)


async def help_reply(services: Services, cmd: Command, usage: str) -> Reply:
    """The playbooks first (what people run), then the commands (`usage`: the words' help
    lines); the skills (what playbooks are made of) by `help skills`."""
    if not cmd.args:
        rows = await asyncio.to_thread(_playbook_rows, services)
        books = "\n".join(f"  {name}: {desc}" for name, desc, _ in rows) or "  none"
        return listing(f"playbooks (/eagle help PLAYBOOK: its inputs and examples):\n{books}\n\n{usage}\n"
                       f"skills: {len(services.registry)}, the steps playbooks are made of "
                       f"(/eagle help skills lists them, /eagle help SKILL shows one)")
    name = cmd.args[0]
    files = await asyncio.to_thread(_playbooks, services.settings)
    if name in files:
        pb = await asyncio.to_thread(load_playbook, files[name], services.registry)
        return listing(_playbook_help(pb))
    if name in services.registry:
        return listing(services.registry.describe(name))
    if name == "skills":
        return listing("skills (/eagle help SKILL: its parameters):\n" + "\n".join(
            f"  {k}: {services.registry.summary(k)}" for k in services.registry))
    hint = did_you_mean(name, [*files, *services.registry])
    raise UsageError(f"no playbook or skill named {name!r}; {hint}" if hint else
                     f"no playbook or skill named {name!r} (see /eagle playbooks)")


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


# A playbook's help row by (file, its mtime and size, the registry it was checked against): `/eagle
# help` lists every playbook, and loading and validating each one on every help was ~17 ms of the
# bot's CPU per command (tests/bench/bench_ack.py); an edited file or a reloaded registry is read again.
_ROWS: dict[tuple[str, int, int, int], list[str]] = {}
_ROWS_MAX = 4096
_ROWS_LOCK = threading.Lock()


def _playbook_row(name: str, path: Path, services: Services) -> list[str]:
    try:
        st = path.stat()
    except OSError:
        st = None
    key = (str(path), st.st_mtime_ns, st.st_size, id(services.registry)) if st else None
    if key is not None and (row := _ROWS.get(key)) is not None:
        return [name, *row[1:]]
    try:
        pb = load_playbook(path, services.registry)
        row = [name, pb.description[:80], ", ".join(pb.inputs) or "-"]
    except EagleError as e:
        row = [name, f"INVALID: {str(e)[:80]}", "-"]
    if key is not None:
        if len(_ROWS) >= _ROWS_MAX:
            _ROWS.clear()
        _ROWS[key] = row
    return row


def _playbook_rows(services: Services) -> list[list[str]]:
    """[name, description (80 characters), inputs] of every playbook the bot can run by name.
    One thread at a time: 50 helps at once would each load every playbook before the first had
    filled the cache (and hold the GIL from the event loop's acks while they did)."""
    with _ROWS_LOCK:
        return [_playbook_row(name, path, services) for name, path in _playbooks(services.settings).items()]


async def on_playbooks(services: Services, cmd: Command, caller: Caller) -> Reply:
    rows = await asyncio.to_thread(_playbook_rows, services)
    text = table(["playbook", "description", "inputs"], rows) if rows else "no playbooks"
    return listing(text, "Playbooks")


async def on_hosts(services: Services, cmd: Command, caller: Caller) -> Reply:
    s = services.settings
    locks = {lk["host"]: lk["run_id"] for lk in await services.store.call(lambda s: s.locks())}
    rows = []
    for name, h in s.hosts.items():
        where = "local" if h.transport == "local" else f"{h.user + '@' if h.user else ''}{h.address}:{h.port}"
        groups = ",".join(g for g, m in s.groups.items() if name in m) or "-"
        rows.append([name, where, groups, f"busy (run #{locks[name]})" if name in locks else "idle"])
    text = table(["host", "address", "groups", "state"], rows)
    return listing(text, "Hosts")


async def on_history(services: Services, cmd: Command, caller: Caller) -> Reply:
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

    def query(s: HistoryStore) -> tuple[list[HistoryRow], str]:
        from eaglebot.history.incidents import open_text

        return load_history(s, playbook=playbook, host=host, limit=int(n)), open_text(s, playbook=playbook, host=host)

    rows, open_incidents = await services.store.call(query)
    title = "History" + (f" of {playbook}" if playbook else "") + (f" on {host}" if host else "")
    return listing(history_text(rows) + (f"\n\n{open_incidents}" if open_incidents else ""), title, public=True)


async def on_show(services: Services, cmd: Command, caller: Caller) -> Reply:
    if cmd.args == ("last",):
        last = await services.store.call(lambda s: s.last_run_id())
        if last is None:
            raise UsageError("no runs yet (see /eagle playbooks)")
        cmd = Command("show", (str(last),), text=cmd.text)
    rid = cmd.run_id
    view = await services.store.call(lambda s: RunView.load(s, rid))
    if view is None:
        raise UsageError(f"no run #{rid} (see /eagle history)")
    return Reply(show_text(view) + recap_block(view, limit=RECAP_LINES), RunShown(view), public=True, run_id=rid)


async def on_status(services: Services, cmd: Command, caller: Caller) -> Reply:
    runs = await services.store.call(lambda s: s.running_runs())
    locks = await services.store.call(lambda s: s.locks())
    # a terminal's reader is in one time zone, a channel's in many: local time there, UTC here
    when, started = (fmt_local, "started") if caller.origin == "cli" else (fmt_time, "started (UTC)")
    rows = [[f"#{r['id']}", r["playbook"], ",".join(r.get("hosts") or []) or "-", r.get("actor") or "-",
             r.get("origin") or "-", when(r.get("started_at")), since(r.get("started_at"))] for r in runs]
    parts = [table(["id", "playbook", "hosts", "who", "via", started, "since"], rows)
             if rows else "no runs are running"]
    if locks:
        parts.append("busy hosts: " + ", ".join(f"{lk['host']} (run #{lk['run_id']}"
                                                f"{': ' + lk['reason'] if lk['reason'] else ''})" for lk in locks))
    else:
        parts.append("busy hosts: none")
    lease, reps = await services.store.call(lambda s: (s.lease_holder(LEADER), s.replicas()))
    parts.append(replicas_text(replica_rows(reps, lease), leader_of(lease)))
    text = "\n\n".join(parts)
    return listing(text, "Status", public=True)


async def on_cancel(services: Services, cmd: Command, caller: Caller) -> Reply:
    rid = cmd.run_id
    run = await services.store.call(lambda s: s.get_run(rid))
    if run is None:
        raise UsageError(f"no run #{rid} (see /eagle status)")
    if not await services.store.call(lambda s: s.request_cancel(rid)):
        raise UsageError(f"run #{rid} is not running (it {run['status']})")
    services.cancel(rid)  # at once when it runs here; other processes see the DB flag
    await services.store.call(lambda s: s.add_event(rid, "cancel_requested", f"by {caller.user}"))
    text = f"cancel requested for run #{rid} ({run['playbook']}) by {caller.user}; its always-steps still run"
    return Reply(text, CancelRequested(rid, run["playbook"], caller.user), public=True, run_id=rid)


async def _start(services: Services, req: RunRequest, caller: Caller) -> Reply:
    observer = caller.frontend.observer(req)
    approver = caller.frontend.approver(req, observer)
    run_id, task = await services.engine.start(req, observer, approver)
    name = req.playbook.name if isinstance(req.playbook, Playbook) else req.playbook
    text = f"run #{run_id}: {name} started" + (" (dry-run)" if req.dry_run else "")
    return Reply(text, Note(text), public=True, run_id=run_id, task=task, request=req)


async def on_run(services: Services, cmd: Command, caller: Caller) -> Reply:
    try:
        pb = await asyncio.to_thread(_load, services, cmd.playbook or "")
    except UsageError as e:
        req = RunRequest(cmd.playbook or "?", list(cmd.hosts), dict(cmd.inputs), actor=caller.user,
                         origin=caller.origin, dry_run=cmd.dry_run, channel=caller.channel, text=cmd.text)
        await services.engine.record_rejected(req, e)
        raise
    inputs = dict(cmd.inputs)
    # `batch=` and `max_fail=` are the rolling run's (--batch, --max-fail), unless the playbook
    # has an input of that name
    batch = inputs.pop("batch", None) if "batch" not in pb.inputs else None
    max_fail = inputs.pop("max_fail", None) if "max_fail" not in pb.inputs else None
    req = RunRequest(pb, list(cmd.hosts) or None, inputs, actor=caller.user, origin=caller.origin,
                     dry_run=cmd.dry_run, channel=caller.channel, text=cmd.text, batch=batch, max_fail=max_fail,
                     force=cmd.force)
    return await _start(services, req, caller)


async def on_rerun(services: Services, cmd: Command, caller: Caller) -> Reply:
    rid = cmd.run_id
    run = await services.store.call(lambda s: s.get_run(rid))
    if run is None:
        raise UsageError(f"no run #{rid} (see /eagle history)")
    pb = await asyncio.to_thread(_load, services, run["playbook"])
    hosts = list(run.get("hosts") or [])
    if cmd.args[0] == "failed":
        from eaglebot.history.recap import failed_hosts, host_recap

        steps, warnings = await services.store.call(lambda s: (s.steps(rid), s.warnings(rid)))
        hosts = failed_hosts(host_recap(hosts, steps, warnings))
        if not hosts:
            return error_reply(f"run #{rid} has no failed or unreachable host to run again")
    req = RunRequest(pb, hosts or None, dict(run.get("inputs") or {}),
                     actor=caller.user, origin=caller.origin, dry_run=bool(run.get("dry_run")),
                     rerun_of=rid, channel=caller.channel)
    return await _start(services, req, caller)


async def on_logs(services: Services, cmd: Command, caller: Caller) -> Reply:
    """`/eagle logs HOST`: the shipped `server-logs` playbook, run through the engine like any
    other (a run row, the step's output in the audit store, redaction), silently: the reply is
    the log. Its only skill is read-only, so it takes no host lock and works mid-relaunch."""
    host = cmd.args[0]
    lines = int(cmd.args[1]) if len(cmd.args) > 1 else LOG_LINES
    req = RunRequest(LOGS_PLAYBOOK, [host], {"lines": lines}, actor=caller.user, origin=caller.origin,
                     channel=caller.channel)
    outcome = await services.engine.run(req)
    steps = await services.store.call(lambda s: s.steps(outcome.run_id))
    step = next((s for s in steps if s["skill"] == "server.logs"), None)
    if outcome.status != "succeeded" or step is None:
        why = outcome.error or f"{host}: could not read the server log"
        return error_reply(f"{why} (run #{outcome.run_id})", code=outcome.exit_code or 1)
    data = json.loads(step["data"] or "{}")
    text = f"== {data.get('log_path', '?')}\n" + (step["output"] or "").strip("\n")
    return Reply(text, LogTail(host, text, lines), public=True, run_id=outcome.run_id)


async def on_schedule(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.frontends.schedule_view import schedule_rows, schedule_state

    if cmd.args:
        return await _schedule_pause(services, cmd, caller)
    rows = await services.store.call(lambda s: schedule_rows(services.settings, s))
    if not rows:
        text = "no schedules configured (add `schedules:` to eagle.yaml)"
    else:
        text = table(["name", "playbook", "hosts", "cron", "tz", "next fire", "last run", "state"],
                     [[r["name"], r["playbook"], ",".join(r.get("hosts") or []) or "-", r["cron"] or f"every {r['every']}",
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
        hint = did_you_mean(name, names)
        raise UsageError(f"unknown schedule {name!r}; {hint}" if hint else
                         f"unknown schedule {name!r} (known: {', '.join(names) or 'none'})")
    paused = verb == "pause"
    changed = await services.store.call(lambda s: s.set_schedule_paused(name, paused, caller.user))
    if not changed:
        raise UsageError(f"schedule {name!r} is already {'paused' if paused else 'active'}")
    kind = f"schedule_{'paused' if paused else 'resumed'}"
    await services.store.call(lambda s: s.add_event(None, kind, f"{name} by {caller.user}"))
    text = (f"schedule {name} paused by {caller.user}: it will not run until `/eagle schedule resume {name}`"
            if paused else f"schedule {name} resumed by {caller.user}")
    return Reply(text, Note(text), public=True)


async def on_baseline(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.history.recorder import set_baseline

    rid = cmd.run_id
    text = await services.store.call(lambda s: set_baseline(s, rid, caller.user))
    await services.store.call(lambda s: s.add_event(rid, "baseline_set", f"by {caller.user}"))
    return Reply(text, Note(text, mark="baseline"), public=True, run_id=rid)


async def on_fleet(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.frontends.fleet_text import fleet_checks, fleet_rows, fleet_text

    cfg = services.settings
    watched = cfg.resolve_hosts(cfg.health_watch.hosts) if cfg.health_watch else []
    checks = fleet_checks(await services.store.call(lambda s: s.newest_steps("gpu.health", limit=5000)))
    return listing(fleet_text(fleet_rows(await services.store.call(lambda s: s.health_states()), watched), checks,
                              watching=cfg.health_watch is not None), "Fleet health", public=True)


async def on_trend(services: Services, cmd: Command, caller: Caller) -> Reply:
    from eaglebot.frontends.plot import plot_trend

    playbook, host, metric = cmd.args
    out = Path(tempfile.mkdtemp(prefix="eagle-trend-")) / f"{playbook}-{host}-{metric}.png".replace("/", "_")
    path = await services.store.call(lambda s: plot_trend(s, playbook, host, metric, out, limit=30))
    # the path is the bot's own: Slack gets the file itself (`eagle chat` prints where it is)
    text = f"{metric} of {playbook} on {host} over recent runs (the plot is attached)"
    return Reply(text, Note(text), public=True, file=Path(path))


async def on_reload(services: Services, cmd: Command, caller: Caller) -> Reply:
    """`/eagle reload`: in `eagle serve`, the reload itself (frontends/service/reload.py); elsewhere
    (`eagle chat`, which reads the config afresh each time) a check of the config."""
    if services.reloader is not None:
        done, text = await services.reloader(caller.user)
        return Reply(text, Note(text), public=done, exit_code=0 if done else 2)
    from eaglebot.frontends.config_check import check_config

    text = await asyncio.to_thread(check_config, services.settings)
    return Reply(text, Note(text))

