"""History's decisions from plain rows, no store: what a metric's verdict is and what happens
to its incident (open, flag, close), and what an ack or a new baseline closes."""
from __future__ import annotations

import pytest

from eaglebot.config import RegressionConfig
from eaglebot.errors import UsageError
from eaglebot.history.incidents import (Closing, IncidentDecision, NewIncident, baseline_closes, baseline_text,
                                        check_baseline, decide_ack)
from eaglebot.history.regress import (Drift, Subject, Window, decide, judge_window, needs_attribution,
                                      wants_attribution, window_since, window_what, worse_shift_point)
from eaglebot.sdk import Metric, Regression

CFG = RegressionConfig()                      # window 10, min_history 5, min_pct 5, k_sigma 3, confirm_runs 2
ONE = RegressionConfig(confirm_runs=1)        # a single run beyond the thresholds is flagged
STABLE = [100.0, 101.0, 99.2, 100.4, 99.6, 100.8]
ATTR = "changed since last good run #6: launch --speculative-num-steps 3 → 5"


def incident(**over: object) -> dict:
    row = {"id": 3, "playbook": "nightly", "host": "gpu-01", "metric": "output_throughput", "status": "open",
           "opened_run": 41, "ref_before_run": 41, "reference": 100.0, "unit": "tok/s", "better": "higher",
           "opened_at": None, "last_run": 41, "closed_run": None, "closed_at": None, "closed_kind": None,
           "closed_by": None, "reason": None}
    row.update(over)
    return row


def run_row(**over: object) -> dict:
    row = {"id": 50, "playbook": "nightly", "status": "succeeded", "hosts": ["gpu-01"], "inputs": {},
           "dry_run": 0, "cancel_requested": 0}
    row.update(over)
    return row


def verdict(value: float, win: Window, *, better: str = "higher", shift: Drift | None = None, run_id: int = 50,
            cfg: RegressionConfig = CFG):
    s = Subject("nightly", "gpu-01", run_id, Metric("output_throughput", value, "tok/s", better))
    j = judge_window(s, win, cfg)
    return j, decide(s, j, win, shift, ATTR if needs_attribution(j, win) else "", cfg)


def test_a_drop_without_an_open_incident_opens_one_and_says_what_changed():
    win = Window(STABLE, window_what(len(STABLE), None, None, None))
    j, v = verdict(60.0, win, cfg=ONE)
    assert j.verdict == "regression" and needs_attribution(j, win)
    assert v.incident == IncidentDecision(open=NewIncident("nightly", "gpu-01", "output_throughput", 50, 50,
                                                           j.reference, "tok/s", "higher"))
    assert v.finding is not None and v.finding.kind == "regression" and v.note is None
    assert v.finding.reason == f"{j.reason}; {ATTR}"
    assert "of the last 6 successful runs" in v.finding.reason


def test_too_little_history_is_a_note_and_decides_nothing():
    j, v = verdict(20.0, Window(STABLE[:3], window_what(3, None, None, None)))
    assert j.verdict == "insufficient"
    assert v.finding is None and v.incident == IncidentDecision()
    assert v.note == f"gpu-01: {j.reason} (output_throughput)"
    assert "insufficient history: 3 prior runs (need 5)" in v.note


def test_an_improvement_is_reported_and_opens_nothing():
    j, v = verdict(140.0, Window(STABLE, "the last 6 successful runs"))
    assert j.verdict == "improvement" and not needs_attribution(j, Window(STABLE, ""))
    assert v.finding is not None and v.finding.kind == "improvement"
    assert v.incident == IncidentDecision() and v.note is None


def test_lower_is_better_flags_a_rise():
    j, v = verdict(90.0, Window([40.0, 41.0, 39.0, 40.5, 39.5, 40.2], ""), better="lower", cfg=ONE)
    assert j.verdict == "regression" and v.incident.open is not None


def test_one_bad_night_alone_is_a_suspect_note_and_opens_nothing():
    j, v = verdict(60.0, Window(STABLE, "the last 6 successful runs", recent=((49, 100.3),),
                                before_recent=tuple(STABLE)))
    assert j.verdict == "regression"
    assert v.finding is None and v.incident == IncidentDecision()
    assert v.note is not None and v.note.startswith("gpu-01: suspect: output_throughput 60 tok/s is 40.1% below")
    assert "flagged as a regression if the next run confirms it (output_throughput)" in v.note


def test_a_second_bad_night_confirms_the_drop_and_the_incident_starts_at_the_first():
    win = Window([*STABLE, 61.0], "the last 7 successful runs", recent=((49, 61.0),), before_recent=tuple(STABLE))
    j, v = verdict(60.0, win)
    assert v.finding is not None and v.finding.kind == "regression"
    assert f"{j.reason}; confirmed: beyond the thresholds since run #49" in v.finding.reason
    assert v.incident.open == NewIncident("nightly", "gpu-01", "output_throughput", 49, 49, j.reference, "tok/s",
                                          "higher", more_runs=(50,))


