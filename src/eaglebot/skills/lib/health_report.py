"""gpu.health's decision, pure: the readings of every probe -> the step's result.

The skill gathers (the health query, NVLink, the kernel log's Xids, DCGM) and hands what it
got to `health_report`, which judges each selected GPU (`facts.gpu.health.evaluate`), adds
DCGM's verdict and decides the step (`HealthReport`): any `fail` fails it, `warn` is a warning (or a failure
with `fail_on_warn`). tests/test_health_report.py runs it on JSON cases built from the
real 2x H200 captures (tests/fixtures/health_cases/).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eaglebot.facts.gpu import health as hf


@dataclass(frozen=True)
class Readings:
    """What the probes found on one host."""

    rows: dict[int, dict[str, Any]]                  # the health query, by GPU index
    selected: list[int]
    links: dict[int, dict[int, float | None]]        # nvlink -s
    link_errors: dict[int, dict[str, int]]           # nvlink -e
    xids: list[hf.Xid]
    dcgm: dict[str, Any]                             # {"status": ok|warn|fail|skipped, "why": ..., "tests": ...}
    dropped: list[str]                               # fields this driver did not know
    notes: list[str]                                 # probes that could not tell, said
    unreadable: dict[int, str] = field(default_factory=dict)   # `cannot read GPU N: ...` (ERR!, a bad row)


@dataclass(frozen=True)
class HealthReport:
    failed: bool
    summary: str
    data: dict[str, Any]
    warnings: list[str]
    output: str


def health_report(host: str, r: Readings, t: hf.Thresholds, *, fail_on_warn: bool) -> HealthReport:
    bus = {i: str(row.get("pci.bus_id") or "") for i, row in r.rows.items()}
    verdicts: dict[int, hf.Verdict] = {}
    for i in r.selected:
        mine = [x for x in r.xids if hf.xid_gpu(x, bus) in (i, None)]
        v = hf.evaluate(r.rows[i], t, nvlink=r.links.get(i), nvlink_errors=r.link_errors.get(i), xids=mine)
        if i in r.unreadable:     # fail closed: a GPU the driver cannot read is never healthy
            v.add("fail", r.unreadable[i], "unreadable")
        if r.dcgm["status"] in ("fail", "warn"):
            v.add(r.dcgm["status"], r.dcgm["why"])
        verdicts[i] = v
    sel = r.selected
    data: dict[str, Any] = {
        "health": {str(i): v.as_dict() for i, v in verdicts.items()},
        "gpus": {str(i): r.rows[i] for i in sel},
        "nvlink": {str(i): {str(k): s for k, s in r.links.get(i, {}).items()} for i in sel if i in r.links},
        "nvlink_errors": {str(i): r.link_errors[i] for i in sel if i in r.link_errors},
        "xids": [{"bus_id": x.bus_id, "code": x.code, "meaning": x.meaning, "text": x.text} for x in r.xids],
        "dcgm": r.dcgm, "dropped_fields": r.dropped, "notes": r.notes,
    }
    out = [hf.summary_line(r.rows[i]) for i in sel]
    for i in sel:
        if i in r.links:
            up = sum(1 for s in r.links[i].values() if s is not None)
            out.append(f"GPU {i}: NVLink {up}/{len(r.links[i])} links up, errors {r.link_errors.get(i, {})}")
    out += [f"{x.bus_id}: {x.line()}: {x.text}" for x in r.xids]
    out += [f"GPU {i}: {v.verdict}" + (f": {'; '.join(v.reasons)}" if v.reasons else "")
            + (f" ({'; '.join(v.notes)})" if v.notes else "") for i, v in verdicts.items()]
    out += r.notes
    output = "\n".join(out) + "\n"
    bad = {i: v for i, v in verdicts.items() if v.verdict == "fail"}
    warn = {i: v for i, v in verdicts.items() if v.verdict == "warn"}
    warnings = [f"GPU {i}: {reason}" for i, v in warn.items() for reason in v.reasons]
    n = len(sel)
    if bad or (fail_on_warn and warn):
        worst = bad or warn
        why = "; ".join(f"GPU {i}: {', '.join(v.reasons)}" for i, v in worst.items())
        return HealthReport(True, f"GPU health {'fail' if bad else 'warn'} on {host}: {why}",
                            data, warnings if bad else [], output)
    verdict = "warn" if warn else "ok"
    return HealthReport(False, f"{n} GPU{'s' if n != 1 else ''} {verdict} on {host}"
                        + (f" ({len(warnings)} warning{'s' if len(warnings) != 1 else ''})" if warnings else ""),
                        data, warnings, output)
