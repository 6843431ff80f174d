"""The result keywords are declared once (eaglebot.errors.ResultKeywords): StepResult's fields,
the keywords of its constructors and of StepFailed, and RESULT_FIELDS are the same names, and
what a raised StepFailed carries reaches the recorded result."""
from __future__ import annotations

from dataclasses import fields

from eaglebot.engine.attempts import failed_result
from eaglebot.errors import ResultKeywords, StepFailed
from eaglebot.sdk import RESULT_FIELDS, Metric, StepResult


def test_the_result_fields_are_the_declared_keywords():
    assert RESULT_FIELDS == tuple(ResultKeywords.__annotations__)
    assert [f.name for f in fields(StepResult)] == ["status", "summary", *RESULT_FIELDS]


def test_every_keyword_of_a_raised_failure_reaches_the_recorded_result():
    e = StepFailed("boom", metrics=[Metric("x", 1.0)], data={"k": 1}, warnings=["w"], output="tail", usage=True,
                   final="no server is running")
    res = failed_result(e)
    assert (res.status, res.summary, res.data, res.warnings, res.output, res.usage, res.final) == (
        "failed", "boom", {"k": 1}, ["w"], "tail", True, "no server is running")
    assert [m.name for m in res.metrics] == ["x"]


def test_an_unknown_keyword_fails_the_step_naming_it_and_the_nearest():
    res = StepResult.ok("done", warnigs=["w"])   # type: ignore[call-arg]  (what mypy strict catches)
    assert res.status == "failed" and "unknown keyword 'warnigs' (did you mean 'warnings'?)" in res.summary
