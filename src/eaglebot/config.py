"""Settings: `eagle.yaml` plus the environment.

Secrets never live in the file: Slack tokens come from the environment only.
Paths in the file (audit_db, playbooks_dir, skill_paths, keys) are relative to the file's folder.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from eaglebot import inventory
from eaglebot.configfile import KEY_FILE_ENV, config_path, read_config_text
from eaglebot.errors import UsageError
from eaglebot.suggest import did_you_mean, keys_at, unknown_key_hint

DB_URL_SCHEMES = ("postgresql://", "postgres://")  # audit_db on a PostgreSQL server

LOCAL = "local"

log = logging.getLogger(__name__)


# The other sections' models live in config_sections; they are re-exported here, where callers look.
from eaglebot.config_sections import XID_DEFAULTS as XID_DEFAULTS
from eaglebot.config_sections import AccessConfig as AccessConfig
from eaglebot.config_sections import HealthWatchConfig as HealthWatchConfig
from eaglebot.config_sections import RegressionConfig as RegressionConfig
from eaglebot.config_sections import ScheduleConfig as ScheduleConfig
from eaglebot.config_sections import SlackConfig as SlackConfig
from eaglebot.config_sections import XidRule as XidRule
from eaglebot.config_sections import _Model


# `persistent` (a run's commands through one long-lived sh) is retired: it did not clearly win
# over exec (docs/benchmarks.md). The key stays valid and runs as exec; load_settings warns.
ShellMode = Literal["exec", "persistent"]
RETIRED_SHELL = ("`shell: persistent` is retired and runs as `shell: exec` (one channel per command); "
                 "remove the key")


class HostConfig(_Model):
    """A host, by name (a range such as `gpu-[001:128]` names many). Paths are relative to the config
    file's folder; `~` is expanded."""
    transport: Literal["ssh", "local"] = Field(
        "ssh",
        description="`ssh` or `local` (this machine, as the bot's user)")
    address: str | None = Field(
        None,
        description="host name or IP address; in a range a template of the member (see "
                    "[Addresses](#addresses)) (default: the host's name)")
    user: str | None = Field(
        None,
        description="SSH user (default: the current user)")
    port: int = Field(
        22, ge=1, le=65535,
        description="SSH port (1–65535)")
    key: str | None = Field(
        None,
        description="private key file; one that does not exist or cannot be read refuses the run before any "
                    "connection (exit 2: `host gpu-01: the SSH key hosts.gpu-01.key = /x/id_ed2551 does not "
                    "exist; ...`), and is a `FAIL` line in `eagle doctor` (default: the SSH agent and default "
                    "keys)")
    known_hosts: str | None = Field(
        None,
        description="the file the host key is verified against; an unknown or changed key is refused "
                    "(default: `~/.ssh/known_hosts`)")
    jump: str | None = Field(
        None,
        description="another configured ssh host to tunnel through (no loops, not `local`)")
    connect_timeout_s: float = Field(
        10.0, gt=0,
        description="seconds to connect (default: `10`)")
    connect_retries: int = Field(
        3, ge=0, le=20,
        description="extra tries of a connection that failed on the way (refused, reset, lost before login, "
                    "timed out), with jittered backoff (0.25 s doubling, at most 4 s); a refused key or host "
                    "key is not retried. Still failing: the host is `unreachable`")
    max_channels: int = Field(
        8, ge=1, le=64,
        description="concurrent SSH channels to the host (sshd's `MaxSessions` is 10)")
    shell: ShellMode = Field(
        "exec",
        description="`exec`: one SSH channel (or local `sh -c`) per command. `persistent` is retired: still "
                    "accepted, it runs as `exec` and warns (see "
                    "[Benchmarks](benchmarks.md#the-persistent-shell-retired-issue-45))")
    vars: dict[str, Any] = Field(
        default_factory=dict,
        description="host variables for templating (`python` (a GPU host's Python that imports sglang: `eagle "
                    "doctor` and the launch pre-flight check), `model`, `draft`, `port`, `tp` (the server's "
                    "`--tp-size`: the GPUs one server spans, e.g. `8` for a model that needs a whole node; "
                    "every relaunch, repair and tuning run uses it unless an input says otherwise), `gpus` "
                    "(the GPUs the server uses and the cleanup frees, its `CUDA_VISIBLE_DEVICES`, e.g. `[0, "
                    "1]`), `bind` (the address the relaunched server listens on, its `--host`: default "
                    "`127.0.0.1`, `0.0.0.0` for other machines), `server_log`, `nvidia_smi`, `dmesg`, "
                    "`draft_train_layers` (the layer outputs the draft's training concatenated, e.g. `[2, 30, "
                    "58]`), `draft_train_accuracy` (its training accuracy at the first position), "
                    "`sglang_version` (the table the gate and the launch check fall back to), `router` and "
                    "`worker_url` (see [Router](#router)), ...); one that no playbook or skill reads but is "
                    "near one that does (`pyton:`) is a warning in the run and in `eagle doctor` (see [Host "
                    "vars](#host-vars))")
    gpu: bool | None = Field(
        None,
        description="a GPU host, where `eagle doctor` checks nvidia-smi. Unmarked: a host whose vars name "
                    "`nvidia_smi` is one, and so is every ssh host that is not only another host's `jump`; "
                    "`local` is not (default: derived)")

    @model_validator(mode="after")
    def _needs_address(self) -> "HostConfig":
        if self.transport == "ssh" and not self.address:
            raise ValueError("an ssh host needs an address")
        return self


