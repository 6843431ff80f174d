"""One view of a run for every front end, built from the audit store's rows (pure over them).

`eagle show --json`, `eagle run --json`, `eagle history`, `/eagle history`, `/eagle show`,
the Slack run summary and the scheduler's reports all read runs through `RunView` and
`HistoryRow`, so they cannot drift apart (they once had three rules for a run's key metric).
Rendering (text, Block Kit) stays in the front ends.
"""
from __future__ import annotations

import json

from dataclasses import dataclass, field
from typing import Any, Iterable, TypedDict, TYPE_CHECKING

from eaglebot.history.incidents import by_cause, cause_of, describe_cause
from eaglebot.history.recap import HostRecap, host_recap
from eaglebot.store import parse_iso
from eaglebot.store.rows import ChangeRow, IncidentRow, MetricRow, RegressionRow, RunRow, StepRow, WarningRow

if TYPE_CHECKING:
    from eaglebot.store.protocol import HistoryStore

KEY_METRIC = "output_throughput"


def key_metric(metrics: Iterable[MetricRow]) -> MetricRow | None:
    """The one number a run is known by in history tables, trend plots and schedule reports.

    The policy, defined here and nowhere else: the run's `output_throughput` when it recorded
    one (the last such row, in the order recorded: a repair or a tune measures several times
    and is known by its final result), else the first metric it recorded at all; None for a
    run without metrics. Throughput wins over recording order because it is what a relaunch
    or a benchmark exists to measure, whatever a playbook happens to record first.
    """
    first = last = None
    for m in metrics:
        if m["name"] == KEY_METRIC:
            last = m
        if first is None:
            first = m
    return last or first


