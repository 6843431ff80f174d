"""One incident per cause, through the CLI on real runs of metric.record: three metrics that
move at one change point are one incident, `eagle ack INCIDENT` (and `/eagle ack`) closes it,
`eagle prune` does not strand it, and a reason is shortened at whole items."""
from __future__ import annotations

import json

import pytest
import yaml

from eaglebot.frontends.cli.main import main
from eaglebot.history.reasons import clip_items
from eaglebot.store import Store

PLAYBOOK = {
    "name": "nightly",
    "description": "record three numbers a relaunch moves together",
    "inputs": {"tps": {"type": "float", "default": 100.0}, "ttft": {"type": "float", "default": 40.0},
               "acc": {"type": "float", "default": 3.2}},
    "steps": [
        {"skill": "metric.record", "with": {"name": "output_throughput", "value": "{{ tps }}", "unit": "tok/s"}},
        {"skill": "metric.record", "with": {"name": "median_ttft_ms", "value": "{{ ttft }}", "unit": "ms",
                                            "better": "lower"}},
        {"skill": "metric.record", "with": {"name": "accept_length", "value": "{{ acc }}"}},
    ],
}
STABLE = ((100.0, 40.0, 3.2), (101.0, 40.4, 3.22), (99.2, 39.7, 3.19), (100.4, 40.2, 3.21), (99.6, 39.9, 3.18),
          (100.8, 40.1, 3.2))
DROP = (80.0, 52.0, 2.5)       # new capture layers: slower, later first token, fewer accepted tokens


@pytest.fixture
def cfg(tmp_path):
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "nightly.yaml").write_text(yaml.safe_dump(PLAYBOOK))
    p = tmp_path / "eagle.yaml"
    p.write_text(yaml.safe_dump({"audit_db": "eagle.db", "playbooks_dir": "playbooks"}))
    return p


def night(cfg, capsys, tps: float, ttft: float, acc: float) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["run", "nightly", "--json", "-e", f"tps={tps}", "-e", f"ttft={ttft}", "-e", f"acc={acc}",
               "--config", str(cfg)])
    return rc, json.loads(capsys.readouterr().out)