class Settings(_Model):
    audit_db: str = Field(
        "eagle.db",
        description="the audit store: an SQLite file, or `postgresql://user@host[:port]/db` for several "
                    "`eagle serve` replicas on one store (see [Operations](operations.md#postgresql))")
    playbooks_dir: str | None = Field(
        None,
        description="your playbooks; they shadow the shipped ones of the same name; must exist")
    skill_paths: list[str] = Field(
        default_factory=list,
        description="folders of your own skills (see [Skills](skills.md#writing-a-skill))")
    hosts: dict[str, HostConfig] = Field(
        default_factory=dict,
        description="the hosts, by name (`local` always exists)")
    groups: dict[str, list[str]] = Field(
        default_factory=dict,
        description="name → list of hosts, ranges and groups; usable wherever a host is (`-H h200`); a group "
                    "may not have a host's name; `all` is built in")
    default_hosts: list[str] = Field(
        default_factory=list,
        description="the hosts of a run that names none")
    slack: SlackConfig = Field(default_factory=SlackConfig, description="the Slack channel and posting")
    access: AccessConfig = Field(
        default_factory=AccessConfig,
        description="who may do what in Slack (no section: Slack users may only view)")
    schedules: list[ScheduleConfig] = Field(
        default_factory=list,
        description="scheduled runs")
    regression: RegressionConfig = Field(default_factory=RegressionConfig, description="the regression check")
    health_watch: HealthWatchConfig | None = Field(
        None,
        description="the fleet health watch `eagle serve` runs (none: no watch)")
    redact: list[str] = Field(
        default_factory=list,
        description="regular expressions removed from everything stored, printed and posted; each must "
                    "compile")
    host_defaults: dict[str, Any] = Field(
        default_factory=dict,
        description="settings every host inherits (any key of `hosts.NAME` but `address` and `transport`); a "
                    "host's own win, `vars` merge key by key")
    max_parallel_hosts: int | None = Field(
        None, ge=1,
        description="hosts one run works on at once (none: only `max_hosts_total` holds)")
    max_hosts_total: int = Field(
        1024, ge=1,
        description="hosts all runs of one process work on at once, e.g. in `eagle serve`")
    max_connecting: int = Field(
        64, ge=1,
        description="SSH connections being opened at once, per process")
    max_connecting_per_jump: int = Field(
        8, ge=1,
        description="SSH connections being opened at once through one jump host, or to one `address:port` for "
                    "hosts without one (sshd drops what is over its `MaxStartups`, 10 by default)")
    state_dir: str = Field(
        "~/.eaglebot",
        description="where the bot keeps pid and log files **on each host**; `~` and `$VARS` are the host's "
                    "(the login user's home and environment): the host makes and names the folder once per "
                    "run (`mkdir -p`, `pwd -P`) and every skill gets that absolute path; a folder the login "
                    "user cannot make fails the host's first step with the reason")
    audit_key_file: str | None = Field(
        None,
        description="the audit chain's sealing key (`eagle audit init-key`); `$EAGLE_AUDIT_KEY_FILE` "
                    "overrides it (see [Operations](operations.md#audit-trail))")
    output_keep_bytes: int = Field(
        1024 * 1024, ge=4096, le=64 * 1024 * 1024,
        description="bytes of each step's output kept in the audit DB, half head, half tail")
    output_dir: str | None = Field(
        None,
        description="where the bot writes each step's whole output, on its own machine (default: "
                    "`eagle-output` next to the audit DB)")
    log_format: Literal["text", "json"] = Field(
        "text",
        description="`eagle serve`'s log lines: `text`, or `json` (one object per line with `ts`, `level`, "
                    "`logger`, `msg` and the line's fields, for journald or Loki); see "
                    "[Operations](operations.md#logs)")
    metrics_port: int | None = Field(
        None, ge=1, le=65535,
        description="Prometheus `/metrics` on this port, in HTTP and Socket Mode alike (never on the Slack "
                    "events port); see [Operations](operations.md#metrics)")
    metrics_host: str = Field(
        "127.0.0.1",
        description="the address `/metrics` binds: it needs no credential, so keep it where only Prometheus "
                    "reaches it (it does not follow `--host`)")
    # Not from the file: where it was read from (relative paths resolve against it).
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)
    source: Path | None = Field(None, exclude=True)

    @field_validator("redact")
    @classmethod
    def _redact_compiles(cls, v: list[str]) -> list[str]:
        for i, pat in enumerate(v):
            try:
                re.compile(pat)
            except re.error as e:
                raise ValueError(f"pattern {i + 1} ({pat[:40]!r}) is not a valid regular expression: {e.msg}") from None
        return v

    @field_validator("hosts", mode="before")
    @classmethod
    def _hosts_not_none(cls, v: Any) -> Any:
        return {} if v is None else v

    @model_validator(mode="before")
    @classmethod
    def _expand_inventory(cls, data: Any) -> Any:
        """Host ranges, host_defaults and groups of groups, before each host is validated
        (eaglebot.inventory; its errors name their place in the file)."""
        if not isinstance(data, dict):
            return data
        defaults = data.get("host_defaults")
        if isinstance(defaults, dict):
            shared = [k for k in HostConfig.model_fields if k not in ("address", "transport")]
            for k in defaults:
                if k not in shared:
                    hint = unknown_key_hint(str(k), shared) if k not in HostConfig.model_fields else ""
                    raise inventory.InventoryError(f"host_defaults: {k}: not a setting hosts share{hint}",
                                                   ("host_defaults", str(k)))
        data = dict(data)
        data["hosts"] = inventory.expand_hosts(data.get("hosts"), defaults)
        if isinstance(data["hosts"], dict):
            names = set(data["hosts"]) | {LOCAL}
            data["groups"] = inventory.expand_groups(data.get("groups"), names)
        return data

    @model_validator(mode="after")
    def _paths_from_the_file(self) -> "Settings":
        """A relative `key` or `known_hosts` is relative to the config file's folder, as every
        path in it (a `~` stays for the transport to expand)."""
        for cfg in self.hosts.values():
            for field in ("key", "known_hosts"):
                value = getattr(cfg, field)
                if value and not value.startswith("~") and not os.path.isabs(value):
                    setattr(cfg, field, str(self.base_dir / value))
        return self

    @model_validator(mode="after")
    def _local_always_exists(self) -> "Settings":
        if LOCAL not in self.hosts:
            self.hosts[LOCAL] = HostConfig(transport="local")
        for host, cfg in self.hosts.items():
            if cfg.jump and cfg.jump not in self.hosts:
                hint = did_you_mean(cfg.jump, [h for h in self.hosts if h != host])
                raise ValueError(f"host {host!r}: jump host {cfg.jump!r} is not a configured host"
                                 f"{'; ' + hint if hint else ''}")
            if cfg.jump and self.hosts[cfg.jump].transport == "local":
                raise ValueError(f"host {host!r}: jump host {cfg.jump!r} uses the local transport; "
                                 f"a jump host must be an ssh host")
            chain, cur = [host], cfg.jump
            while cur:
                if cur in chain:
                    raise ValueError(f"host {host!r}: jump hosts form a loop ({' -> '.join([*chain, cur])})")
                chain.append(cur)
                cur = self.hosts[cur].jump if cur in self.hosts else None
        for group, members in self.groups.items():
            if group in self.hosts:
                raise ValueError(f"group {group!r} has the name of a host")
            for m in members:
                if m not in self.hosts:
                    raise ValueError(f"group {group!r}: unknown host {m!r}")
        if self.health_watch is not None:   # a typo here would stop `eagle serve` at start, not now
            try:
                inventory.select(list(self.health_watch.hosts), self.hosts, self.groups, self.all_hosts)
            except UsageError as e:
                raise ValueError(f"health_watch.hosts: {e}") from None
        return self

    # -- derived -------------------------------------------------------------
    def path(self, p: str | Path) -> Path:
        q = Path(os.path.expanduser(str(p)))
        return q if q.is_absolute() else (self.base_dir / q)

    @property
    def audit_db_url(self) -> str | None:
        """`audit_db` when it names a PostgreSQL database (`postgresql://user@host[:port]/db`)."""
        return self.audit_db if self.audit_db.startswith(DB_URL_SCHEMES) else None

    @property
    def audit_store(self) -> str | Path:
        """What `open_store` opens: the PostgreSQL URL as written, or the SQLite file's path."""
        return self.audit_db_url or self.db_path

    @property
    def db_path(self) -> Path:
        """The SQLite file; a PostgreSQL URL is never turned into a path (see `audit_store`)."""
        if self.audit_db_url is not None:
            raise UsageError("audit_db is a PostgreSQL URL, not a file: this needs an SQLite audit DB")
        return self.path(self.audit_db)

    @property
    def audit_key_path(self) -> Path | None:
        """The sealing key file: $EAGLE_AUDIT_KEY_FILE (a deployment's override), else `audit_key_file`."""
        env = os.environ.get(KEY_FILE_ENV)
        if env:
            return Path(os.path.expanduser(env))
        return self.path(self.audit_key_file) if self.audit_key_file else None

    @property
    def output_root(self) -> Path:
        """Where the bot writes steps' whole output. Not under `state_dir`: that folder is the
        hosts' (a loopback or `local` host would share it with the bot, as another user)."""
        if self.output_dir:
            return self.path(self.output_dir)
        return (self.base_dir if self.audit_db_url else self.db_path.parent) / "eagle-output"

    @property
    def playbooks_path(self) -> Path | None:
        return self.path(self.playbooks_dir) if self.playbooks_dir else None

    @property
    def all_hosts(self) -> list[str]:
        """The group `all`: every configured host but a local-transport `local` and the hosts
        that are other hosts' `jump` (a bastion runs no playbook unless named); `local` alone
        when there is nothing else."""
        jumps = {h.jump for h in self.hosts.values() if h.jump}
        out = [h for h in self.hosts if h not in jumps and not (h == LOCAL and self.hosts[h].transport == "local")]
        return out or [LOCAL]

    def resolve_hosts(self, names: list[str] | None) -> list[str]:
        """Hosts, comma lists, groups, `all`, ranges and patterns (eaglebot.inventory.select);
        unknown names are a usage error."""
        if not names:
            names = self.default_hosts or [LOCAL]
        out = inventory.select(list(names), self.hosts, self.groups, self.all_hosts)
        if not out:
            raise UsageError("no host given" if not any(str(n).strip(" ,:") for n in names)
                             else f"no host left: {inventory.shown(' '.join(names), 200)} names none")
        return out

    def key_problem(self, name: str) -> str | None:
        """Why host `name`'s SSH key file (its `key`, or its jump hosts') cannot be used, in one
        sentence naming where the config sets it; None when it can (or none is set)."""
        seen: list[str] = []
        while name in self.hosts and name not in seen:
            seen.append(name)
            cfg = self.hosts[name]
            if cfg.transport == "ssh" and cfg.key:
                path = os.path.expanduser(cfg.key)
                why = ("does not exist" if not os.path.lexists(path) else "is not a file" if not os.path.isfile(path)
                       else "is not readable" if not os.access(path, os.R_OK) else None)
                if why is not None:
                    shared = self.host_defaults.get("key")
                    where = ("host_defaults.key" if isinstance(shared, str) and str(self.path(shared)) == path
                             else f"hosts.{name}.key")
                    what = f"the SSH key of its jump host {name}, {where} = {path}," if len(seen) > 1 else \
                        f"the SSH key {where} = {path}"
                    return f"{what} {why}; fix the path in eagle.yaml, or remove it to use the SSH agent"
            name = cfg.jump or ""
        return None

    def is_gpu_host(self, name: str) -> bool:
        """Doctor checks nvidia-smi only on GPU hosts. The rule: `gpu: true|false` on the host wins;
        unmarked, a host whose vars name `nvidia_smi` is one, and so is every ssh host that is not
        only another host's `jump`; the bot's own local-transport host is not (it has no GPUs)."""
        cfg = self.hosts[name]
        if cfg.gpu is not None:
            return cfg.gpu
        if "nvidia_smi" in cfg.vars:
            return True
        is_jump = any(h.jump == name for h in self.hosts.values())
        return cfg.transport == "ssh" and not is_jump

    @property
    def access_configured(self) -> bool:
        """False when eagle.yaml has no `access` section (Slack users may only view)."""
        return "access" in self.model_fields_set

    def slack_api_url(self) -> str | None:
        url = os.environ.get("SLACK_API_URL") or self.slack.api_url
        if url and not url.endswith("/"):
            url += "/"
        return url


