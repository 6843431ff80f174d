"""`eagle doctor [--service]`: check a config end to end, one line per check.

Every host reachable with a verified host key (when the key is unknown, the key it presents is
printed with `eagle hosts pin HOST`, which pins it), nvidia-smi and the host's Python found, the
Slack tokens valid (only those that are set) and the audit DB writable. Exit 0 when every check
passes, 1 otherwise.

`--service` (systemd's `ExecStartPre`) checks only what the bot itself needs: the config, the
audit DB, the tokens in the environment and the playbooks; hosts are still checked but a host
that is down, or whose key is not pinned, is a warning (exit 0): one bad GPU node must not keep
the whole bot down. Exit 1 for the bot's own problems; 2 (as every command) when the config
itself is invalid.

On a GPU host the version-drift sentinel (facts/sglang/drift.py) reads the installed SGLang's
source (no import, about a second) and compares the surface eaglebot relies on with its record of
the nearest release: a match is one `ok` line, a drift a warning line per part that changed.

nvidia-smi is checked only on GPU hosts (`Settings.is_gpu_host`: `gpu: true|false` on a host
wins; unmarked, hosts with the `nvidia_smi` var and ssh hosts that are not only a jump host),
so the bot's own GPU-less host passes.

Hosts are checked through their transports and the skills' own facts: nvidia-smi is
the one the GPU skills run (host var `nvidia_smi`), read by the same parser and
explained by the same exit-code sentences, so a host that passes doctor passes
gpu.verify's nvidia-smi call too.
"""
from __future__ import annotations

import asyncio
import os
import shlex
import sys
from importlib import resources
from pathlib import Path
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from eaglebot.config import RETIRED_SHELL, HostConfig, Settings
from eaglebot.frontends.cli.safe import terminal_safe
from eaglebot.errors import TransportError
from eaglebot.sdk import Host, path_for_shell
from eaglebot.facts.gpu import nvsmi
from eaglebot.facts.sglang import drift, launch_table
from eaglebot.transport import hostkeys
from eaglebot.transport.ssh import SSHTransport

HOST_TIMEOUT_S = 20.0
IMPORT_TIMEOUT_S = 120.0   # `import sglang` imports torch: seconds on a GPU host


DETAIL_MAX = 600   # of a check's line: a hostile host once printed 4.2 MB into one


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    warn: bool = False       # passes, but a person should read it
    fix: str = ""            # the command that fixes a FAIL, for the closing `next:` line

    def line(self) -> str:
        """One terminal line: what a host answered (its detail) shown, never obeyed (escape
        sequences as `\x1b`, a newline as `\n`), and at most DETAIL_MAX characters of it."""
        detail = terminal_safe(self.detail).replace("\n", "\\n")
        if len(detail) > DETAIL_MAX:
            detail = f"{detail[:DETAIL_MAX]}... ({len(detail) - DETAIL_MAX} more characters cut)"
        return f"{('WARN' if self.warn else 'ok  ') if self.ok else 'FAIL'}  {self.name}: {detail}"


async def check_nvidia_smi(name: str, cfg: HostConfig, host: Host) -> Check:
    """Ask nvidia-smi on the host which GPUs it sees (the GPU_NAMES fact), as a skill would."""
    check = f"host {name} nvidia-smi"
    try:
        gpus = await nvsmi.GPU_NAMES.gather(host, cfg.vars, timeout=HOST_TIMEOUT_S)
    except nvsmi.NvsmiError as e:
        return Check(check, False, str(e))
    models = ", ".join(f"{n} x {model}" for model, n in Counter(gpus.values()).items())
    return Check(check, True, f"{nvsmi.nvsmi_path(cfg.vars)} answers: {len(gpus)} GPU(s)"
                              + (f" ({models})" if models else ""))


def host_key_file(algorithm: str) -> str:
    """Where sshd keeps the host key of `algorithm` (ssh-ed25519, ecdsa-sha2-nistp256, rsa-sha2-512)."""
    return f"/etc/ssh/ssh_host_{algorithm.removeprefix('ssh-').split('-')[0]}_key.pub"


