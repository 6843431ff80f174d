"""Settings: `eagle.yaml` plus the environment.

Secrets never live in the file: Slack tokens come from the environment only.
Paths in the file (audit_db, playbooks_dir, skill_paths, keys) are relative to the file's folder.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from eaglebot import inventory
from eaglebot.configfile import KEY_FILE_ENV, config_path, read_config_text
from eaglebot.errors import UsageError
from eaglebot.suggest import did_you_mean, keys_at, unknown_key_hint

DB_URL_SCHEMES = ("postgresql://", "postgres://")  # audit_db on a PostgreSQL server

LOCAL = "local"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


ShellMode = Literal["persistent", "exec"]


def _default_shell() -> ShellMode:
    """`shell` of a host that does not say: exec, or env EAGLE_SHELL_MODE (e.g. `persistent` for
    every host at once). exec is the default because a command's exit status then comes from
    sshd, which no process of the SSH user can forge (see eaglebot.transport.shell)."""
    mode = os.environ.get("EAGLE_SHELL_MODE", "").strip() or "exec"
    if mode == "persistent":
        return "persistent"
    if mode == "exec":
        return "exec"
    raise UsageError(f"EAGLE_SHELL_MODE must be persistent or exec, got {mode!r}")


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
        description="concurrent SSH channels to the host (sshd's `MaxSessions` is 10); a persistent host "
                    "keeps at most half of them as shells")
    shell: ShellMode = Field(
        default_factory=_default_shell,
        description="`exec`: one SSH channel (or local `sh -c`) per command; `persistent`: a run's commands "
                    "go through a shell of its own (see [Reliability](reliability.md#run-isolation))")
    vars: dict[str, Any] = Field(
        default_factory=dict,
        description="host variables for templating (`python` (a GPU host's Python that imports sglang: `eagle "
                    "doctor` and the launch pre-flight check), `model`, `draft`, `port`, `bind` (the address "
                    "the relaunched server listens on, its `--host`: default `127.0.0.1`, `0.0.0.0` for other "
                    "machines), `server_log`, `nvidia_smi`, `dmesg`, `draft_train_layers` (the layer outputs "
                    "the draft's training concatenated, e.g. `[2, 30, 58]`), `draft_train_accuracy` (its "
                    "training accuracy at the first position), `sglang_version` (the table the gate and the "
                    "launch check fall back to), ...); one that no playbook or skill reads but is near one "
                    "that does (`pyton:`) is a warning in the run and in `eagle doctor` (see [Host "
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


class SlackConfig(_Model):
    """Where and how the bot posts in Slack (the tokens are never in the file: see Environment)."""
    channel: str | None = Field(
        None,
        description="the bot's channel: scheduled runs, the daily audit head, warnings")
    api_url: str | None = Field(
        None,
        description="Web API base URL (a proxy, tests); `$SLACK_API_URL` wins; ends in `/` (default: Slack's)")
    progress_interval_s: float = Field(
        1.0, ge=0.0,
        description="seconds between two edits of one progress message (never less than 1)")


class AccessConfig(_Model):
    """Slack only (CLI runs are not subject to it). Closed by default: without an `access`
    section Slack users may view, nothing more."""
    operators: list[str] = Field(
        default_factory=list,
        description="Slack user ids who may run, cancel, rerun, ack, pause, set baselines")
    approvers: list[str] = Field(
        default_factory=list,
        description="Slack user ids who may approve `confirm` steps")
    viewers: list[str] = Field(
        default_factory=lambda: ["*"],
        description="who may view (history, show, status, logs, schedule, trend, diff); `\"*\"` is everyone")
    self_approval: bool = Field(
        False,
        description="may the requester of a run approve its own `confirm` steps")
    playbooks: dict[str, list[str]] = Field(
        default_factory=dict,
        description="optional allowlist per playbook: name → user ids. It holds for every word that runs the "
                    "playbook from Slack (a run, `rerun`, `sweep` and `sweep resume`, `tune`, `tune apply` and its "
                    "Apply button, `bisect` and the playbooks of the runs it bisects)")
    approval_timeout_s: float = Field(
        900.0, gt=0,
        description="no answer within this is a deny (default: `900`)")

    def playbook_refusal(self, playbook: str, user: str) -> str | None:
        """None when `user` may run `playbook` (it has no allowlist, or the list names them or
        `*`), else the sentence that refuses it, naming the key."""
        allow = self.playbooks.get(playbook)
        if allow is None or "*" in allow or user in allow:
            return None
        return f"you are not on the allowlist of playbook {playbook!r} (access.playbooks.{playbook})"


class ScheduleConfig(_Model):
    """A scheduled run: `eagle serve` fires it (one replica per fire)."""
    name: str = Field(
        description="unique; `eagle schedule pause nightly-bench` uses it")
    playbook: str = Field(
        description="must exist; `tune` is a nightly `eagle tune` (its `inputs`: `playbook`, `batch_sizes`, "
                    "`budget`, ..., see [Tuning](tuning.md#apply-proposals-and-re-tuning)); it proposes, "
                    "never applies")
    hosts: list[str] = Field(
        default_factory=list,
        description="must be known")
    cron: str | None = Field(
        None,
        description="standard crontab, 5 fields (day-of-week 0 or 7 = Sunday); not both day-of-month and "
                    "day-of-week (default: one of `cron`/`every`)")
    every: str | None = Field(
        None,
        description="a fixed interval instead: `5s`, `10m`, `1h`; fire times are counted from the epoch "
                    "(every 5m fires at :00, :05, ...), so every replica computes the same ones (default: one "
                    "of `cron`/`every`)")
    timezone: str = Field(
        "UTC",
        description="an IANA name (`Europe/Berlin`)")
    channel: str | None = Field(
        None,
        description="where the run is posted (default: `slack.channel`)")
    inputs: dict[str, Any] = Field(
        default_factory=dict,
        description="the playbook's inputs, checked when the config is loaded")
    approve: bool = Field(
        False,
        description="approve `confirm` steps (nobody is there to ask; otherwise they are denied)")
    misfire_grace_s: int = Field(
        3600, ge=1,
        description="a fire missed by up to this long still runs")

    @model_validator(mode="after")
    def _cron_or_every(self) -> "ScheduleConfig":
        if (self.cron is None) == (self.every is None):
            raise ValueError("give exactly one of cron: or every:")
        if self.every is not None:
            self.every_s  # noqa: B018  (validates the interval now, with the file's line)
        return self

    @property
    def every_s(self) -> int:
        """`every:` in seconds (5s, 10m, 1h)."""
        m = re.fullmatch(r"\s*(\d+)\s*([smh])\s*", self.every or "")
        if m is None or int(m[1]) == 0:
            raise ValueError(f"every: {self.every!r} is not an interval such as 5s, 10m or 1h")
        return int(m[1]) * {"s": 1, "m": 60, "h": 3600}[m[2]]


class RegressionConfig(_Model):
    """The regression check: see [Regressions](regressions.md) for how these are used."""
    window: int = Field(
        10, ge=2,
        description="successful runs the median is taken over")
    min_history: int = Field(
        5, ge=1,
        description="fewer prior runs: \"insufficient history\", nothing flagged")
    min_pct: float = Field(
        5.0, ge=0,
        description="a change must exceed this many percent...")
    k_sigma: float = Field(
        3.0, ge=0,
        description="...and this many robust sigmas (1.4826·MAD) to be flagged")
    confirm_runs: int = Field(
        2, ge=1, le=5,
        description="consecutive runs beyond both thresholds before the quick check flags a drop; with `2` "
                    "one bad night alone is a \"suspect\" note, `1` flags the first bad night (as PyTorch's HUD "
                    "needs 2 bad points in a row); see the [detector "
                    "benchmark](regressions.md#how-good-is-the-detector)")


XID_DEFAULTS: dict[str, dict[str, Any]] = {
    # The fatal Xids of REFERENCE.md's table; 13 is usually the application, unless it repeats.
    "48": {"severity": "fail"}, "61": {"severity": "fail"}, "62": {"severity": "fail"},
    "64": {"severity": "fail"}, "74": {"severity": "fail"}, "79": {"severity": "fail"},
    "94": {"severity": "fail"}, "95": {"severity": "fail"}, "119": {"severity": "fail"}, "120": {"severity": "fail"},
    "13": {"severity": "warn", "fail_after": 5, "window_s": 3600},
    "31": {"severity": "warn", "fail_after": 5, "window_s": 3600},
}


class XidRule(_Model):
    """One Xid code's rule (`health_watch.xid."79"`), over the defaults below the example."""
    severity: Literal["warn", "fail"] = Field(
        description="`warn` (the GPU is suspect) or `fail` (it is quarantined)")
    fail_after: int | None = Field(
        None, ge=1,
        description="this many of a `warn` Xid within `window_s` make it `fail` (at once: the occurrences "
                    "agree)")
    window_s: float = Field(
        3600.0, gt=0,
        description="the window `fail_after` counts over, in seconds (default: `3600`)")
    at_once: bool | None = Field(
        None,
        description="`true`: a `fail` of this Xid quarantines without a second probe; `false`: it waits for "
                    "one (default: the fatal class)")