def yaml_line(text: str, loc: tuple[str | int, ...]) -> int | None:
    """The 1-based line of `loc` (('hosts', 'gpu-01', 'port'), ('schedules', 2)) in a YAML
    document: the deepest part of the path that exists. (The playbook loader keeps its own
    full line map; this layer is below it.)"""
    import yaml

    from eaglebot import yamlsafe

    try:
        node = yamlsafe.compose(text)
    except yaml.YAMLError:
        return None
    line: int | None = None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == str(key)), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _format_validation(err: ValidationError, source: str, text: str = "", data: Any = None) -> str:
    first = err.errors()[0]
    where_loc = tuple(first["loc"])
    loc = ".".join(str(p) for p in where_loc)
    msg = first["msg"]
    if first["type"] == "extra_forbidden" and where_loc:
        msg = "unknown key" + unknown_key_hint(str(where_loc[-1]), keys_at(Settings, where_loc[:-1]))
    where = f"{loc}: " if loc else ""
    line_loc = where_loc
    if len(where_loc) > 1 and where_loc[0] == "hosts" and isinstance(data, dict) and isinstance(data.get("hosts"), dict):
        # a host of a range: its line is the range's (`gpu-[01:08]:`)
        key = inventory.key_for(data["hosts"], str(where_loc[1]))
        line_loc = ("hosts", key or str(where_loc[1]), *where_loc[2:])
    line = yaml_line(text, line_loc) if text else None
    return f"{source}{f':{line}' if line else ''}: {where}{msg}"