def cli(cfg, capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main([*argv, "--config", str(cfg)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def drop_two_nights(cfg, capsys) -> tuple[dict, dict]:
    for v in STABLE:
        assert night(cfg, capsys, *v)[0] == 0
    rc, first = night(cfg, capsys, *DROP)
    assert rc == 0 and first["regressions"] == []          # one bad night: a suspect
    rc, second = night(cfg, capsys, 80.4, 51.6, 2.52)
    assert rc == 3 and {r["metric"] for r in second["regressions"]} == {"output_throughput", "median_ttft_ms",
                                                                        "accept_length"}
    return first, second


def test_one_change_point_moving_three_metrics_opens_one_incident_and_ack_closes_it(cfg, capsys):
    first, second = drop_two_nights(cfg, capsys)
    store = Store(cfg.parent / "eagle.db")
    rows = store.incidents(status="open")
    assert len(rows) == 3 and {r["opened_run"] for r in rows} == {first["run_id"]}
    head = min(r["id"] for r in rows)
    assert sorted(r["cause_id"] or r["id"] for r in rows) == [head] * 3
    rc, out, _ = cli(cfg, capsys, "show", str(second["run_id"]))
    [line] = [ln for ln in out.splitlines() if ln.strip().startswith("incident #")]
    assert f"incident #{head} output_throughput, median_ttft_ms, accept_length on local (nightly)" in line
    # the next night is flagged under the same incident, not a new one
    assert night(cfg, capsys, 79.8, 52.3, 2.49)[0] == 3
    assert len(store.incidents(status=None)) == 3
    rc, out, err = cli(cfg, capsys, "ack", str(head), "--reason", "new capture layers, slower by design")
    assert rc == 0, err
    assert f"incident #{head} (output_throughput, median_ttft_ms, accept_length on local (nightly)" in out
    assert store.incidents(status="open") == []
    assert {r["closed_kind"] for r in store.incidents(status=None)} == {"ack"}
    [ev] = list(store.db.query("select message from events where kind = 'ack'"))
    assert f"acknowledged incident #{head}" in ev["message"]
    # the new level is the reference now: quiet, one incident closed once
    assert night(cfg, capsys, 80.1, 51.9, 2.51)[0] == 0
    rc, _, err = cli(cfg, capsys, "ack", str(head), "--reason", "again")
    assert rc == 2 and f"incident #{head} is already closed (ack by" in err
    rc, _, err = cli(cfg, capsys, "ack", "999", "--reason", "x")
    assert rc == 2 and "no incident #999 (open: none)" in err
    assert cli(cfg, capsys, "audit", "verify")[0] == 0


def test_slash_ack_closes_by_incident_and_ack_all_by_run(cfg, capsys):
    _, second = drop_two_nights(cfg, capsys)
    store = Store(cfg.parent / "eagle.db")
    head = min(r["id"] for r in store.incidents(status="open"))
    rc, _, err = cli(cfg, capsys, "chat", f"ack {head}")
    assert rc == 2 and "usage: /eagle ack INCIDENT reason" in err
    rc, out, err = cli(cfg, capsys, "chat", f"ack {head} new capture layers")
    assert rc == 0 and "acknowledged" in out and store.incidents(status="open") == []
    assert {r["reason"] for r in store.incidents(status=None)} == {"new capture layers"}
    # a second drop, acked by its run with --all
    for v in ((80.2, 52.0, 2.5), (79.9, 51.8, 2.51), (80.3, 52.1, 2.49), (80.0, 51.9, 2.5), (80.1, 52.2, 2.52)):
        assert night(cfg, capsys, *v)[0] == 0
    night(cfg, capsys, 60.0, 70.0, 1.8)
    rc, bad = night(cfg, capsys, 60.2, 69.5, 1.79)
    assert rc == 3 and len(store.incidents(status="open")) == 3
    rc, out, err = cli(cfg, capsys, "ack", str(bad["run_id"]), "output_throughput", "--all", "--reason", "x")
    assert rc == 2 and "leave out the metric" in err
    rc, out, err = cli(cfg, capsys, "ack", str(bad["run_id"]), "--all", "--reason", "rollback planned")
    assert rc == 0 and out.count("acknowledged by") == 1 and store.incidents(status="open") == []


def test_prune_does_not_strand_an_open_incident(cfg, capsys):
    first, second = drop_two_nights(cfg, capsys)
    store = Store(cfg.parent / "eagle.db")
    store.db.execute("update runs set started_at = '2020-01-01T00:00:00.000Z'")
    store.db.conn.commit()
    rc, out, _ = cli(cfg, capsys, "prune", "--older-than", "30d")
    assert rc == 0
    kept = {r["id"] for r in store.db.query("select id from runs")}
    assert kept == {first["run_id"], second["run_id"]}       # what the open incident points at
    # the runs before the drop are gone: the incident judges the next night by its recorded reference
    rc, doc = night(cfg, capsys, 80.2, 51.7, 2.5)
    assert rc == 3
    r = next(r for r in doc["regressions"] if r["metric"] == "output_throughput")
    assert r["reason"].startswith("still ") and "recorded (its earlier runs were pruned)" in r["reason"]
    head = min(r["id"] for r in store.incidents(status="open"))
    rc, out, err = cli(cfg, capsys, "ack", str(head), "--reason", "pruned but closable")
    assert rc == 0, err
    assert store.incidents(status="open") == []
    # once closed, a prune may take those runs too
    store.db.execute("update runs set started_at = '2020-01-01T00:00:00.000Z'")
    store.db.conn.commit()
    assert cli(cfg, capsys, "prune", "--older-than", "30d")[0] == 0
    assert store.db.execute("select count(*) from runs").fetchone()[0] == 0


def test_a_reason_is_shortened_at_whole_items_never_inside_a_value():
    reason = ("output_throughput 80 tok/s is 20.0% below the median 100 tok/s of the last 6 successful runs "
              "(25.1 sigma; robust sigma 0.8; higher is better; thresholds 5% and 3 sigma); "
              "changed since last good run #6: eagle_config.eagle_aux_hidden_state_layer_ids [2, 30, 58] → "
              "[-1, 2, 30]; launch --cuda-graph-bs 1 2 4 → 1 8 16; sglang 0.5.22 → 0.5.23; torch 2.8.0 → 2.9.0")
    for limit in range(40, len(reason), 7):
        short = clip_items(reason, limit)
        kept = short.rsplit("; and ", 1)[0] if "; and " in short else short
        assert reason.startswith(kept) and kept.count("[") == kept.count("]") and kept.count("(") == kept.count(")")
        if short != reason:
            n = int(short.rsplit("; and ", 1)[1].split()[0])
            assert n >= 1 and short.endswith(f"and {n} more")
    assert clip_items(reason, 10_000) == reason
    assert clip_items(reason, 300).endswith("[-1, 2, 30]; and 3 more")


def test_one_drop_that_moved_three_metrics_is_one_regression_line_in_the_cli_and_slack(cfg, capsys):
    """Issue 34: one drop gave one `▼ REGRESSION` line per metric; an incident is one line that
    names every metric it moved (the CLI's result, the Slack summary, `--json`'s row per metric)."""
    from eaglebot.frontends.slack import blocks as bk
    from eaglebot.history.view import RunView

    drop_two_nights(cfg, capsys)
    store = Store(cfg.parent / "eagle.db")
    head = min(r["id"] for r in store.incidents(status="open"))
    rc, out, _ = cli(cfg, capsys, "run", "nightly", "-e", "tps=79.8", "-e", "ttft=52.3", "-e", "acc=2.49")
    assert rc == 3
    [line] = [ln for ln in out.splitlines() if "REGRESSION" in ln]
    assert line.startswith(f"▼ REGRESSION local (incident #{head}): output_throughput ")
    assert "median_ttft_ms 40 → 52.3 (+30.6%)" in line and "accept_length " in line
    rid = int(out.split()[1].lstrip("#"))
    doc = json.loads(cli(cfg, capsys, "show", str(rid), "--json")[1])
    assert len(doc["regressions"]) == 3                      # the document keeps a row per metric
    summary = RunView.load(store, rid).summary()
    assert {r["incident"] for r in summary["regressions"]} == {head}
    text = str(bk.run_summary_blocks(summary))
    assert text.count("*REGRESSION*") == 1 and f"(incident #{head})" in text
    assert all(m in text for m in ("output_throughput", "median_ttft_ms", "accept_length"))
