"""The SGLang server the bot launched on a port: its pid file, its log, its session.

Probes are facts (`eaglebot.facts.host.procs`) run through ctx.host; which processes
are ours is `processes.is_ours`. Also an HTTP GET made ON the host (the bot may not
reach the server's port directly), at the address the server's socket listens on.
"""
from __future__ import annotations

import shlex

from eaglebot.sdk import SkillContext, path_for_shell

from eaglebot.facts.host import ports, procs
from eaglebot.skills.lib import processes


def pid_path(ctx: SkillContext, port: int) -> str:
    return f"{processes.state_dir(ctx)}/run/server-{port}.pid"


def log_path(ctx: SkillContext, port: int) -> str:
    return f"{processes.state_dir(ctx)}/logs/server-{port}-{ctx.run_id}.log"


async def read_pid(ctx: SkillContext, port: int) -> int | None:
    res = await ctx.host.run(f"cat {path_for_shell(pid_path(ctx, port))} 2>/dev/null; true", timeout=30)
    tok = res.stdout.strip().split()
    return int(tok[0]) if tok and tok[0].isdigit() else None


async def remove_pid_file(ctx: SkillContext, port: int) -> None:
    await ctx.host.run(f"rm -f {path_for_shell(pid_path(ctx, port))}", timeout=30)


async def session_members(ctx: SkillContext, sid: int) -> list[int]:
    """Live (non-zombie) processes of session `sid`, the leader first if alive."""
    members = [s.pid for s in await procs.stats(ctx.host)
               if processes.is_ours(s, {sid}) and not s.zombie]
    return sorted(members, key=lambda p: (p != sid, p))


async def leader_alive(ctx: SkillContext, pid: int) -> bool:
    """Is `pid` still the live leader of the session it started (not a zombie, not a reused PID)?"""
    st = await procs.stat_of(ctx.host, pid)
    return st is not None and not st.zombie and processes.is_ours(st, {pid})


def looks_like_sglang(p: procs.ProcInfo) -> bool:
    """A pid-file leader that is still the server (not a PID reused by another program)."""
    return "sglang" in p.cmdline or p.comm.startswith("sglang")


def describe(p: procs.ProcInfo) -> str:
    return f"pid {p.pid} ({p.user}) {p.cmdline[:160]}"


async def stop_session(ctx: SkillContext, sid: int, grace_s: float) -> list[processes.KillReport]:
    """TERM then KILL every live member of session `sid` (the server and its scheduler children)."""
    members = await session_members(ctx, sid)
    infos = await procs.proc_info(ctx.host, members)
    return await processes.terminate(ctx, [infos[p] for p in members if p in infos], grace_s)


# -- HTTP on the host ----------------------------------------------------------------

_PY_GET = ("import sys,urllib.request as u,urllib.error as e\n"
           "o=u.build_opener(u.ProxyHandler({}))\n"
           "try:\n r=o.open(sys.argv[1],timeout=float(sys.argv[2]));b=r.read();c=r.status\n"
           "except e.HTTPError as x:\n b=x.read();c=x.code\n"
           "except Exception:\n b=b'';c=0\n"
           "sys.stdout.write(b.decode('utf-8','replace')+'\\n'+str(c))\n")


def http_get_script(python: str, url: str, timeout: float = 10.0, body: bool = True) -> str:
    """Shell that prints the response body, a newline, then the status code (000/0: no answer)."""
    q = shlex.quote
    out = "" if body else "-o /dev/null "
    curl = f"curl -s {out}--noproxy '*' --max-time {timeout:g} -w '\\n%{{http_code}}' {q(url)}"
    py = f"{q(python)} -c {q(_PY_GET)} {q(url)} {timeout:g}"
    return f"if command -v curl >/dev/null 2>&1; then {curl}; else {py}; fi"


def parse_http(stdout: str) -> tuple[int, str]:
    body, _, code = stdout.rpartition("\n")
    code = code.strip()
    return (int(code) if code.isdigit() else 0), body


async def base_url(ctx: SkillContext, port: int) -> str:
    """`http://ADDRESS:PORT` of the server listening on `port`, where the bot's own requests reach
    it: 127.0.0.1 for one bound to a wildcard or loopback, else the one address it is bound to (its
    own socket says, so a benchmark after `relaunch -e bind=10.0.0.7` needs no bind of its own)."""
    return f"http://{ports.probe_address_of(await ports.listen_addresses(ctx.host, port))}:{port}"


async def http_get(ctx: SkillContext, python: str, port: int, path: str,
                   timeout: float = 10.0, base: str | None = None) -> tuple[int, str]:
    """GET `path` of the server on `port`, from the host; `base`: its URL when known (else `base_url`)."""
    url = (base or await base_url(ctx, port)) + path
    res = await ctx.host.run(http_get_script(python, url, timeout), timeout=timeout + 20)
    return parse_http(res.stdout)


async def server_env(ctx: SkillContext, port: int) -> tuple[int | None, dict[str, str] | None]:
    """(the pid of the server on the port, its environment or None when unreadable): the one our pid
    file names while its leader lives, else the lowest pid listening there."""
    pid = await read_pid(ctx, port)
    if pid is None or not await leader_alive(ctx, pid):
        lis = await ports.listeners(ctx.host, port)
        pid = min(lis.pids) if lis.pids else None
    if pid is None:
        return None, None
    return pid, await procs.environ(ctx.host, pid)


def cuda_visible(gpus: object) -> str | None:
    """CUDA_VISIBLE_DEVICES for `gpus` (a list or "0,1"), or None: all."""
    if gpus is None or gpus == "" or gpus == []:
        return None
    if isinstance(gpus, list):
        return ",".join(str(int(g)) for g in gpus)
    return str(gpus).replace(" ", "")


async def read_model_config(ctx: SkillContext, folder: str) -> tuple[bool, str | None]:
    """(exists, config.json text) of a model folder on the host."""
    res = await ctx.host.run(f"test -d {path_for_shell(folder)} && echo dir; cat {path_for_shell(folder)}/config.json "
                             f"2>/dev/null; true", timeout=30)
    exists = res.stdout.startswith("dir")
    return exists, (res.stdout[4:] if exists else None)


async def listener_words(ctx: SkillContext, port: int) -> str | None:
    """Who listens on `port`, in words; None when it is free."""
    lis = await ports.listeners(ctx.host, port)
    if not lis.busy:
        return None
    infos = await procs.proc_info(ctx.host, sorted(lis.pids))
    return "; ".join(describe(infos[p]) for p in sorted(lis.pids) if p in infos) or \
        "a process this user cannot see"
