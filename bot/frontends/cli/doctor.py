"""`eagle doctor`: check a config end to end, one line per check.

Every host reachable with a verified host key (when the key is unknown, the SHA256
fingerprint to pin is printed), nvidia-smi and the host's Python found, the Slack
tokens valid (only those that are set) and the audit DB writable. Exit 0 when every
check passes, 1 otherwise.

nvidia-smi is checked only on GPU hosts (`Settings.is_gpu_host`: `gpu: true|false` on a host
wins; unmarked, hosts with the `nvidia_smi` var and ssh hosts that are not only a jump host),
so the bot's own GPU-less host passes and systemd's `ExecStartPre=eagle doctor` lets it start.

Hosts are checked through their transports and the skills' own facts: nvidia-smi is
the one the GPU skills run (host var `nvidia_smi`), read by the same parser and
explained by the same exit-code sentences, so a host that passes doctor passes
gpu.verify's nvidia-smi call too.
"""
from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from eaglebot.config import HostConfig, Settings
from eaglebot.errors import TransportError
from eaglebot.sdk import Host, path_for_shell
from eaglebot.facts import nvsmi
from eaglebot.transport.ssh import host_key_fingerprint

HOST_TIMEOUT_S = 20.0


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    warn: bool = False       # passes, but a person should read it

    def line(self) -> str:
        return f"{('WARN' if self.warn else 'ok  ') if self.ok else 'FAIL'}  {self.name}: {self.detail}"


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


async def check_host(name: str, cfg: HostConfig, transport: Host, gpu: bool = True) -> list[Check]:
    out: list[Check] = []
    where = "local transport" if cfg.transport == "local" else f"{cfg.user + '@' if cfg.user else ''}{cfg.address}:{cfg.port}"
    try:
        res = await asyncio.wait_for(transport.run("echo eagle-ok", timeout=HOST_TIMEOUT_S), HOST_TIMEOUT_S + 5)
        if not res.ok or "eagle-ok" not in res.stdout:
            raise TransportError(f"`echo` answered exit status {res.exit_status}: {res.stderr.strip()[:200]}")
        out.append(Check(f"host {name}", True, f"reachable ({where})"))
    except (TransportError, asyncio.TimeoutError, OSError) as e:
        detail = str(e) or type(e).__name__
        if cfg.transport == "ssh" and ("host key" in detail.lower() or "known_hosts" in detail.lower()):
            fp = await host_key_fingerprint(cfg)
            if fp:
                detail += (f"; the host presents {fp}: if that is right, pin it with "
                           f"`ssh-keyscan -p {cfg.port} {cfg.address} >> {cfg.known_hosts or '~/.ssh/known_hosts'}` "
                           "and compare the fingerprint")
        out.append(Check(f"host {name}", False, detail))
        return out
    if gpu:
        out.append(await check_nvidia_smi(name, cfg, transport))
    else:
        out.append(Check(f"host {name} nvidia-smi", True, "not a GPU host (not checked; mark it `gpu: true` "
                                                          "in eagle.yaml if it has GPUs)"))
    python = str(cfg.vars.get("python") or "python3")
    py = await transport.run(f"{path_for_shell(python)} -c 'import sys; print(sys.version.split()[0])'",
                             timeout=HOST_TIMEOUT_S)
    if py.ok:
        out.append(Check(f"host {name} python", True, f"{python} is Python {py.stdout.strip()}"))
    else:
        hint = "" if cfg.vars.get("python") else " (set the host var `python`)"
        out.append(Check(f"host {name} python", False, f"{python} not runnable{hint}"))
    return out


async def check_slack(settings: Settings) -> list[Check]:
    from slack_sdk.errors import SlackApiError

    from eaglebot.frontends.slack.client import make_client

    out: list[Check] = []
    bot = os.environ.get("SLACK_BOT_TOKEN")
    app = os.environ.get("SLACK_APP_TOKEN")
    if not bot and not app:
        return [Check("slack", True, "no tokens set (skipped; `eagle serve` needs them)")]
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
    from eaglebot.engine.schedules import check_schedules

    if not settings.schedules:
        return []
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
        return Check("audit db", False, redact_url(f"{path}: {e}"))


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
            out.append(Check("audit chain", bool(report["ok"]), verify_line(report)))
        except Exception as e:
            out.append(Check("audit chain", False, f"cannot verify: {e}"))
    if settings.audit_key_path is None:
        out.append(Check("audit key", True, "the audit chain is unkeyed: tamper-evident against edits, not against "
                                            "a forger who can write the DB; create a key with `eagle audit init-key "
                                            "PATH` and set `audit_key_file: PATH` in eagle.yaml", warn=True))
    return out


async def run_checks(settings: Settings, emit: Callable[[Check], None]) -> list[Check]:
    from eaglebot.transport import TransportPool

    checks: list[Check] = []

    def add(c: Check) -> None:
        checks.append(c)
        emit(c)

    from eaglebot.configfile import where_looked

    add(Check("config", True, str(settings.source) if settings.source else f"built-in defaults: {where_looked()}"))
    add(await asyncio.to_thread(check_db, settings))
    add(check_access(settings))
    mode = os.environ.get("EAGLE_SHELL_MODE", "").strip()
    if mode:  # easy to forget once a problem is over
        add(Check("shell mode", True, f"EAGLE_SHELL_MODE={mode}: hosts without `shell:` in eagle.yaml use "
                                      f"`shell: {mode}`", warn=mode != "exec"))
    for c in check_schedule_config(settings):
        add(c)
    for c in await asyncio.to_thread(check_audit_chain, settings):
        add(c)
    pool = TransportPool(settings)
    try:
        results = await asyncio.gather(*(check_host(n, cfg, pool.get(n), settings.is_gpu_host(n))
                                         for n, cfg in settings.hosts.items()),
                                       return_exceptions=True)
        for name, res in zip(settings.hosts, results):
            if isinstance(res, BaseException):
                add(Check(f"host {name}", False, f"{type(res).__name__}: {res}"))
            else:
                for c in res:
                    add(c)
    finally:
        await pool.close()
    for c in await check_slack(settings):
        add(c)
    return checks


def doctor_main(settings: Settings) -> int:
    def emit(c: Check) -> None:
        print(c.line(), flush=True)

    checks = asyncio.run(run_checks(settings, emit))
    failed = [c for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)}/{len(checks)} checks passed", file=sys.stderr)
    return 1 if failed else 0