def step_data(step: StepRow) -> dict[str, Any]:
    """A step's registered data (`--json` steps' `data`): {} when it registered none or it is unreadable."""
    try:
        data = json.loads(step.get("data") or "{}")
    except (TypeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def duration_s(run: RunRow) -> float | None:
    """Seconds between the run's start and finish; None while it runs (or if never started)."""
    a, b = parse_iso(run.get("started_at")), parse_iso(run.get("finished_at"))
    if a and b:
        return (b - a).total_seconds()
    return None


class StepSummary(TypedDict):
    host: str
    name: str
    status: str
    summary: str
    duration_ms: int
    multi_host: bool
    output_tail: str


class RunSummary(TypedDict, total=False):
    """A run as the Slack summary renders it; a live run's progress view has the same keys."""
    run_id: int
    playbook: str
    hosts: list[str]
    actor: str | None
    status: str
    dry_run: bool
    duration_s: float | None
    error: str | None
    steps: list[StepSummary]
    metrics: list[dict[str, Any]]
    warnings: list[str]
    regressions: list[dict[str, Any]]
    plan: list[str]
    recap: list[HostRecap]      # a run over several hosts: one entry per host


OUTPUT_TAIL = 4000  # characters of a failed step's output a summary carries


@dataclass(frozen=True)
class RunView:
    """A run and everything recorded under it, as the store has it."""

    run: RunRow
    steps: list[StepRow]
    metrics: list[MetricRow]
    warnings: list[WarningRow]
    regressions: list[RegressionRow]
    changes: list[ChangeRow]
    incidents: list[IncidentRow] = field(default_factory=list)   # open ones of its playbook + hosts
    flagged: list[IncidentRow] = field(default_factory=list)     # the ones this run flagged, whatever they are now
    children: list[HistoryRow] = field(default_factory=list)     # the runs it started (tune, sweep, bisect)

    @classmethod
    def load(cls, store: HistoryStore, run_id: int) -> RunView | None:
        run = store.get_run(run_id)
        if run is None:
            return None
        incidents = [i for h in run.get("hosts") or []
                     for i in store.incidents(playbook=run["playbook"], host=h)]
        regressions = store.regressions(run_id)
        flagged = store.incidents(status=None, run_id=run_id, limit=1000) if regressions else []
        kids = store.children(run_id)
        ids = [k["id"] for k in kids]
        children = history_rows(kids, store.metrics_for_runs(ids), store.regression_counts(ids)) if kids else []
        return cls(run, store.steps(run_id), store.metrics(run_id), store.warnings(run_id),
                   regressions, store.changes(run_id), incidents, flagged, children)

    @property
    def run_id(self) -> int:
        run_id: int = self.run["id"]
        return run_id

    @property
    def playbook(self) -> str:
        playbook: str = self.run["playbook"]
        return playbook

    @property
    def hosts(self) -> list[str]:
        return list(self.run.get("hosts") or [])

    @property
    def status(self) -> str:
        status: str = self.run["status"]
        return status

    @property
    def dry_run(self) -> bool:
        return bool(self.run.get("dry_run"))

    @property
    def error(self) -> str | None:
        return self.run.get("error")

    @property
    def duration_s(self) -> float | None:
        return duration_s(self.run)

    @property
    def key_metric(self) -> MetricRow | None:
        return key_metric(self.metrics)

    @property
    def warning_lines(self) -> list[str]:
        return [(f"{w['host']}: " if w.get("host") else "") + w["message"] for w in self.warnings]

    def recap(self) -> list[HostRecap]:
        """The per-host recap (eaglebot.history.recap)."""
        return host_recap(self.hosts, self.steps, self.warnings, running=self.status == "running")

    @property
    def gpu_health(self) -> list[dict[str, Any]]:
        """Each GPU a gpu.health step judged: host, gpu, verdict, reasons, readings (what
        nvidia-smi gave), in step order. `eagle show` and `--json` carry it."""
        out: list[dict[str, Any]] = []
        for s in self.steps:
            if s["skill"] != "gpu.health" or not s.get("data"):
                continue
            try:
                data = json.loads(s["data"] or "")
            except ValueError:
                continue
            verdicts = data.get("health") if isinstance(data, dict) else None
            readings = data.get("gpus") if isinstance(data, dict) else None
            if not isinstance(verdicts, dict):
                continue
            for gpu, v in verdicts.items():
                out.append({"host": s["host"], "gpu": int(gpu) if str(gpu).isdigit() else gpu,
                            "verdict": (v or {}).get("verdict"), "reasons": list((v or {}).get("reasons") or []),
                            "readings": (readings or {}).get(gpu) or {}})
        return out

    def regressions_of(self, kind: str) -> list[RegressionRow]:
        """`regression` or `improvement` rows."""
        return [r for r in self.regressions if (r.get("kind") or "regression") == kind]

    def incident_of(self, r: RegressionRow) -> int | None:
        """The incident a regression row is part of (its cause's id: one drop that moved several
        metrics at one change point is one incident), or None (a fixed baseline's, an improvement)."""
        if (r.get("kind") or "regression") != "regression":
            return None
        return next((cause_of(i) for i in self.flagged if (i["host"], i["metric"]) == (r["host"], r["metric"])), None)

    def regression_groups(self) -> list[list[RegressionRow]]:
        """The run's regressions and improvements, one group per incident, in the order recorded; a
        row of no incident is a group of its own."""
        groups: dict[object, list[RegressionRow]] = {}
        for r in self.regressions:
            iid = self.incident_of(r)
            groups.setdefault(("incident", r["host"], iid) if iid is not None else ("row", r["id"]), []).append(r)
        return list(groups.values())

    def as_json(self) -> dict[str, Any]:
        """`eagle show ID --json` and `eagle run --json` (docs/cli.md, "Exit codes and output")."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "parent_run_id": self.run.get("parent_run_id"),
            "children": [c.run_id for c in self.children],
            "steps": [{"name": s["name"], "skill": s["skill"], "host": s["host"], "status": s["status"],
                       "summary": s["summary"] or "", "duration_ms": s["duration_ms"] or 0,
                       "attempts": s["attempts"] or 0, "data": step_data(s)} for s in self.steps],
            "metrics": [{"host": m["host"], "name": m["name"], "value": m["value"], "unit": m["unit"],
                         "better": m["better"]} for m in self.metrics],
            "warnings": self.warning_lines,
            "regressions": [{"metric": r["metric"], "host": r["host"], "value": r["value"],
                             "reference": r["reference"], "delta_pct": r["delta_pct"], "reason": r["reason"]}
                            for r in self.regressions_of("regression")],
            "hosts": [{"name": h["name"], "status": h["status"], "ok": h["ok"], "changed": h["changed"],
                       "failed": h["failed"], "unreachable": h["unreachable"], "skipped": h["skipped"],
                       "duration_s": h["duration_s"], "failure": h["failure"]} for h in self.recap()],
            # only in runs with a gpu.health step: every other run's document stays as it was
            **({"gpu_health": health} if (health := self.gpu_health) else {}),
        }

    def summary(self) -> RunSummary:
        """What a run's summary shows: steps (a failed one with its output's tail), metrics,
        warnings, regressions and improvements."""
        multi = len(self.hosts) > 1
        return {
            "run_id": self.run_id, "playbook": self.playbook, "hosts": self.hosts,
            "actor": self.run.get("actor"), "status": self.status, "dry_run": self.dry_run,
            "duration_s": self.duration_s, "error": self.error,
            "steps": [{"host": s["host"], "name": s["name"], "status": s["status"], "summary": s["summary"] or "",
                       "duration_ms": s["duration_ms"] or 0, "multi_host": multi,
                       "output_tail": (s.get("output") or "")[-OUTPUT_TAIL:] if s["status"] == "failed" else ""}
                      for s in self.steps],
            "metrics": [{"host": m["host"], "name": m["name"], "value": m["value"], "unit": m["unit"]}
                        for m in self.metrics],
            # Open incidents ride with the warnings, so every front end's summary (the Slack
            # thread, nightly posts) shows them without a renderer of its own.
            "warnings": self.warning_lines + [f"open {describe_cause(g)}" for g in by_cause(self.incidents)],
            "regressions": [{"host": r["host"], "metric": r["metric"], "value": r["value"],
                             "reference": r["reference"], "delta_pct": r["delta_pct"], "reason": r["reason"],
                             "kind": r.get("kind") or "regression", "incident": self.incident_of(r)}
                            for r in self.regressions],
            "recap": self.recap() if multi else [],
        }


@dataclass(frozen=True)
class HistoryRow:
    """One line of `eagle history` / `/eagle history`: the run row and its key metric."""

    run: RunRow
    key_metric: MetricRow | None
    regressions: int = 0           # regressions flagged on the run
    children: int = 0              # runs it started (tune, sweep, bisect): listed by `eagle show`

    @property
    def status_label(self) -> str:
        """The status as people read it: `succeeded ▼2` (2 regressions), `succeeded (dry-run)`."""
        label = str(self.run["status"])
        if self.regressions:
            label += f" ▼{self.regressions}"
        if self.run.get("dry_run"):
            label += " (dry-run)"
        if self.children:
            label += f" +{self.children} run{'s' if self.children != 1 else ''}"
        return label

    @property
    def run_id(self) -> int:
        run_id: int = self.run["id"]
        return run_id

    @property
    def duration_s(self) -> float | None:
        return duration_s(self.run)

    def as_json(self) -> dict[str, Any]:
        """One element of `eagle history --json` (docs/cli.md, "Exit codes and output")."""
        r = self.run
        return {"run_id": r["id"], "playbook": r["playbook"], "hosts": r.get("hosts") or [],
                "status": r["status"], "actor": r.get("actor"), "origin": r.get("origin"),
                "started_at": r.get("started_at"), "finished_at": r.get("finished_at"),
                "parent_run_id": r.get("parent_run_id"), "children": self.children,
                "dry_run": bool(r.get("dry_run")), "duration_ms": None if (d := self.duration_s) is None else round(d * 1000),
                "key_metric": None if (m := self.key_metric) is None else
                {"host": m["host"], "name": m["name"], "value": m["value"], "unit": m["unit"]},
                "regressions": self.regressions}


def history_rows(runs: list[RunRow], metrics_by_run: dict[int, list[MetricRow]],
                 regressions: dict[int, int] | None = None, children: dict[int, int] | None = None) -> list[HistoryRow]:
    return [HistoryRow(r, key_metric(metrics_by_run.get(r["id"], [])), (regressions or {}).get(r["id"], 0),
                       (children or {}).get(r["id"], 0)) for r in runs]


def load_history(store: HistoryStore, *, playbook: str | None = None, host: str | None = None,
                 limit: int = 20, status: str | None = None, since: str | None = None,
                 all_runs: bool = False) -> list[HistoryRow]:
    """Past runs, newest first, each with its key metric, regression count and how many runs
    it started (four queries however many runs). The runs a tune, sweep or bisect started are
    counted on its row, not listed, unless `all_runs`."""
    runs = store.history(playbook=playbook, host=host, limit=limit, status=status, since=since, top_level=not all_runs)
    ids = [r["id"] for r in runs]
    return history_rows(runs, store.metrics_for_runs(ids), store.regression_counts(ids), store.child_counts(ids))