def load_settings(path: str | Path | None = None) -> Settings:
    """Read `path`, else $EAGLE_CONFIG, else the first of `configfile.search_path()` that exists
    (./eagle.yaml, a parent folder's, the user's, the system's); no file means defaults."""
    p, explicit = config_path(path)
    if not p.exists():
        if explicit:
            raise UsageError(f"config file {p} does not exist")
        # No config: a ./playbooks folder, when there is one, is the playbooks_dir.
        return Settings(base_dir=Path.cwd(), playbooks_dir="playbooks" if Path("playbooks").is_dir() else None)
    data, text = read_config_text(p)
    try:
        settings = Settings(**data, base_dir=p.resolve().parent, source=p.resolve())
    except ValidationError as e:
        raise UsageError(_format_validation(e, str(p), text, data)) from None
    except inventory.InventoryError as e:
        line = yaml_line(text, e.loc) if e.loc else None
        raise UsageError(f"{p}{f':{line}' if line else ''}: {e}") from None
    folder = settings.playbooks_path
    if folder is not None and not folder.is_dir():
        at = yaml_line(text, ("playbooks_dir",))
        raise UsageError(f"{p}{f':{at}' if at else ''}: playbooks_dir: {folder} is not a folder "
                         "(create it or fix the path; it is relative to the config file)")
    retired = [name for name, h in settings.hosts.items() if h.shell == "persistent"]
    if retired:  # a warning, not an error: the key stays valid (stderr, or serve's log)
        log.warning("%s: hosts %s: %s", p, ", ".join(retired), RETIRED_SHELL)
    return settings
