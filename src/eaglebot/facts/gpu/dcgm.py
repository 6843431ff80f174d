"""`dcgmi diag -r N -j`: DCGM's diagnostic result as JSON, read from its documented format (NVIDIA/DCGM
testing/python3/dcgm_diag_schema.json; tests/fixtures/dcgm/README.md says what each fixture shows).

The verdict is never `ok` on something unread: no JSON, an unknown shape, a runtime error, zero
results, or a non-zero exit without a failed test is `warn` ("could not read dcgmi's result: ...").
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

STATUS = {"pass": "pass", "fail": "fail", "warn": "warn", "skip": "skip", "not run": "skip"}


@dataclass
class DiagResult:
    status: str                       # ok | warn | fail
    why: str
    tests: dict[str, str] = field(default_factory=dict)      # test -> worst status over its entities
    findings: list[str] = field(default_factory=list)        # "pcie GPU 1: Fail: <warning>"

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "why": self.why, "tests": self.tests, "findings": self.findings}


def _unreadable(why: str) -> DiagResult:
    return DiagResult("warn", f"could not read dcgmi's result: {why}")


_RANK = {"skip": 0, "pass": 1, "warn": 2, "fail": 3}


def parse_diag_json(text: str, exit_status: int, level: int) -> DiagResult:
    start = text.find("{")
    try:
        doc = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as e:
        return _unreadable(f"not JSON ({e.msg} at char {e.pos}); exit status {exit_status}")
    diag = doc.get("DCGM Diagnostic") if isinstance(doc, dict) else None
    if not isinstance(diag, dict):
        return _unreadable(f"no \"DCGM Diagnostic\" object; exit status {exit_status}")
    if isinstance(diag.get("runtime_error"), str):
        return _unreadable(f"{diag['runtime_error']} (exit status {exit_status})")
    tests: dict[str, str] = {}
    findings: list[str] = []
    for cat in diag.get("test_categories") or []:
        for test in (cat.get("tests") or []) if isinstance(cat, dict) else []:
            if not isinstance(test, dict) or not isinstance(test.get("name"), str):
                return _unreadable(f"a test without a name in category {cat.get('category')!r}")
            for r in test.get("results") or []:
                status = STATUS.get(str(r.get("status", "")).strip().lower()) if isinstance(r, dict) else None
                if status is None:
                    return _unreadable(f"test {test['name']}: unknown result {r!r:.120}")
                name = test["name"]
                if _RANK[status] >= _RANK.get(tests.get(name, "skip"), 0):
                    tests[name] = status
                if status in ("fail", "warn"):
                    words = "; ".join(str(w.get("warning", "")).strip() for w in r.get("warnings") or []
                                      if isinstance(w, dict)) or "no message"
                    findings.append(f"{name} {r.get('entity_group', 'GPU')} {r.get('entity_id')}: "
                                    f"{r.get('status')}: {words}")
    if not tests:
        return _unreadable(f"zero test results (exit status {exit_status})")
    failed = [k for k, v in tests.items() if v == "fail"]
    if failed:
        return DiagResult("fail", "dcgmi diag failed: " + "; ".join(f for f in findings if ": Fail" in f),
                          tests, findings)
    if exit_status != 0:
        return DiagResult("warn", f"could not read dcgmi's result: exit status {exit_status} with no failed "
                                  f"test", tests, findings)
    warned = [f for f in findings if ": Warn" in f]
    if warned:
        return DiagResult("warn", "dcgmi diag warned: " + "; ".join(warned), tests, findings)
    ran = sum(1 for v in tests.values() if v != "skip")
    if not ran:
        return _unreadable("every test was skipped")
    return DiagResult("ok", f"dcgmi diag -r {level} passed ({ran} tests)", tests, findings)