def test_an_outlier_then_a_normal_night_confirms_nothing():
    # run #49 was the outlier; #50 is normal, #51 bad again: not two in a row
    win = Window([*STABLE, 61.0, 100.1], "", recent=((50, 100.1),), before_recent=(*STABLE, 61.0))
    _, v = verdict(60.5, win, run_id=51)
    assert v.finding is None and v.incident == IncidentDecision() and v.note is not None


def test_a_value_inside_the_range_the_metric_has_shown_is_no_drop_and_says_why():
    bimodal = [93.0, 92.8, 93.2, 92.9, 100.0, 100.5, 99.8, 100.2, 100.4, 93.4, 100.1, 99.9, 100.3]
    j, v = verdict(93.3, Window(bimodal[-10:], "", longer=tuple(bimodal)), cfg=ONE)
    assert j.verdict == "ok" and j.masked
    assert "inside the range of the last 13 runs: 4 were as far (more than 3 is a second mode" in j.reason
    assert v.finding is None and v.warning == f"not flagged: {j.reason}" and v.note == f"gpu-01: {v.warning} " \
        "(output_throughput)"
    j, _ = verdict(85.0, Window(bimodal[-10:], "", longer=tuple(bimodal)), cfg=ONE)
    assert j.verdict == "regression"


@pytest.mark.parametrize("lows", [[90.0], [90.0, 90.4], [90.0, 90.4, 91.0]])
def test_a_few_low_runs_do_not_hide_a_lasting_drop(lows):
    """Issue 42: a redone reference, a cold first night: 1-3 runs as low as the drop are no
    second mode of the noise; the second low run is flagged (confirm_runs 2)."""
    high = [141.0, 140.2, 141.8, 140.6, 141.3, 140.9, 141.5, 140.4]
    win = Window(high, "", recent=((60, 119.0),), before_recent=(*lows, *high), longer=(*lows, *high, 119.0))
    j, v = verdict(119.3, win, run_id=61)
    assert j.verdict == "regression" and not j.masked and v.finding is not None
    assert v.incident.open is not None and v.incident.open.run_id == 60


def test_the_range_rule_counts_only_the_current_regime():
    """Runs before the last change point (an older, lower level) are not the range now."""
    old = [118.0, 118.5, 118.2, 118.8, 117.9]
    high = [141.0, 140.2, 141.8, 140.6, 141.3, 140.9, 141.5, 140.4]
    win = Window(high, "", recent=((60, 119.0),), before_recent=(*old, *high), regime_start=len(old))
    j, _ = verdict(119.3, win, run_id=61)
    assert j.verdict == "regression"
    win = Window(high, "", recent=((60, 119.0),), before_recent=(*old, *high), longer=(*old, *high, 119.0))
    _, v = verdict(119.3, win, run_id=61)
    assert v.finding is None and v.warning is not None and "inside the range of the last 14 runs: 6 were as far" \
        in v.warning


def test_a_run_still_below_the_reference_is_flagged_under_the_open_incident():
    inc = incident()
    win = Window(STABLE, window_what(len(STABLE), None, None, inc), inc)
    j, v = verdict(85.0, win)
    assert not needs_attribution(j, win)
    assert v.incident == IncidentDecision(flag=3)
    assert v.finding is not None and v.finding.kind == "regression"
    assert v.finding.reason.startswith("still 15.2% below the reference since run #41 (open incident #3; "
                                       "it closes within 2.5% of the reference): ")
    assert "the 6 runs before the drop (run #41)" in v.finding.reason


def test_a_run_back_within_half_min_pct_closes_the_incident_as_recovered():
    j, v = verdict(98.0, Window(STABLE, "", incident()))
    assert v.incident.open is None and v.incident.flag is None
    assert v.incident.close == Closing(3, "recovered", "eaglebot",
                                       "output_throughput 98 is back within 2.5% of the reference 100.2 at run #50",
                                       50)
    assert v.note == "gpu-01: output_throughput recovered at run #50: incident #3 (open since run #41) closed"
    assert v.finding is None


def test_hysteresis_a_run_between_half_and_full_min_pct_below_stays_flagged():
    _, v = verdict(96.5, Window(STABLE, "", incident()))     # 3.7% below: not recovered, not a new drop
    assert v.incident == IncidentDecision(flag=3)


def test_an_open_incident_with_too_little_history_stays_open():
    _, v = verdict(60.0, Window(STABLE[:2], "", incident()))
    assert v.incident == IncidentDecision() and v.finding is None
    assert v.note is not None and v.note.endswith("(output_throughput); incident #3 stays open")


