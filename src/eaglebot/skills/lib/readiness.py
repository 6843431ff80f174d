"""server.launch's readiness wait: poll the server's /proc record, GET /health and the new log
bytes in one round trip until it answers, exits, hits a fatal line, stalls or times out. A dropped
SSH link is not a failed launch: the next poll reconnects (the host's `connect_retries`), and only
a link that stays lost ends the wait (LinkLost), with the server left in the bot's pid file, and
the next launch on that port adopts it or stops it (adopt)."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from eaglebot.errors import HostUnreachable, StepFailed, TransportError
from eaglebot.facts.host import ports, procs
from eaglebot.facts.sglang import release, startup
from eaglebot.sdk import SkillContext, StepResult, path_for_shell
from eaglebot.skills.lib import server

LOG_MARK = "--EAGLE-LOG-7f3a--\n"


@dataclass(frozen=True)
class Wait:
    """What the wait needs of the launch: where the server answers and how long to wait."""
    python: str
    host: str
    port: int
    ready_timeout_s: float
    poll_interval_s: float
    stall_s: float


def _poll_script(python: str, pid: int, base: str, log_path: str, offset: int) -> str:
    """One round trip: the server's /proc stat record, GET /health's status, the new log bytes."""
    health = server.http_get_script(python, f"{base}/health", 5, body=False)
    return (f"s=$({procs.stat_command([pid])}); printf 'STAT %s\\n' \"$s\"; "
            f"if [ -n \"$s\" ]; then h=$({health} | tail -n 1); else h=0; fi; "
            f"printf 'HTTP %s\\n' \"$h\"; printf '%s\\n' {LOG_MARK.strip()}; "
            f"tail -c +{offset + 1} {path_for_shell(log_path)} 2>/dev/null; true")


# Polls that may fail in a row on a dropped link (each one reconnects first) before the wait gives up.
LINK_RETRIES = 3


class LinkLost(Exception):
    """The readiness wait lost its connection to the host and could not get it back."""


def _server_exited(stat_text: str, pid: int) -> bool:
    try:
        st = procs.parse_stat(stat_text)
    except ValueError:
        return True
    return st.pid != pid or st.zombie


async def wait_ready(ctx: SkillContext, w: Wait, pid: int, log_path: str) -> tuple[str | None, str, bool]:
    """Poll until /health is 200; return (failure sentence or None, the log so far, stalled).
    Raises LinkLost when the connection dropped and could not be had back."""
    base = f"http://{ports.probe_address(w.host)}:{w.port}"
    log_text, partial, offset = "", "", 0
    deadline = time.monotonic() + w.ready_timeout_s
    interval = min(0.25, w.poll_interval_s)
    fatal: str | None = None
    fatal_at = 0.0
    progress_at = time.monotonic()
    lost = 0
    while True:
        try:
            res = await ctx.host.run(_poll_script(w.python, pid, base, log_path, offset), timeout=60)
        except HostUnreachable as e:    # the transport already tried `connect_retries` times
            raise LinkLost(str(e)) from None
        except TransportError as e:
            # A dropped link is not a failed launch: the next poll reconnects (the host's connect_retries).
            lost += 1
            if lost > LINK_RETRIES:
                raise LinkLost(str(e)) from None
            ctx.log(f"connection lost while waiting for the server (pid {pid}): {e}; reconnecting")
            continue
        if lost:
            ctx.log(f"reconnected; still waiting for the server (pid {pid})")
            lost = 0
        head, _, new = res.stdout.partition(LOG_MARK)
        fields = dict(line.split(" ", 1) for line in head.splitlines() if " " in line)
        # The exact bytes read (invalid UTF-8 comes as surrogate escapes), and any the transport
        # left out of a very long read: the next poll starts where this one ended.
        offset += len(new.encode("utf-8", "surrogateescape")) + res.cut_bytes
        log_text += new
        text = partial + new
        lines = text.split("\n")
        partial = lines.pop()
        if lines:
            progress_at = time.monotonic()
        for line in lines:
            ctx.log(line)
            if fatal is None:
                fatal = release.find_fatal(line)
                if fatal:
                    fatal_at = time.monotonic()
        http = fields.get("HTTP", "0").strip()
        # Exited first: a zombie leader's orphaned children may still answer /health.
        if _server_exited(fields.get("STAT", ""), pid):
            why = release.find_fatal(log_text) or fatal or _last_line(log_text) or "no output"
            return f"the server exited during start-up: {why}", log_text, False
        if http == "200":
            return None, log_text, False
        if fatal and time.monotonic() - fatal_at > 3:
            return (f"the server hit a fatal error during start-up: {release.find_fatal(log_text) or fatal}",
                    log_text, False)
        if time.monotonic() - progress_at > w.stall_s:
            return (f"the server stalled: no new log line and no healthy /health for {w.stall_s:g}s while "
                    f"{startup.phase(log_text)}; it was stopped"), log_text, True
        if time.monotonic() > deadline:
            return (f"the server did not become ready within {w.ready_timeout_s:g}s "
                    f"(GET /health -> {http}); it was stopped"), log_text, False
        await asyncio.sleep(interval)
        interval = min(w.poll_interval_s, interval * 1.5)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


async def adopt(ctx: SkillContext, w: Wait, pid: int, argv: list[str], warnings: list[str],
                data: dict[str, Any]) -> StepResult | None:
    """The server our pid file names is alive (a launch that lost its connection while waiting
    left it starting): adopted when it runs exactly `argv` and answers /health (waited for like a
    launch of ours; the step's data is `data` and what the wait learnt), else stopped (it is ours:
    the pid file says so) and None, so a new one starts."""
    base = f"http://{ports.probe_address(w.host)}:{w.port}"
    info = (await procs.proc_info(ctx.host, [pid])).get(pid)
    # argv[0] may be a wrapper that execs the real Python: the arguments after it must be the same
    same = info is not None and info.cmdline.split()[1:] == [x for a in argv[1:] for x in a.split()]
    why = "runs other arguments"
    if same:
        res = await ctx.host.run(f"readlink /proc/{pid}/fd/1; true", timeout=30)
        log_path = res.stdout.strip() or server.log_path(ctx, w.port)
        ctx.log(f"the server the bot started earlier on port {w.port} (pid {pid}) runs these arguments: "
                f"waiting for it (log {log_path})")
        t0 = time.monotonic()
        try:
            failure, log_text, _ = await wait_ready(ctx, w, pid, log_path)
        except LinkLost as e:
            raise StepFailed(f"lost the connection while waiting; the server (pid {pid}) may still be starting "
                             f"({e})", warnings=warnings, data={"pid": pid, "port": w.port}) from None
        if failure is None:
            return StepResult.changed(
                f"adopted the server the bot started earlier on port {w.port} (pid {pid}): it runs these "
                f"arguments and answers /health", warnings=warnings, output=release.tail(log_text, 30),
                data={**data, "pid": pid, "port": w.port, "adopted": True, "url": base, "log_path": log_path,
                      "ready_s": round(time.monotonic() - t0, 2)})
        why = f"did not become ready ({failure})"
    ctx.log(f"the server the bot started earlier on port {w.port} (pid {pid}) {why}: stopping it")
    await server.stop_session(ctx, pid, 5)
    await server.remove_pid_file(ctx, w.port)
    warnings.append(f"stopped the server an earlier launch left on port {w.port} (pid {pid}): it {why}")
    return None