async def host_key_check(name: str, cfg: HostConfig, tunnel: Host | None, why: str) -> Check:
    """A host-key failure as one line: what is wrong, the key the host presents, and the fix
    (`eagle hosts pin`, after comparing it on the host; for a changed key, finding out why first)."""
    known = hostkeys.known_hosts_path(cfg)
    try:
        key = await hostkeys.scan(cfg, tunnel if isinstance(tunnel, SSHTransport) else None)
    except (TransportError, OSError) as e:
        return Check(f"host {name}", False, f"{why}; its host key could not be read ({e})")
    compare = f"`ssh-keygen -lf {host_key_file(key.algorithm)}` run on the host"
    if hostkeys.pinned_state(cfg, key) == "different":
        return Check(f"host {name}", False, f"{known} pins a DIFFERENT key for it, and it presents {key.describe()}: "
                                            f"the host was reinstalled, or something is in between; compare with "
                                            f"{compare} before you pin again", fix=f"eagle hosts pin {name}")
    state = "does not exist yet" if not known.exists() else "does not pin it"
    return Check(f"host {name}", False, f"host key not pinned ({known} {state}); it presents {key.describe()}: "
                                        f"compare with {compare}, then `eagle hosts pin {name}`",
                 fix=f"eagle hosts pin {name}")


async def check_host(name: str, cfg: HostConfig, transport: Host, gpu: bool = True,
                     tunnel: Host | None = None) -> list[Check]:
    """The connection first; then nvidia-smi, the Python and the SGLang surface at once (each
    its own SSH channel: the slowest, `import sglang` on a real host, sets the time, not the sum)."""
    where = "local transport" if cfg.transport == "local" else f"{cfg.user + '@' if cfg.user else ''}{cfg.address}:{cfg.port}"
    try:
        res = await asyncio.wait_for(transport.run("echo eagle-ok", timeout=HOST_TIMEOUT_S), HOST_TIMEOUT_S + 5)
        if not res.ok or "eagle-ok" not in res.stdout:
            raise TransportError(f"`echo` answered exit status {res.exit_status}: {res.stderr.strip()[:200]}")
    except (TransportError, asyncio.TimeoutError, OSError) as e:
        detail = (str(e) or type(e).__name__).removeprefix(f"host {name}: ")
        if cfg.transport == "ssh" and ("host key" in detail.lower() or "known_hosts" in detail.lower()):
            return [await host_key_check(name, cfg, tunnel, detail)]
        return [Check(f"host {name}", False, detail)]
    first = Check(f"host {name}", True, f"reachable ({where})")
    if not gpu:
        return [first, Check(f"host {name} nvidia-smi", True, "not a GPU host (not checked; mark it `gpu: true` "
                                                              "in eagle.yaml if it has GPUs)"),
                await check_python(name, cfg, transport, gpu)]
    # (the surface is read from the source: it needs no import, so it says which release is there even then)
    smi, py, surface = await asyncio.gather(check_nvidia_smi(name, cfg, transport),
                                            check_python(name, cfg, transport, gpu),
                                            check_sglang_surface(name, cfg, transport))
    return [first, smi, py, *surface]


async def check_python(name: str, cfg: HostConfig, host: Host, gpu: bool) -> Check:
    """The host's Python (host var `python`) runs; on a GPU host it imports sglang, as the launch
    pre-flight will (a Python without it would pass here and take the server down at relaunch)."""
    python = str(cfg.vars.get("python") or "python3")
    hint = "" if cfg.vars.get("python") else " (set the host var `python` to the Python that has SGLang)"
    if not gpu:
        py = await host.run(f"{path_for_shell(python)} -c 'import sys; print(sys.version.split()[0])'",
                            timeout=HOST_TIMEOUT_S)
        if py.ok:
            return Check(f"host {name} python", True, f"{python} is Python {py.stdout.strip()}")
        return Check(f"host {name} python", False, f"{python} not runnable{hint}")
    res = await host.run(f"{path_for_shell(python)} -c {shlex.quote(launch_table.IMPORT_PY)}",
                         timeout=IMPORT_TIMEOUT_S)
    got = launch_table.parse_import(res.stdout)
    if got.python is None:
        why = "timed out" if res.timed_out else ((res.stderr.strip() or res.stdout.strip()).splitlines()[-1:]
                                                 or [f"exit status {res.exit_status}"])[0][:200]
        return Check(f"host {name} python", False, f"{python} not runnable ({why}){hint}")
    if got.sglang is None:
        why = got.error or (f"no answer within {IMPORT_TIMEOUT_S:g}s" if res.timed_out else "no answer")
        return Check(f"host {name} python", False, f"{python} is Python {got.python} but cannot import sglang: "
                                                   f"{why}{hint}")
    return Check(f"host {name} python", True, f"{python} is Python {got.python} with SGLang {got.sglang}")


