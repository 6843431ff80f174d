"""Pure parts of fleet runs: batches and the failure budget (Ansible's serial and
max_fail_percentage), and the per-host recap from step rows."""
from __future__ import annotations

import pytest

from eaglebot.engine.rolling import batches, budget, check_amount
from eaglebot.errors import UsageError
from eaglebot.history.recap import failed_hosts, host_recap

HOSTS = [f"h{i}" for i in range(1, 11)]


def test_batches_keep_the_order_and_a_percentage_rounds_down_to_at_least_one_host():
    assert batches(HOSTS, "3") == [HOSTS[0:3], HOSTS[3:6], HOSTS[6:9], HOSTS[9:]]
    assert batches(HOSTS, "25%") == [HOSTS[0:2], HOSTS[2:4], HOSTS[4:6], HOSTS[6:8], HOSTS[8:]]
    assert batches(HOSTS[:3], "10%") == [["h1"], ["h2"], ["h3"]]
    assert batches(HOSTS, None) == [HOSTS] and batches([], "2") == []


def test_the_failure_budget_is_hosts_that_may_fail():
    assert budget(None, 10) == float("inf")
    assert (budget("0", 10), budget("2", 10), budget("25%", 10), budget("10%", 8)) == (0, 2, 2, 0)


@pytest.mark.parametrize("value,what,message", [
    ("0", "--batch", "--batch must be at least 1"),
    ("150%", "--max-fail", "--max-fail 150% is over 100%"),
    ("two", "--batch", "--batch is a number of hosts or a percentage (2, 25%), got 'two'"),
    (True, "batch", "batch is a number of hosts or a percentage"),
])
def test_amounts_that_are_not_a_count_or_a_percentage_are_usage_errors(value, what, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_amount(value, what, zero_ok=what == "--max-fail")
    assert check_amount(" 25 % ".replace(" %", "%"), "--batch", zero_ok=False) == "25%"


def _row(host, name, status, summary="", start="2026-01-01T00:00:00+00:00", end="2026-01-01T00:00:02+00:00"):
    return {"host": host, "name": name, "status": status, "summary": summary, "started_at": start,
            "finished_at": end}


def test_the_recap_of_each_host_from_its_step_rows():
    steps = [_row("a", "s1", "ok"), _row("a", "s2", "changed"),
             _row("b", "s1", "changed"), _row("b", "s2", "failed", "exit status 3: broken\nmore"),
             _row("b", "note", "ok"),
             _row("c", "s1", "unreachable", "host c is unreachable at x:22 after 4 tries: refused"),
             _row("c", "s2", "skipped", "not run: the host is unreachable"),
             _row("d", "s1", "failed", "flaky", end="2026-01-01T00:00:05+00:00"), _row("d", "s2", "ok"),
             _row("e", "s1", "skipped"), _row("e", "s2", "skipped")]
    warnings = [{"host": "d", "message": "s1 failed (continue_on_error): flaky"}]
    recap = {r["name"]: r for r in host_recap(["a", "b", "c", "d", "e", "f"], steps, warnings)}
    assert {h: r["status"] for h, r in recap.items()} == {
        "a": "changed", "b": "failed", "c": "unreachable", "d": "ok", "e": "skipped", "f": "untouched"}
    assert recap["b"] == {"name": "b", "status": "failed", "ok": 1, "changed": 1, "failed": 1, "unreachable": 0,
                          "skipped": 0, "duration_s": 2.0, "failure": "s2: exit status 3: broken"}
    assert recap["d"]["failure"] == "s1: flaky" and recap["d"]["duration_s"] == 5.0
    assert recap["f"]["duration_s"] is None and recap["f"]["failure"] is None
    assert failed_hosts(list(recap.values())) == ["b", "c"]
    assert host_recap(["f"], [], running=True)[0]["status"] == "running"
