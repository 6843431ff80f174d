"""Settings: `eagle.yaml` plus the environment.

Secrets never live in the file: Slack tokens come from the environment only.
Paths in the file (audit_db, playbooks_dir, skill_paths, keys) are relative to the file's folder.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from eaglebot.configfile import config_path, read_config
from eaglebot.errors import UsageError

LOCAL = "local"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HostConfig(_Model):
    transport: Literal["ssh", "local"] = Field("ssh", description="ssh (default) or local")
    address: str | None = Field(None, description="host name or IP address to connect to")
    user: str | None = Field(None, description="SSH user (default: the current user)")
    port: int = Field(22, ge=1, le=65535)
    key: str | None = Field(None, description="private key file; without it the SSH agent and default keys are used")
    known_hosts: str | None = Field(None, description="known_hosts file used to verify the host key (default ~/.ssh/known_hosts)")
    jump: str | None = Field(None, description="name of another configured host to tunnel through")
    connect_timeout_s: float = Field(10.0, gt=0)
    max_channels: int = Field(8, ge=1, le=64, description="concurrent SSH channels (sshd's MaxSessions is 10)")
    shell: Literal["persistent", "exec"] = Field(
        "persistent", description="persistent: commands run in a long-lived sh per channel (fast); "
                                  "exec: one SSH channel (or local sh -c) per command")
    vars: dict[str, Any] = Field(default_factory=dict, description="host variables for templating")

    @model_validator(mode="after")
    def _needs_address(self) -> "HostConfig":
        if self.transport == "ssh" and not self.address:
            raise ValueError("an ssh host needs an address")
        return self


class SlackConfig(_Model):
    channel: str | None = None
    api_url: str | None = Field(None, description="Web API base URL (tests, proxies); env SLACK_API_URL wins")
    progress_interval_s: float = Field(1.0, ge=0.0)


class AccessConfig(_Model):
    operators: list[str] = Field(default_factory=lambda: ["*"])
    approvers: list[str] = Field(default_factory=lambda: ["*"])
    viewers: list[str] = Field(default_factory=lambda: ["*"])
    playbooks: dict[str, list[str]] = Field(default_factory=dict, description="optional allowlist per playbook")
    approval_timeout_s: float = Field(900.0, gt=0)


class ScheduleConfig(_Model):
    name: str
    playbook: str
    hosts: list[str] = Field(default_factory=list)
    cron: str
    timezone: str = "UTC"
    channel: str | None = None
    inputs: dict[str, Any] = Field(default_factory=dict)
    approve: bool = Field(False, description="approve `confirm` steps (nobody is there to ask)")
    misfire_grace_s: int = Field(3600, ge=1)


class RegressionConfig(_Model):
    window: int = Field(10, ge=2)
    min_history: int = Field(5, ge=1)
    min_pct: float = Field(5.0, ge=0)
    k_sigma: float = Field(3.0, ge=0)


class Settings(_Model):
    audit_db: str = "eagle.db"
    playbooks_dir: str | None = None
    skill_paths: list[str] = Field(default_factory=list,
                                   description="folders of a team's own skills: each *.py in them with NAME, Params and run")
    hosts: dict[str, HostConfig] = Field(default_factory=dict)
    groups: dict[str, list[str]] = Field(default_factory=dict)
    default_hosts: list[str] = Field(default_factory=list)
    slack: SlackConfig = Field(default_factory=SlackConfig)
    access: AccessConfig = Field(default_factory=AccessConfig)
    schedules: list[ScheduleConfig] = Field(default_factory=list)
    regression: RegressionConfig = Field(default_factory=RegressionConfig)
    redact: list[str] = Field(default_factory=list, description="regular expressions removed from stored and posted text")
    max_parallel_hosts: int = Field(64, ge=1, description="hosts one run works on at once")
    max_hosts_total: int = Field(256, ge=1, description="hosts all runs of one process work on at once")
    max_connecting: int = Field(64, ge=1, description="SSH connections being opened at once, per process")
    state_dir: str = Field("~/.eaglebot", description="where the bot keeps pid and log files on each host")
    # Not from the file: where it was read from (relative paths resolve against it).
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)
    source: Path | None = Field(None, exclude=True)

    @field_validator("hosts", mode="before")
    @classmethod
    def _hosts_not_none(cls, v: Any) -> Any:
        return {} if v is None else v

    @model_validator(mode="after")
    def _local_always_exists(self) -> "Settings":
        if LOCAL not in self.hosts:
            self.hosts[LOCAL] = HostConfig(transport="local")
        for host, cfg in self.hosts.items():
            if cfg.jump and cfg.jump not in self.hosts:
                raise ValueError(f"host {host!r}: jump host {cfg.jump!r} is not a configured host")
        for group, members in self.groups.items():
            if group in self.hosts:
                raise ValueError(f"group {group!r} has the name of a host")
            for m in members:
                if m not in self.hosts:
                    raise ValueError(f"group {group!r}: unknown host {m!r}")
        return self

    # -- derived -------------------------------------------------------------
    def path(self, p: str | Path) -> Path:
        q = Path(os.path.expanduser(str(p)))
        return q if q.is_absolute() else (self.base_dir / q)

    @property
    def db_path(self) -> Path:
        return self.path(self.audit_db)

    @property
    def playbooks_path(self) -> Path | None:
        return self.path(self.playbooks_dir) if self.playbooks_dir else None

    def resolve_hosts(self, names: list[str] | None) -> list[str]:
        """Expand comma lists and groups; unknown names are a usage error."""
        if not names:
            names = self.default_hosts or [LOCAL]
        out: list[str] = []
        for raw in names:
            for name in (n.strip() for n in str(raw).split(",")):
                if not name:
                    continue
                members = self.groups.get(name, [name])
                for m in members:
                    if m not in self.hosts:
                        known = ", ".join(sorted(set(self.hosts) | set(self.groups)))
                        raise UsageError(f"unknown host {m!r} (known: {known})")
                    if m not in out:
                        out.append(m)
        if not out:
            raise UsageError("no host given")
        return out

    def slack_api_url(self) -> str | None:
        url = os.environ.get("SLACK_API_URL") or self.slack.api_url
        if url and not url.endswith("/"):
            url += "/"
        return url


def _format_validation(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    where = f"{loc}: " if loc else ""
    return f"{source}: {where}{msg}"


def load_settings(path: str | Path | None = None) -> Settings:
    """Read `path`, else $EAGLE_CONFIG, else ./eagle.yaml; no file means defaults."""
    p, explicit = config_path(path)
    if not p.exists():
        if explicit:
            raise UsageError(f"config file {p} does not exist")
        return Settings(base_dir=Path.cwd())
    data = read_config(p)
    try:
        return Settings(**data, base_dir=p.resolve().parent, source=p.resolve())
    except ValidationError as e:
        raise UsageError(_format_validation(e, str(p))) from None