async def check_sglang_surface(name: str, cfg: HostConfig, host: Host) -> list[Check]:
    """The version-drift sentinel: the host's SGLang surface (flags, env vars, field names, capture
    hooks, adaptive defaults, read from its source) against eaglebot's nearest record; a drift is a
    warning, one line per part that changed."""
    python = str(cfg.vars.get("python") or "python3")
    res = await host.run(drift.command(python), timeout=drift.TIMEOUT_S, stdin=drift.program())
    got = drift.parse(-1 if res.exit_status is None else res.exit_status, res.stdout, res.stderr)
    check = f"host {name} sglang surface"
    if isinstance(got, str):
        return [Check(check, True, f"not read ({got}): the relaunch pre-flight uses eaglebot's record of the "
                                   f"release instead", warn=True)]
    same, headline, changes = drift.report(got)
    return [Check(check, True, headline, warn=not same)] + [
        Check(f"host {name} sglang {section}", True, "; ".join(texts[:8]) + (
            f"; (+{len(texts) - 8} more)" if len(texts) > 8 else ""), warn=True)
        for section, texts in changes.items()]


async def check_slack(settings: Settings) -> list[Check]:
    out: list[Check] = []
    bot = os.environ.get("SLACK_BOT_TOKEN")
    app = os.environ.get("SLACK_APP_TOKEN")
    if not bot and not app:   # (before the imports: the Slack client and aiohttp cost ~0.1 s)
        return [Check("slack", True, "no tokens set (skipped; `eagle serve` needs them)")]
    from slack_sdk.errors import SlackApiError

    from eaglebot.frontends.slack.client import make_client

    for var, call in (("SLACK_BOT_TOKEN", "auth_test"), ("SLACK_APP_TOKEN", "apps_connections_open")):
        token = os.environ.get(var)
        if not token:
            continue
        client = make_client(settings, None, backoff_s=0.2, timeout_s=15)
        try:
            if call == "auth_test":
                resp = await client.auth_test(token=token)
                detail = f"valid: bot {resp.get('user')} in workspace {resp.get('team')}"
            else:
                await client.apps_connections_open(app_token=token)
                detail = "valid: Socket Mode connections can be opened"
            out.append(Check(var, True, detail))
        except SlackApiError as e:
            out.append(Check(var, False, f"Slack refused it: {e.response.get('error')}"))
        except Exception as e:
            out.append(Check(var, False, f"could not reach Slack: {type(e).__name__}"))
    return out


def check_access(settings: Settings) -> Check:
    if not settings.access_configured:
        return Check("access", True, "eagle.yaml has no `access` section: Slack users may only view (history, show, "
                                     "status, logs); set access.operators and access.approvers to let people run "
                                     "and approve", warn=True)
    a = settings.access
    return Check("access", True, f"{len(a.operators)} operator(s), {len(a.approvers)} approver(s)"
                                 + ("; self-approval allowed" if a.self_approval else ""))


def check_schedule_config(settings: Settings) -> list[Check]:
    if not settings.schedules:
        return []
    from eaglebot.engine.schedules import check_schedules

    problems = check_schedules(settings)
    if not problems:
        return [Check("schedules", True, f"{len(settings.schedules)} schedule(s): playbooks, inputs and hosts valid")]
    return [Check(f"schedule {p.name}", False, f"{p.where}: {p.message}") for p in problems]


def check_db(settings: Settings) -> Check:
    from eaglebot.store import open_store, redact_url

    path = settings.audit_store
    if isinstance(path, Path) and not path.exists():
        # A check creates nothing: say whether `eagle run` could create it.
        folder = next((p for p in path.parents if p.exists()), path.parent)
        if os.access(folder, os.W_OK | os.X_OK):
            return Check("audit db", True, f"{path} does not exist yet; `eagle run` will create it ({folder} is writable)")
        return Check("audit db", False, f"{path} does not exist and {folder} is not writable")
    try:
        store = open_store(path, key_file=settings.audit_key_path)
        try:
            store.check_writable()
        finally:
            store.close()
        return Check("audit db", True, f"{redact_url(str(path))} is writable")
    except Exception as e:
        # A StoreError names the store already ("audit store URL: reason"): not twice.
        text = str(e) if str(e).startswith("audit store ") else f"{path}: {e}"
        return Check("audit db", False, redact_url(text))