def test_a_slow_drift_opens_an_incident_from_where_the_shift_began():
    level = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.6, 99.4, 100.1]
    lower = [90.0, 89.5, 90.5, 89.8, 90.2, 90.1, 89.9]
    series = list(enumerate(level + lower, start=1))       # (run id, value), oldest first
    p = worse_shift_point(series, 18, 90.0, "higher", CFG)
    assert p is not None and p.cp_run == 11 and p.prev_run == 10
    shift = Drift(p, "change point: output_throughput moved -10.0% ...")
    recent = Window(lower[-6:], "the last 6 successful runs")   # the per-run check sees nothing
    j, v = verdict(90.0, recent, shift=shift, run_id=18)
    assert j.verdict == "ok"
    assert v.incident.open is not None and v.incident.open.ref_before_run == 11
    assert v.incident.open.reference == p.shift.before_mean
    assert v.finding is not None and v.finding.reason == shift.text and v.finding.delta_pct < -5


def test_no_worse_shift_once_the_newest_run_is_back_on_the_old_level():
    level = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.6, 99.4, 100.1]
    drop = [85.0, 84.5, 85.5, 84.8, 85.2, 85.1, 84.9]
    series = list(enumerate(level + drop + [100.2], start=1))   # one night back: too few to split off
    assert worse_shift_point(series, 19, 99.9, "higher", CFG) is None
    assert worse_shift_point(series[:-1], 18, 85.0, "higher", CFG) is not None


def test_no_worse_shift_for_a_rise_or_too_few_runs():
    up = list(enumerate([90.0] * 8 + [100.0] * 8, start=1))
    assert worse_shift_point(up, 17, 100.0, "higher", CFG) is None
    assert worse_shift_point(up[:5], 6, 50.0, "higher", CFG) is None


def test_the_window_names_its_runs():
    assert window_since(12, 20) == 12 and window_since(20, 20) is None and window_since(None, 20) is None
    assert window_what(4, 12, 12, None) == "the 4 runs since baseline #12"
    assert window_what(4, 12, 9, None) == "the 4 runs since acknowledged run #12"
    assert window_what(4, None, None, None) == "the last 4 successful runs"


def test_fixed_baseline_regressions_want_attribution_once():
    assert wants_attribution(Regression("m", 1.0, 2.0, -50.0, "below the fixed baseline"))
    assert not wants_attribution(Regression("m", 1.0, 2.0, -50.0, "x; changed since last good run #3: y"))
    assert not wants_attribution(Regression("m", 3.0, 2.0, 50.0, "above", kind="improvement"))


def test_an_ack_closes_the_incident_that_flagged_the_run_first():
    flagged = [incident(id=3), incident(id=4, metric="accept_length")]
    on_hosts = [incident(id=7)]
    a = decide_ack(50, run_row(), "output_throughput", "  new   draft model ", "ana",
                   flagged=flagged, on_hosts=on_hosts, open_now=[])
    assert a.closes == [Closing(3, "ack", "ana", "new draft model", 50)]
    assert a.events == ["ana acknowledged incident #3 (output_throughput on gpu-01, open since run #41): "
                        "new draft model"]
    assert a.text == ("incident #3 (output_throughput on gpu-01, open since run #41) acknowledged by ana: "
                      "new draft model; runs from #41 on are the new reference")


def test_an_ack_of_an_unflagged_run_closes_its_hosts_open_incident():
    a = decide_ack(50, run_row(), "output_throughput", "ok", "ana", flagged=[], on_hosts=[incident(id=7)],
                   open_now=[])
    assert [c.incident_id for c in a.closes] == [7]


@pytest.mark.parametrize("reason, run, open_now, why", [
    ("   ", run_row(), [], "an ack needs a reason"),
    ("ok", None, [], "no run #50"),
    ("ok", run_row(), [incident(id=9, metric="ttft")], "no open incident of output_throughput for run #50 "
                                                       "(open: #9 ttft on gpu-01)"),
    ("ok", run_row(), [], "(open: none)"),
])
def test_an_ack_that_cannot_close_anything_says_why(reason, run, open_now, why):
    with pytest.raises(UsageError, match=__import__("re").escape(why)):
        decide_ack(50, run, "output_throughput", reason, "ana", flagged=[], on_hosts=[], open_now=open_now)


@pytest.mark.parametrize("run, why", [
    (None, "no run #50"),
    (run_row(status="failed"), "run #50 failed: only a succeeded run can be a baseline"),
    (run_row(dry_run=1), "was a dry run"),
    (run_row(hosts=[]), "has no hosts"),
])
def test_a_run_that_cannot_be_a_baseline_says_why(run, why):
    with pytest.raises(UsageError, match=why):
        check_baseline(50, run)


def test_a_baseline_closes_the_open_incidents_and_says_so():
    run = check_baseline(50, run_row())
    assert run["id"] == 50
    assert baseline_closes(50, "ana", [incident(id=3), incident(id=4)]) == [
        Closing(3, "baseline", "ana", "baseline set to run #50 by ana", 50),
        Closing(4, "baseline", "ana", "baseline set to run #50 by ana", 50)]
    assert baseline_text(50, "nightly", ["gpu-01"], 1) == (
        "run #50 is now the baseline of nightly on gpu-01 (1 metric); regression checks compare with it and "
        "the runs after it")
    assert "(no metrics (history checks start from it anyway))" in baseline_text(50, "nightly", ["a", "b"], 0)