class HealthWatchConfig(_Model):
    """The fleet health watch `eagle serve` runs (none: no watch)."""
    hosts: list[str] = Field(
        default_factory=lambda: ["all"],
        description="hosts, groups or patterns the watch probes (as `-H` takes them)")
    interval_s: float = Field(
        60.0, gt=0,
        description="one probe per host per interval: the health query, `nvidia-smi nvlink -s` and the kernel "
                    "log's Xid lines since the host's cursor (each Xid is reported once); never DCGM "
                    "(default: `60`)")
    probe_timeout_s: float = Field(
        15.0, gt=0,
        description="a host's probe deadline; a probe past it is the finding \"probe hung\" (the host is "
                    "suspect) and never delays the other hosts (default: `15`)")
    clear_after: int = Field(
        3, ge=1,
        description="consecutive clean probes before a suspect or quarantined host is healthy again (no "
                    "restart of anything); a GPU held because the driver asked for a recovery action "
                    "(`gpu_recovery_action`, driver 550+, e.g. `Reset`) is cleared as soon as it reads `None` "
                    "again")
    max_quarantined_pct: float = Field(
        25.0, ge=0, le=100,
        description="circuit breaker: a host that should be quarantined while this share of the watched hosts "
                    "already is (rounded down, at least one host unless `0`) stays `suspect`, and is still "
                    "alerted (default: `25`)")
    channel: str | None = Field(
        None,
        description="where the alerts go (default: `slack.channel`)")
    auto_drain: bool = Field(
        False,
        description="run the `drain` playbook on a host as soon as it is quarantined, without asking an "
                    "approver (otherwise a drain is the alert's Drain button or `eagle run drain`, which "
                    "asks); the circuit breaker applies to automatic and approved drains alike: no drain once "
                    "`max_quarantined_pct` of the watched hosts are draining or drained")
    xid: dict[str, XidRule] = Field(
        default_factory=dict,
        description="per Xid code (`\"79\"`), a rule over the default:")
    confirm_after_s: float = Field(
        10.0, gt=0, le=3600,
        description="a `fail` outside the fatal class (below) makes the GPU `suspect` and is confirmed by a "
                    "second probe of that host this long after the first (its loop runs it early); only a "
                    "second probe that finds a `fail` on the same GPU quarantines it, one that finds none "
                    "drops it (default: `10`)")
    confirm_within_s: float = Field(
        120.0, gt=0, le=86400,
        description="a second probe agrees only within this long of the first finding (after a hung probe, "
                    "say); later, a `fail` starts over (default: `120`)")
    teardown_grace_s: float = Field(
        30.0, ge=0, le=3600,
        description="the bot's own teardown window (from a kill it issued until `gpu.verify` read the GPU "
                    "free) lasts this long more (default: `30`)")
    expected_xids: list[int] | None = Field(
        None,
        description="application Xids that are `expected`, never a finding, inside the bot's own teardown "
                    "window (default: `[13, 31, 43, 45, 68, 69]`)")

    @field_validator("xid")
    @classmethod
    def _xid_codes(cls, v: dict[str, XidRule]) -> dict[str, XidRule]:
        for code in v:
            if not str(code).isdigit():
                raise ValueError(f"Xid {code!r} is not a number")
        return v

    def xid_policy(self) -> dict[int, XidRule]:
        """The defaults with this file's rules over them, by code."""
        merged = {int(k): XidRule(**r) for k, r in XID_DEFAULTS.items()}
        merged.update({int(k): r for k, r in self.xid.items()})
        return merged


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
    return settings
