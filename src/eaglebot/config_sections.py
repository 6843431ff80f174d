"""The sections of `eagle.yaml` below the top level that are not hosts: `slack`, `access`,
`schedules[]`, `regression` and `health_watch` (eaglebot.config holds the top level and the
hosts, and re-exports these). Each field's description is the documentation of its key:
docs/configuration.md's tables are generated from them."""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
                    "playbook from Slack (a run, `rerun`, `sweep` and `sweep resume`, `tune`, `tune apply` "
                    "and its Apply button, `bisect`, and the playbooks of the runs it bisects); the CLI is "
                    "not subject to `access`")
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
