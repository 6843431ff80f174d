"""The audit store's contract as tests: what any backend of `StoreProtocol` must do.

Backend-agnostic: every test takes a `store` fixture (a fresh, empty store) and uses only
the protocol's methods, never SQL. A backend binds them by importing this module's tests
into a test module that defines `store` (tests/test_store_contract.py does it for SQLite):

    from support.store_contract import *  # noqa: F401,F403

    @pytest.fixture
    def store(tmp_path):
        s = PostgresStore(...); yield s; s.close()
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from eaglebot.errors import HostBusy
from eaglebot.sdk import FileChange, Metric, Regression
from eaglebot.store.protocol import StoreProtocol
from eaglebot.store.rows import (
    ApprovalRow, BaselineRow, ChangeRow, EventRow, HealthEventRow, HealthStateRow, IncidentRow, LeaseRow, LockRow, MetricPoint,
    MetricRow, RegressionRow, RemoteProcRow, ReplicaRow, RunRow, ScheduleFireRow, ScheduleStateRow, StaleApprovalRow, StepRow, SweepPointRow, SweepRow,
    WarningRow,
)
from eaglebot.store.rows import NewRun, StepEnd



EVERYTHING = timedelta(seconds=-1)  # a prune cutoff after every run's start (times have ms precision)


def keys(row_type: Any) -> set[str]:
    return set(row_type.__required_keys__) | set(row_type.__optional_keys__)


def new_run(store: StoreProtocol, playbook: str = "bench", hosts: tuple[str, ...] = ("gpu-01",), **kw: Any) -> int:
    return store.create_run(NewRun(playbook=playbook, hosts=list(hosts), inputs=kw.pop("inputs", {}),
                                   variables=kw.pop("variables", {}), actor=kw.pop("actor", "alice"),
                                   origin=kw.pop("origin", "cli"), **kw))


def finished_run(store: StoreProtocol, playbook: str = "bench", host: str = "gpu-01",
                 metrics: dict[str, float] | None = None, status: str = "succeeded", **kw: Any) -> int:
    rid = new_run(store, playbook, (host,), **kw)
    if metrics:
        sid = store.step_started(rid, 0, host, "bench", "bench.serving", {})
        store.step_finished(sid, StepEnd(run_id=rid, host=host, status="ok", summary="", duration_ms=1, attempts=1,
                            metrics=[Metric(k, v, "tok/s") for k, v in metrics.items()]))
    store.finish_run(rid, status, exit_code=0 if status == "succeeded" else 1)
    return rid


# -- runs -------------------------------------------------------------------------------------

def test_a_run_is_created_read_back_and_finished(store):
    rid = new_run(store, hosts=("gpu-01", "gpu-02"), inputs={"tp": 2}, variables={"v": 1}, channel="C1",
                  thread_ts="1.2", source="chat", schedule=None, dry_run=True)
    run = store.get_run(rid)
    assert set(run) == keys(RunRow)
    assert (run["id"], run["playbook"], run["status"], run["actor"], run["origin"]) == \
        (rid, "bench", "running", "alice", "cli")
    assert run["hosts"] == ["gpu-01", "gpu-02"] and run["inputs"] == {"tp": 2} and run["vars"] == {"v": 1}
    assert run["dry_run"] == 1 and run["cancel_requested"] == 0 and run["finished_at"] is None
    assert (run["channel"], run["thread_ts"], run["source"]) == ("C1", "1.2", "chat")
    assert [r["id"] for r in store.running_runs()] == [rid]
    store.save_vars(rid, {"gpu-01": {"port": 30000}})
    store.set_fingerprint(rid, {"gpu-01": {"driver": "550"}})
    store.set_run_thread(rid, "C2", "3.4")
    store.finish_run(rid, "failed", exit_code=1, error="boom")
    run = store.get_run(rid)
    assert (run["status"], run["exit_code"], run["error"]) == ("failed", 1, "boom")
    assert run["finished_at"] >= run["started_at"]
    assert run["vars"] == {"gpu-01": {"port": 30000}} and run["fingerprint"] == {"gpu-01": {"driver": "550"}}
    assert (run["channel"], run["thread_ts"]) == ("C2", "3.4")
    assert store.running_runs() == [] and store.last_run_id() == rid
    assert store.get_run(rid + 1000) is None


def test_history_filters_and_orders_newest_first(store):
    a = finished_run(store, "bench", "gpu-01")
    b = finished_run(store, "bench", "gpu-02", status="failed")
    c = finished_run(store, "other", "gpu-01", origin="slack")
    assert [r["id"] for r in store.history()] == [c, b, a]
    assert [r["id"] for r in store.history(limit=2)] == [c, b]
    assert [r["id"] for r in store.history(playbook="bench")] == [b, a]
    assert [r["id"] for r in store.history(host="gpu-01")] == [c, a]
    assert [r["id"] for r in store.history(status="failed")] == [b]
    assert [r["id"] for r in store.history(origin="slack")] == [c]
    assert [r["id"] for r in store.history(host="gpu-01", playbook="bench")] == [a]
    assert store.history(since="2999-01-01T00:00:00.000Z") == []
    assert set(store.history()[0]) == keys(RunRow)
    assert store.host_run_ids("gpu-01") == [a, c] and store.host_run_ids("gpu-01", after=a) == [c]
    assert store.host_run_ids("gpu-01", upto=a) == [a]


def test_cancel_is_requested_only_of_a_running_run(store):
    rid = new_run(store)
    assert not store.cancel_requested(rid)
    assert store.request_cancel(rid) and store.cancel_requested(rid)
    store.finish_run(rid, "cancelled", exit_code=130)
    done = finished_run(store)
    assert not store.request_cancel(done) and not store.cancel_requested(done)


# -- steps and what they leave ----------------------------------------------------------------

def test_a_step_records_output_data_metrics_changes_warnings_and_regressions(store):
    rid = new_run(store)
    sid = store.step_started(rid, 0, "gpu-01", "bench", "bench.serving", {"n": 1}, section="checks")
    (step,) = store.steps(rid)
    assert set(step) == keys(StepRow)
    assert (step["id"], step["status"], step["attempts"], step["section"]) == (sid, "running", 1, "checks")
    store.step_output(sid, "line 1\n")
    store.step_attempt(sid, 2)
    assert store.steps(rid)[0]["output"] == "line 1\n" and store.steps(rid)[0]["attempts"] == 2
    store.step_finished(
        sid, StepEnd(run_id=rid, host="gpu-01", status="changed", summary="done", duration_ms=42, attempts=2,
        data={"port": 30000}, metrics=[Metric("output_throughput", 900.0, "tok/s"), Metric("ttft_ms", 50, "ms", "lower")],
        changes=[FileChange("/etc/x", "a" * 64, "b" * 64, "-x\n+y\n", "/etc/x.bak")], warnings=["hot"],
        regressions=[Regression("output_throughput", 900.0, 1000.0, -10.0, "below the band")],
        output="head...tail", output_bytes=12345, output_sha256="c" * 64, output_file="/out/1/1.gz"))
    (step,) = store.steps(rid)
    assert (step["status"], step["summary"], step["duration_ms"], step["output"]) == \
        ("changed", "done", 42, "head...tail")
    assert (step["output_bytes"], step["output_sha256"], step["output_file"]) == (12345, "c" * 64, "/out/1/1.gz")
    assert step["finished_at"] is not None and '"port": 30000' in step["data"]
    metrics = store.metrics(rid)
    assert [set(m) == keys(MetricRow) for m in metrics] == [True, True]
    assert [(m["name"], m["value"], m["unit"], m["better"], m["step_id"]) for m in metrics] == \
        [("output_throughput", 900.0, "tok/s", "higher", sid), ("ttft_ms", 50.0, "ms", "lower", sid)]
    (change,) = store.changes(rid)
    assert set(change) == keys(ChangeRow) and change["diff"] == "-x\n+y\n" and change["backup_path"] == "/etc/x.bak"
    (warning,) = store.warnings(rid)
    assert set(warning) == keys(WarningRow) and (warning["message"], warning["step_id"]) == ("hot", sid)
    (reg,) = store.regressions(rid)
    assert set(reg) == keys(RegressionRow) and (reg["host"], reg["kind"], reg["delta_pct"]) == \
        ("gpu-01", "regression", -10.0)
    assert store.metric_value(rid, "ttft_ms") == 50.0 and store.metric_value(rid, "nope") is None
    assert store.metrics_for_runs([rid, rid + 99]) == {rid: metrics}
    assert store.regression_counts([rid]) == {rid: 1} and store.flagged_runs("gpu-01", "output_throughput", [rid]) == {rid}


def test_metric_classes_children_and_the_latest_results(store):
    """Issue 42: a metric's configuration class filters its history; a run another started is
    its child (counted, listed, left out of top-level history and of the latest results)."""
    rid = new_run(store)
    sid = store.step_started(rid, 0, "gpu-01", "bench", "bench.serving", {})
    store.step_finished(sid, StepEnd(run_id=rid, host="gpu-01", status="ok", summary="", duration_ms=1, attempts=1,
                                     metrics=[Metric("output_throughput", 90.0, "tok/s", config="spec=none")]))
    store.finish_run(rid, "succeeded", exit_code=0)
    eagle = finished_run(store, metrics={"output_throughput": 141.0})
    assert store.metrics(rid)[0]["config_class"] == "spec=none" and store.metrics(eagle)[0]["config_class"] is None
    hist = store.metric_history("bench", "gpu-01", "output_throughput", config="spec=none")
    assert [p["run_id"] for p in hist] == [eagle, rid] and hist[1]["config_class"] == "spec=none"
    assert [p["run_id"] for p in store.metric_history("bench", "gpu-01", "output_throughput", config="")] == [eagle]
    # a value whose class was not said (an older run) counts in every class's history
    assert [p["run_id"] for p in store.metric_history("bench", "gpu-01", "output_throughput",
                                                      config="spec=EAGLE3")] == [eagle]
    parent = finished_run(store, "tune")
    child = finished_run(store, "tune-measure", metrics={"output_throughput": 99.0}, parent_run_id=parent)
    assert store.get_run(child)["parent_run_id"] == parent and store.get_run(parent)["parent_run_id"] is None
    assert store.child_counts([parent, child, eagle]) == {parent: 1}
    assert [r["id"] for r in store.children(parent)] == [child]
    assert child not in [r["id"] for r in store.history(top_level=True)]
    assert [(m["playbook"], m["name"], m["value"], m["run_id"]) for m in store.latest_metrics(["output_throughput"])] \
        == [("bench", "output_throughput", 141.0, eagle)]


def test_a_step_finished_without_output_keeps_the_streamed_output(store):
    rid = new_run(store)
    sid = store.step_started(rid, 0, "gpu-01", "s", "shell", {})
    store.step_output(sid, "streamed")
    store.step_finished(sid, StepEnd(run_id=rid, host="gpu-01", status="ok", summary="", duration_ms=1, attempts=1))
    (step,) = store.steps(rid)
    assert step["output"] == "streamed" and step["output_file"] is None and step["output_bytes"] is None


def test_open_steps_of_a_finished_run_are_closed_as_failed(store):
    rid = new_run(store)
    done = store.step_started(rid, 0, "gpu-01", "a", "shell", {})
    store.step_finished(done, StepEnd(run_id=rid, host="gpu-01", status="ok", summary="fine", duration_ms=1, attempts=1))
    store.step_started(rid, 1, "gpu-01", "b", "shell", {})
    assert store.close_open_steps(rid, "the run ended") == 1
    assert [(s["status"], s["summary"]) for s in store.steps(rid)] == [("ok", "fine"), ("failed", "the run ended")]


def test_warnings_regressions_and_backups_written_outside_a_step(store):
    rid = new_run(store)
    store.add_warning(rid, "gpu-01", "disk 95% full")
    store.add_regression(rid, Regression("ttft_ms", 80, 50, 60.0, "slower", kind="improvement", host="gpu-02"))
    assert [(w["message"], w["step_id"]) for w in store.warnings(rid)] == [("disk 95% full", None)]
    (reg,) = store.regressions(rid)
    assert (reg["host"], reg["kind"]) == ("gpu-02", "improvement") and store.regression_counts([rid]) == {}
    store.update_regression_reason(rid, "gpu-02", "ttft_ms", "slower", "slower: driver changed")
    assert store.regressions(rid)[0]["reason"] == "slower: driver changed"
    other = new_run(store)
    for r in (rid, other):
        sid = store.step_started(r, 0, "gpu-01", "patch", "config.patch", {})
        store.step_finished(sid, StepEnd(run_id=r, host="gpu-01", status="changed", summary="", duration_ms=1, attempts=1,
                            changes=[FileChange("/etc/x", None, "b", "", f"/bak/{r}")]))
    assert store.last_backup("gpu-01", "/etc/x")["backup_path"] == f"/bak/{other}"
    assert store.last_backup("gpu-01", "/etc/x", rid)["backup_path"] == f"/bak/{rid}"
    assert store.last_backup("gpu-01", "/etc/y") is None
    assert [c["run_id"] for c in store.host_changes("gpu-01", 0, other)] == [rid, other]
    assert [c["run_id"] for c in store.host_changes("gpu-01", rid, other)] == [other]


# -- metrics and history across runs ----------------------------------------------------------

def test_metric_history_keeps_successful_runs_of_the_playbook_on_the_host_newest_first(store):
    a = finished_run(store, metrics={"tput": 100})
    b = finished_run(store, metrics={"tput": 110})
    finished_run(store, metrics={"tput": 1}, status="failed")
    finished_run(store, "other", metrics={"tput": 2})
    finished_run(store, host="gpu-02", metrics={"tput": 3})
    c = finished_run(store, metrics={"tput": 120})
    pts = store.metric_history("bench", "gpu-01", "tput")
    assert [set(p) == keys(MetricPoint) for p in pts] == [True] * 3
    assert [(p["run_id"], p["value"]) for p in pts] == [(c, 120), (b, 110), (a, 100)]
    assert [p["run_id"] for p in store.metric_history("bench", "gpu-01", "tput", before_run=c)] == [b, a]
    assert [p["run_id"] for p in store.metric_history("bench", "gpu-01", "tput", since_run=b)] == [c, b]
    assert [p["run_id"] for p in store.metric_history("bench", "gpu-01", "tput", limit=1)] == [c]
    assert store.previous_good_run("bench", "gpu-01", c)["id"] == b


def test_step_data_history_is_oldest_first_by_skill_host_and_mention(store):
    rid = new_run(store)
    for skill, host, status, data in [
            ("draft.check", "gpu-01", "ok", {"draft_config": "/m/d/config.json", "disk_points": [2, 30, 58]}),
            ("config.patch", "gpu-01", "changed", {"path": "/m/d/config.json", "values": {}}),
            ("draft.check", "gpu-02", "ok", {"draft_config": "/m/d/config.json"}),
            ("draft.check", "gpu-01", "failed", {"draft_config": "/other/config.json"}),
            ("server.launch", "gpu-01", "changed", {"note": "/m/d/config.json"})]:
        sid = store.step_started(rid, 0, host, skill, skill, {})
        store.step_finished(sid, StepEnd(run_id=rid, host=host, status=status, summary="", duration_ms=1, attempts=1,
                            data=data))
    got = store.step_data_history("gpu-01", ["draft.check", "config.patch"], "/m/d/config.json")
    assert [(r["run_id"], r["skill"], r["status"]) for r in got] == [(rid, "draft.check", "ok"),
                                                                    (rid, "config.patch", "changed")]
    assert "disk_points" in got[0]["data"]
    assert store.step_data_history("gpu-01", [], "/m/d/config.json") == []
    assert store.step_data_history("gpu-01", ["draft.check"], "/m/d/config.json", limit=1)[0]["skill"] == "draft.check"
    newest = store.step_data_history("gpu-01", ["draft.check", "config.patch"], "/m/d/config.json", newest_first=True)
    assert [r["skill"] for r in newest] == ["config.patch", "draft.check"]


def test_host_steps_data_and_fingerprints(store):
    rid = new_run(store)
    sid = store.step_started(rid, 0, "gpu-01", "launch", "server.launch", {"port": 1})
    store.step_finished(sid, StepEnd(run_id=rid, host="gpu-01", status="changed", summary="", duration_ms=1, attempts=1,
                        data={"server_args": ["--tp", "2"]}))
    store.finish_run(rid, "succeeded", exit_code=0, fingerprint={"gpu-01": {"driver": "550"}, "gpu-02": "x"})
    (hs,) = store.host_steps("gpu-01", 0, rid)
    assert (hs["run_id"], hs["skill"], hs["status"]) == (rid, "server.launch", "changed") and "--tp" in hs["data"]
    assert store.last_step_data("gpu-01", "server.launch", "server_args") == {"server_args": ["--tp", "2"]}
    assert store.last_step_data("gpu-01", "server.launch", "nothing") is None
    assert store.last_fingerprinted_run("gpu-01", rid) == {"run_id": rid, "state": {"driver": "550"}}
    assert store.last_fingerprinted_run("gpu-02", rid) is None


# -- incidents and baselines ------------------------------------------------------------------

def test_baselines_and_incidents_decide_the_reference_start(store):
    base = finished_run(store, metrics={"tput": 100})
    assert store.baseline("bench", "gpu-01") is None and store.reference_start("bench", "gpu-01", "tput") is None
    assert store.set_baseline(base, "alice") == {"playbook": "bench", "hosts": ["gpu-01"], "run_id": base}
    row = store.baseline("bench", "gpu-01")
    assert set(row) == keys(BaselineRow) and (row["run_id"], row["set_by"]) == (base, "alice")
    with pytest.raises(KeyError):
        store.set_baseline(base + 100, "alice")
    bad = finished_run(store, metrics={"tput": 50})
    iid = store.open_incident(playbook="bench", host="gpu-01", metric="tput", run_id=bad, ref_before_run=bad,
                              reference=100.0, unit="tok/s", better="higher")
    inc = store.open_incident_for("bench", "gpu-01", "tput")
    assert set(inc) == keys(IncidentRow)
    assert (inc["id"], inc["status"], inc["opened_run"], inc["last_run"]) == (iid, "open", bad, bad)
    again = finished_run(store, metrics={"tput": 51})
    store.incident_flagged(iid, again)
    assert store.open_incident_for("bench", "gpu-01", "tput")["last_run"] == again
    assert [i["id"] for i in store.incidents(run_id=again)] == [iid]
    assert [i["id"] for i in store.incidents(playbook="bench", host="gpu-01")] == [iid]
    assert store.incidents(host="gpu-02") == []
    # flagged runs stay out of a reference window while the incident is open
    window = store.metric_history("bench", "gpu-01", "tput", exclude_incident_runs=True)
    assert [p["run_id"] for p in window] == [base]
    assert store.close_incident(iid, "ack", "bob", "new normal", run_id=again)
    assert not store.close_incident(iid, "ack", "bob", "twice")
    assert store.open_incident_for("bench", "gpu-01", "tput") is None
    (closed,) = store.incidents(status="closed")
    assert (closed["closed_kind"], closed["closed_by"], closed["closed_run"]) == ("ack", "bob", again)
    assert store.reference_start("bench", "gpu-01", "tput") == bad  # the accepted incident is later than the baseline
    assert [p["run_id"] for p in store.metric_history("bench", "gpu-01", "tput", exclude_incident_runs=True)] == \
        [again, bad, base]


def test_metrics_of_one_cause_are_one_incident_found_by_id(store):
    bad = finished_run(store, metrics={"tput": 50, "ttft": 90})
    head = store.open_incident(playbook="bench", host="gpu-01", metric="tput", run_id=bad, ref_before_run=bad,
                               reference=100.0, unit="tok/s", better="higher")
    other = store.open_incident(playbook="bench", host="gpu-01", metric="ttft", run_id=bad, ref_before_run=bad,
                                reference=40.0, unit="ms", better="lower", cause_id=head)
    assert store.incident(head)["cause_id"] is None and store.incident(other)["cause_id"] == head
    assert store.incident(other + 100) is None
    assert [i["id"] for i in store.incident_cause(head)] == [head, other]
    assert set(store.incident_cause(head)[1]) == keys(IncidentRow)
    assert store.incident_cause(other) == [store.incident(other)]   # a joined row is no cause of its own
    store.close_incident(other, "ack", "bob", "fine")
    assert [i["status"] for i in store.incident_cause(head)] == ["open", "closed"]


# -- approvals and events ---------------------------------------------------------------------

def test_an_approval_is_decided_once_and_carries_its_message(store):
    rid = new_run(store)
    aid = store.approval_requested(rid, 2, "gpu-01", "restart", "systemctl restart x", ["why 1"])
    row = store.get_approval(aid)
    assert set(row) == keys(ApprovalRow) and (row["status"], row["step_idx"], row["requester"]) == ("pending", 2, None)
    assert store.pending_approval(rid, 2, "gpu-01")["id"] == aid and store.pending_approval(rid, 3, "gpu-01") is None
    store.set_approval_message(aid, "C1", "9.9", requester="alice")
    store.set_approval_message(aid, None, None)  # values not given are kept
    row = store.get_approval(aid)
    assert (row["channel"], row["message_ts"], row["requester"]) == ("C1", "9.9", "alice")
    assert store.stale_approvals() == []  # its run is still running
    assert store.approval_decided(aid, "approved", "bob")
    assert not store.approval_decided(aid, "rejected", "carol")
    row = store.get_approval(aid)
    assert (row["status"], row["decided_by"]) == ("approved", "bob") and row["decided_at"] is not None
    assert store.pending_approval(rid, 2, "gpu-01") is None and store.get_approval(aid + 10) is None


def test_a_pending_approval_of_a_finished_run_is_stale(store):
    rid = new_run(store, channel="C1", thread_ts="1.1")
    aid = store.approval_requested(rid, 0, "gpu-01", "s", "a", [])
    store.finish_run(rid, "interrupted", exit_code=1)
    (row,) = store.stale_approvals()
    assert set(row) == keys(StaleApprovalRow)
    assert (row["id"], row["run_status"], row["run_channel"], row["run_thread_ts"], row["playbook"]) == \
        (aid, "interrupted", "C1", "1.1", "bench")


def test_events_and_rejections_newest_first(store):
    rid = new_run(store)
    store.add_event(rid, "note", "first")
    store.add_event(None, "startup", "bot up")
    store.add_rejection("rejected", "mallory", "eagle run dsik", "unknown playbook")
    events = store.events()
    assert [set(e) == keys(EventRow) for e in events] == [True] * 3
    assert [(e["kind"], e["run_id"]) for e in events] == [("rejected", None), ("startup", None), ("note", rid)]
    (rej,) = store.events("rejected")
    assert (rej["actor"], rej["text"], rej["reason"]) == ("mallory", "eagle run dsik", "unknown playbook")
    assert rej["message"] == "mallory: eagle run dsik: unknown playbook"
    assert [e["message"] for e in store.events(limit=1)] == [rej["message"]]


# -- host locks and remote processes ----------------------------------------------------------

def test_a_held_host_refuses_another_run_and_is_free_after_release(store):
    run = {"playbook": "bench", "hosts": ["gpu-01"], "inputs": {}, "variables": {}, "actor": "a", "origin": "cli"}
    rid = store.start_run(["gpu-01"], run)
    (lock,) = store.locks()
    assert set(lock) == keys(LockRow) and (lock["host"], lock["run_id"], lock["reason"]) == ("gpu-01", rid, None)
    with pytest.raises(HostBusy, match=f"run #{rid}"):
        store.start_run(["gpu-02", "gpu-01"], run)
    assert [r["id"] for r in store.history()] == [rid]  # a refused start leaves no run row
    other = new_run(store, hosts=("gpu-02", "gpu-01"))
    with pytest.raises(HostBusy):
        store.acquire_hosts(other, ["gpu-02", "gpu-01"])
    assert [lk["host"] for lk in store.locks()] == ["gpu-01"]  # all or none
    store.release_hosts(rid)
    assert store.locks() == []
    store.acquire_hosts(other, ["gpu-02", "gpu-01"])
    assert [(lk["host"], lk["run_id"]) for lk in store.locks()] == [("gpu-01", other), ("gpu-02", other)]


def test_pending_remote_processes_keep_the_lock_until_cleaned(store):
    rid = new_run(store)
    store.acquire_hosts(rid, ["gpu-01"])
    sid = store.step_started(rid, 0, "gpu-01", "s", "shell", {})
    tag = store.proc_tag(rid, sid)
    assert tag == f"{store.db_id}-{rid}-{sid}"
    pid = store.procs_record(rid, sid, "gpu-01", tag=tag, state="pending", note="host unreachable", pgids=[42])
    store.procs_record(rid, sid, "gpu-02", tag=tag, state="stopped", note="killed")
    (proc,) = store.pending_procs("gpu-01")
    assert set(proc) == keys(RemoteProcRow) and (proc["id"], proc["tag"], proc["cleaned_at"]) == (pid, tag, None)
    assert [p["state"] for p in store.step_procs(sid)] == ["pending", "stopped"]
    store.release_hosts(rid)
    (lock,) = store.locks()
    assert lock["pid"] is None and "host unreachable" in lock["reason"]
    store.procs_cleaned(pid, by_run=rid + 1, note="stopped by run #2")
    assert store.pending_procs("gpu-01") == [] and store.step_procs(sid)[0]["state"] == "stopped"
    assert store.steps(rid)[0]["summary"].endswith("; stopped by run #2")


def test_recover_leaves_the_runs_of_a_live_process_alone(store):
    rid = new_run(store)
    assert store.recover() == [] and store.get_run(rid)["status"] == "running"


# -- sweeps -----------------------------------------------------------------------------------

def test_a_sweep_keeps_its_points_and_result(store):
    sid = store.create_sweep(kind="sweep", playbook="bench", host="gpu-01", spec={"axes": {"tp": [1, 2]}},
                             actor="alice", origin="cli",
                             points=[({"tp": 1}, "pending", ""), ({"tp": 2}, "skipped", "needs 2 GPUs")])
    sweep = store.get_sweep(sid)
    assert set(sweep) == keys(SweepRow)
    assert (sweep["status"], sweep["spec"], sweep["result"]) == ("running", {"axes": {"tp": [1, 2]}}, None)
    pts = store.sweep_points(sid)
    assert [set(p) == keys(SweepPointRow) for p in pts] == [True, True]
    assert [(p["idx"], p["inputs"], p["status"], p["reason"]) for p in pts] == \
        [(0, {"tp": 1}, "pending", ""), (1, {"tp": 2}, "skipped", "needs 2 GPUs")]
    assert store.add_sweep_point(sid, {"tp": 4}) == 2
    rid = finished_run(store)
    store.sweep_point_done(sid, 0, "done", rid, {"output_throughput": 900.0})
    store.finish_sweep(sid, "done", {"best": 0})
    pts = store.sweep_points(sid)
    assert (pts[0]["status"], pts[0]["run_id"], pts[0]["result"]) == ("done", rid, {"output_throughput": 900.0})
    assert (pts[2]["inputs"], pts[2]["status"], pts[2]["result"]) == ({"tp": 4}, "pending", None)
    sweep = store.get_sweep(sid)
    assert (sweep["status"], sweep["result"]) == ("done", {"best": 0}) and sweep["finished_at"] is not None
    assert store.get_sweep(sid + 1) is None


# -- schedules --------------------------------------------------------------------------------

def test_schedule_fires_and_pause_state(store):
    assert store.last_fire("nightly") is None and store.last_schedule_run("nightly") is None
    f1 = store.record_fire("nightly", "2026-01-01T02:00:00.000Z", "started")
    f2 = store.record_fire("nightly", "2026-01-02T02:00:00.000Z", "misfired")
    rid = new_run(store, origin="schedule", schedule="nightly")
    store.update_fire(f1, "done", rid)
    fire = store.last_fire("nightly")
    assert set(fire) == keys(ScheduleFireRow) and (fire["id"], fire["status"], fire["run_id"]) == (f2, "misfired", None)
    store.update_fire(f2, "skipped")
    assert store.last_fire("nightly")["status"] == "skipped"
    assert [f["id"] for f in store.schedule_fires("nightly")] == [f1, f2]
    assert [f["id"] for f in store.schedule_fires("nightly", "2026-01-02T00:00:00.000Z")] == [f2]
    assert store.schedule_fires("nightly", limit=1)[0]["id"] == f1 and store.schedule_fires("other") == []
    assert store.last_schedule_run("nightly")["id"] == rid
    assert store.schedule_states() == {}
    assert store.set_schedule_paused("nightly", True, "alice")
    assert not store.set_schedule_paused("nightly", True, "bob")
    state = store.schedule_states()["nightly"]
    assert set(state) == keys(ScheduleStateRow) and (state["paused"], state["changed_by"]) == (1, "alice")
    assert store.set_schedule_paused("nightly", False, "bob") and store.schedule_states()["nightly"]["paused"] == 0


# -- health watch ------------------------------------------------------------------------------

def test_health_transitions_are_events_with_reason_and_actor_and_hold_the_host(store):
    assert store.health_states() == [] and store.health_held("gpu-01") is None
    assert store.health_transition("gpu-01", 0, "quarantined", "Xid 79 (GPU has fallen off the bus)", "health-watch")
    assert not store.health_transition("gpu-01", 0, "quarantined", "again", "health-watch")
    held = store.health_held("gpu-01")
    assert set(held) == keys(HealthStateRow) and (held["gpu"], held["state"], held["clean"]) == (0, "quarantined", 0)
    store.health_set_clean("gpu-01", 0, 2)
    store.health_set_alert("gpu-01", 0, "C0123", "1700000000.000100")
    row = store.health_states("gpu-01")[0]
    assert (row["clean"], row["channel"], row["message_ts"]) == (2, "C0123", "1700000000.000100")
    assert store.health_silence("gpu-01", 0, "2030-01-01T00:00:00.000Z", "UBOSS")
    assert not store.health_silence("gpu-09", 0, "2030-01-01T00:00:00.000Z", "UBOSS")
    row = store.health_states("gpu-01")[0]
    assert (row["silenced_until"], row["silenced_by"]) == ("2030-01-01T00:00:00.000Z", "UBOSS")
    assert store.health_transition("gpu-01", 0, "healthy", "3 clean probes", "health-watch")
    assert store.health_held("gpu-01") is None and store.health_states("gpu-01")[0]["clean"] == 0
    events = store.health_events("gpu-01")
    assert set(events[0]) == keys(HealthEventRow)
    assert [(e["kind"], e["to_state"], e["actor"]) for e in events] == [
        ("transition", "healthy", "health-watch"), ("silence", None, "UBOSS"),
        ("transition", "quarantined", "health-watch")]
    assert store.audit_verify()["ok"]


def test_xids_are_counted_in_their_window_and_the_cursor_is_kept_per_host(store):
    for _ in range(3):
        store.health_record_xid("gpu-01", 1, 13, "Xid 13 (graphics engine exception)")
    store.health_record_xid("gpu-01", 0, 13, "Xid 13")
    assert store.health_xid_count("gpu-01", 1, 13, "2000-01-01T00:00:00.000Z") == 3
    assert store.health_xid_count("gpu-01", 1, 13, "2999-01-01T00:00:00.000Z") == 0
    assert store.health_xid_count("gpu-01", 1, 31, "2000-01-01T00:00:00.000Z") == 0
    assert store.health_cursor("gpu-01") is None
    store.health_set_cursor("gpu-01", 1234.5, "ok")
    store.health_set_cursor("gpu-01", None, "hung")       # a hung probe read nothing: the cursor stays
    assert store.health_cursor("gpu-01") == 1234.5 and store.health_cursor("gpu-02") is None


# -- retention and the audit chain ------------------------------------------------------------

def test_prune_deletes_finished_runs_but_keeps_baselines_and_running_runs(store):
    old = finished_run(store, metrics={"tput": 1})
    store.add_event(old, "note", "x")
    base = finished_run(store)
    store.set_baseline(base, "alice")
    running = new_run(store)
    assert store.prune_count(timedelta(days=1)) == 0
    assert store.prune_count(EVERYTHING) == 1
    assert store.prune(EVERYTHING) == 1
    assert store.get_run(old) is None and store.metrics(old) == [] and store.steps(old) == []
    assert [e for e in store.events() if e["run_id"] == old] == []
    assert store.get_run(base) is not None and store.get_run(running) is not None


def test_the_audit_chain_verifies_after_a_sequence_of_writes(store):
    rid = finished_run(store, metrics={"tput": 5})
    store.add_event(rid, "note", "x")
    aid = store.approval_requested(rid, 0, "gpu-01", "s", "a", [])
    store.approval_decided(aid, "approved", "bob")
    store.set_baseline(rid, "alice")
    store.record_fire("nightly", "2026-01-01T02:00:00.000Z", "started")
    finished_run(store, metrics={"tput": 6})
    assert store.prune(EVERYTHING) == 1  # deletions are links of the chain too
    report = store.audit_verify()
    assert report["ok"] and report["first_broken"] is None and report["problems"] == []
    head = store.audit_head()
    assert head["seq"] is not None and head["hash"] and report["head"] == head["hash"]
    assert store.run_audit_problems(rid) == []
    store.check_writable()


# -- replicas: the leader lease, heartbeats, claimed fires ---------------------------------------

def test_a_lease_has_one_holder_until_it_is_released(store):
    assert store.lease_holder("leader") is None
    assert store.lease_acquire("leader", "r1", 30)
    first = store.lease_holder("leader")
    assert set(first) == keys(LeaseRow) and first["holder"] == "r1"
    assert first["expires_at"] > first["renewed_at"]
    assert not store.lease_acquire("leader", "r2", 30)           # held and not expired
    assert store.lease_acquire("leader", "r1", 30)               # the holder renews
    renewed = store.lease_holder("leader")
    assert renewed["holder"] == "r1" and renewed["acquired_at"] == first["acquired_at"]
    assert renewed["renewed_at"] >= first["renewed_at"]
    store.lease_release("leader", "r2")                          # not r2's to release
    assert store.lease_holder("leader")["holder"] == "r1"
    store.lease_release("leader", "r1")
    assert store.lease_holder("leader") is None
    assert store.lease_acquire("leader", "r2", 30)
    assert store.lease_holder("leader")["holder"] == "r2"
    assert store.lease_acquire("other", "r3", 30)                # another lease is independent
    assert [(e["kind"], e["message"]) for e in reversed(store.events("leader"))] == [
        ("leader", "r1 took the leader lease"), ("leader", "r1 released the leader lease"),
        ("leader", "r2 took the leader lease"), ("leader", "r3 took the other lease")]
    assert store.audit_verify()["ok"]


def test_replicas_beat_and_are_listed_most_recent_first(store):
    store.replica_beat("h1:10:aa", hostname="h1", pid=10, proc_start="123", version="1.0")
    store.replica_beat("h2:20:bb", hostname="h2", pid=20, proc_start=None, version="1.0")
    store.replica_beat("h1:10:aa", hostname="h1", pid=10, proc_start="123", version="1.0")
    reps = store.replicas()
    assert [r["id"] for r in reps] == ["h1:10:aa", "h2:20:bb"]
    assert set(reps[0]) == keys(ReplicaRow)
    assert reps[0]["seen_at"] >= reps[0]["started_at"] and reps[0]["pid"] == 10 and reps[0]["hostname"] == "h1"


def test_a_schedule_fire_is_claimed_once_per_slot(store):
    t = "2026-01-01T03:00:00.000Z"
    fid = store.claim_fire("nightly", t, "r1")
    assert fid is not None
    assert store.claim_fire("nightly", t, "r2") is None
    assert store.claim_fire("nightly", "2026-01-01T03:05:00.000Z", "r2") is not None
    assert store.claim_fire("other", t, "r2") is not None
    fires = store.schedule_fires("nightly")
    assert [(f["fire_time"], f["status"]) for f in fires] == [(t, "started"), ("2026-01-01T03:05:00.000Z", "started")]
    store.update_fire(fid, "running", None)
    assert store.last_fire("nightly")["fire_time"] == "2026-01-01T03:05:00.000Z"

def test_steps_beside_a_lock_free_run_are_those_running_under_a_lock_or_started_since(store):
    holder, reader = new_run(store), new_run(store, "server-logs")
    store.acquire_hosts(holder, ["gpu-01"])
    running = store.step_started(holder, 0, "gpu-01", "holds", "shell", {})
    last, beside = store.steps_beside("gpu-01", reader, None)
    assert last == running and [s["id"] for s in beside] == [running]
    assert store.steps_beside("gpu-02", reader, None)[1] == [] and store.steps_beside("gpu-01", holder, None)[1] == []
    store.step_finished(running, StepEnd(run_id=holder, host="gpu-01", status="ok", summary="", duration_ms=1, attempts=1))
    mark, beside = store.steps_beside("gpu-01", reader, None)
    assert beside == []
    later = store.step_started(holder, 1, "gpu-01", "quick", "shell", {})   # started and ended since the mark
    store.step_finished(later, StepEnd(run_id=holder, host="gpu-01", status="ok", summary="", duration_ms=1, attempts=1))
    assert [s["name"] for s in store.steps_beside("gpu-01", reader, mark)[1]] == ["quick"]



__all__ = [n for n in dir() if n.startswith("test_")]