def check_audit_chain(settings: Settings) -> list[Check]:
    """`eagle audit verify` (with the configured key), as doctor lines; a warning when unkeyed."""
    from eaglebot.frontends.cli.audit import verify_key, verify_line, verify_report

    out = []
    path = settings.audit_store
    if isinstance(path, Path) and not path.exists():
        out.append(Check("audit chain", True, "no audit DB yet: nothing to verify"))
    else:
        try:
            report = verify_report(settings, None, verify_key(settings, None))
            # seals left unchecked (a sealing key's past) are a warning: `verify` exits 4 for them
            out.append(Check("audit chain", bool(report["ok"]), verify_line(report),
                             warn=bool(report["ok"]) and not report.get("complete", True)))
        except Exception as e:
            out.append(Check("audit chain", False, f"cannot verify: {e}"))
    if settings.audit_key_path is None:
        out.append(Check("audit key", True, "the audit chain is unkeyed: tamper-evident against edits, not against "
                                            "a forger who can write the DB; create a key with `eagle audit init-key "
                                            "PATH` and set `audit_key_file: PATH` in eagle.yaml", warn=True))
    return out


def check_tokens() -> Check:
    """The tokens `eagle serve` needs, by name only (their values are never printed)."""
    missing = [v for v in ("SLACK_BOT_TOKEN",) if not os.environ.get(v)]
    if not (os.environ.get("SLACK_APP_TOKEN") or os.environ.get("SLACK_SIGNING_SECRET")):
        missing.append("SLACK_APP_TOKEN (Socket Mode) or SLACK_SIGNING_SECRET (HTTP mode)")
    if missing:
        return Check("tokens", False, f"{' and '.join(missing)} not set in the environment (put them in the "
                                      "unit's EnvironmentFile, mode 0600)")
    have = [v for v in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET") if os.environ.get(v)]
    return Check("tokens", True, f"{', '.join(have)} set")


def check_playbooks(settings: Settings) -> list[Check]:
    """What `eagle lint` checks: every playbook the bot can run by name is valid."""
    from eaglebot.engine.playbook import playbook_errors
    from eaglebot.engine.registry import SkillRegistry
    from eaglebot.errors import EagleError

    try:
        registry = SkillRegistry.from_settings(settings)
    except EagleError as e:
        return [Check("skills", False, str(e))]
    n, errors = playbook_errors(settings.playbooks_path, registry)
    bad = [Check(f"playbook {path.stem}", False, str(e)) for path, e in errors]
    where = f"playbooks_dir {settings.playbooks_path} and the shipped ones" if settings.playbooks_path \
        else "the shipped ones (no playbooks_dir)"
    return bad or [Check("playbooks", True, f"{n} valid, from {where}")]


def as_warning(c: Check) -> Check:
    """A host's failure, for the service: the bot runs without that host (its runs say why)."""
    return c if c.ok else Check(c.name, True, c.detail, warn=True)


def declared_host_vars(user_dir: Path | None) -> frozenset[str]:
    """Host vars surely read: the path vars and the inputs and `vars` of every playbook runnable by
    name (the user's shadowing the shipped ones of the same name). What `hostvars.known_host_vars`
    finds, but for an invalid playbook's (`eagle lint` says what is wrong with it), read with libyaml
    alone: no skill, no template, no engine."""
    import yaml

    from eaglebot.sdk import PATH_VARS

    files: dict[str, Path] = {}
    for d in (Path(str(resources.files("eaglebot.playbooks"))), user_dir):
        if d is not None and d.is_dir():
            files.update({f.stem: f for f in sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml"))})
    names = set(PATH_VARS)
    for f in files.values():
        try:
            doc = yaml.load(f.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue   # (the full check, and lint, say why)
        if isinstance(doc, dict):
            names |= {str(k) for part in ("inputs", "vars") if isinstance(doc.get(part), dict) for k in doc[part]}
    return frozenset(names)


def check_host_vars(settings: Settings) -> list[Check]:
    """A host var nothing reads but that is near one something does (`pyton:`): a warning. When every
    host var is one a playbook declares, none can be: the skills and playbooks are not loaded (0.3 s)."""
    if {str(n) for c in settings.hosts.values() for n in c.vars} <= declared_host_vars(settings.playbooks_path):
        return []
    from eaglebot.engine.hostvars import host_var_warnings, known_host_vars
    from eaglebot.engine.registry import SkillRegistry
    from eaglebot.errors import EagleError

    try:
        known = known_host_vars(SkillRegistry.from_settings(settings), settings.playbooks_path)
    except EagleError:
        return []   # (the skills' own check says why)
    return [Check("host vars", True, w, warn=True)
            for w in host_var_warnings({h: c.vars for h, c in settings.hosts.items()}, known)]


async def check_hosts(settings: Settings) -> list[Check]:
    from eaglebot.transport import TransportPool

    out: list[Check] = []
    pool = TransportPool(settings)
    try:
        async def one(n: str, cfg: HostConfig) -> list[Check]:
            if (bad_key := settings.key_problem(n)) is not None:
                return [Check(f"host {n}", False, bad_key)]   # (no connect tries: nothing to try with)
            tunnel = pool.get(cfg.jump) if cfg.jump else None
            return await check_host(n, cfg, pool.get(n), settings.is_gpu_host(n), tunnel)

        results = await asyncio.gather(*(one(n, cfg) for n, cfg in settings.hosts.items()), return_exceptions=True)
        for name, res in zip(settings.hosts, results):
            if isinstance(res, BaseException):
                out.append(Check(f"host {name}", False, f"{type(res).__name__}: {res}"))
            else:
                out += res
    finally:
        await pool.close()
    return out


async def run_checks(settings: Settings, emit: Callable[[Check], None], service: bool = False) -> list[Check]:
    """Every check, emitted in a fixed order; the hosts' checks (network and the hosts' own time)
    and the host-var scan (which loads every skill and playbook) start first and run while the
    local ones do."""
    checks: list[Check] = []

    def add(c: Check) -> None:
        checks.append(c)
        emit(c)

    from eaglebot.configfile import where_looked

    hosts = asyncio.create_task(check_hosts(settings))
    host_vars = asyncio.create_task(asyncio.to_thread(check_host_vars, settings))
    try:
        add(Check("config", True, str(settings.source) if settings.source else f"built-in defaults: {where_looked()}"))
        add(await asyncio.to_thread(check_db, settings))
        if service:
            add(check_tokens())
            for c in await asyncio.to_thread(check_playbooks, settings):
                add(c)
        add(check_access(settings))
        retired = [name for name, h in settings.hosts.items() if h.shell == "persistent"]
        if retired:
            add(Check("shell mode", True, f"hosts {', '.join(retired)}: {RETIRED_SHELL}", warn=True))
        for c in check_schedule_config(settings):
            add(c)
        if not service:  # a walk of every row: `eagle audit verify`'s job, not each start's
            for c in await asyncio.to_thread(check_audit_chain, settings):
                add(c)
        for c in await host_vars:
            add(c)
        for c in await hosts:
            add(as_warning(c) if service else c)
    finally:
        hosts.cancel()
    for c in await check_slack(settings):
        # Slack unreachable at boot is the network's problem (serve retries); a refused token is the bot's.
        add(as_warning(c) if service and "could not reach" in c.detail else c)
    return checks


def next_step(settings: Settings, checks: list[Check]) -> str:
    """What to do next, one line: the fixes the failures name, else the first-node walkthrough's
    next step on a GPU host (a dry run, which changes nothing)."""
    failed = [c for c in checks if not c.ok]
    if failed:
        fixes = list(dict.fromkeys(c.fix for c in failed if c.fix))
        unnamed = len([c for c in failed if not c.fix])
        return "next: " + "; ".join([*(f"`{f}`" for f in fixes),
                                     *([f"fix what the FAIL line{'s' if unnamed > 1 else ''} above say"
                                        f"{'' if unnamed > 1 else 's'}, then run `eagle doctor` again"]
                                       if unnamed else [])])
    gpu = [n for n in settings.hosts if settings.is_gpu_host(n)]
    if not gpu:
        return "next: describe your GPU hosts under `hosts:` in eagle.yaml (docs/configuration.md)"
    return (f"next: `eagle run relaunch -H {gpu[0]} --dry-run` shows what a relaunch would do there "
            f"(it changes nothing)")


def doctor_main(settings: Settings, service: bool = False) -> int:
    def emit(c: Check) -> None:
        print(c.line(), flush=True)

    checks = asyncio.run(run_checks(settings, emit, service))
    failed = [c for c in checks if not c.ok]
    warned = sum(1 for c in checks if c.warn)
    hosts = len(settings.hosts)
    print(f"checked the config, the audit DB, {hosts} host{'s' if hosts != 1 else ''}"
          + (", the tokens, the playbooks" if service else "") + f" and Slack: {len(checks) - len(failed)}/"
          f"{len(checks)} checks passed" + (f", {warned} with a warning" if warned else ""), file=sys.stderr)
    print(next_step(settings, checks), file=sys.stderr)
    return 1 if failed else 0
