"""End to end through the CLI: metric.record in a playbook, exit code 3, baseline, prune, trend."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml
from support.history_seed import seed_run

from eaglebot.frontends.cli.main import main
from eaglebot.store import Store
from eaglebot.store.rows import NewRun

PLAYBOOK = {
    "name": "measure",
    "description": "record a throughput number",
    "inputs": {"tps": {"type": "float", "default": 90.0}},
    "steps": [{"skill": "metric.record",
               "with": {"name": "output_throughput", "value": "{{ tps }}", "unit": "tok/s"}}],
}


@pytest.fixture
def cfg(tmp_path):
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "measure.yaml").write_text(yaml.safe_dump(PLAYBOOK))
    p = tmp_path / "eagle.yaml"
    p.write_text(yaml.safe_dump({"audit_db": "eagle.db", "playbooks_dir": "playbooks"}))
    return p


def run_json(cfg, capsys, *args) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["run", "measure", "--json", *args, "--config", str(cfg)])
    return rc, json.loads(capsys.readouterr().out)


def test_recorded_drop_exits_3_with_the_regression_in_json(cfg, capsys):
    for v in (90, 91.5, 89, 90.5, 89.5):
        rc, doc = run_json(cfg, capsys, "-e", f"tps={v}")
        assert rc == 0 and doc["regressions"] == []
    rc, doc = run_json(cfg, capsys, "-e", "tps=54.8")
    assert rc == 0 and doc["regressions"] == []       # one bad night alone is a suspect (confirm_runs: 2)
    store = Store(cfg.parent / "eagle.db")
    [note] = [e["message"] for e in store.db.query("select message from events where kind = 'regression-check'")
              if "suspect" in e["message"]]
    assert "output_throughput 54.8 tok/s is 39.1% below" in note and "if the next run confirms it" in note
    capsys.readouterr()
    assert main(["show", str(doc["run_id"]), "--config", str(cfg)]) == 0
    assert "  local: suspect: output_throughput 54.8 tok/s is 39.1% below" in capsys.readouterr().out
    rc, doc = run_json(cfg, capsys, "-e", "tps=55.1")
    assert rc == 3
    assert doc["status"] == "succeeded"
    [r] = doc["regressions"]
    assert r["metric"] == "output_throughput" and r["host"] == "local" and r["value"] == 55.1
    assert f"since run #{doc['run_id'] - 1}" in r["reason"]
    assert r["delta_pct"] < -35 and "below the median" in r["reason"]
    assert doc["metrics"][0]["better"] == "higher"


def test_improvement_is_stored_but_not_a_json_regression(cfg, capsys):
    for v in (90, 91.5, 89, 90.5, 89.5):
        run_json(cfg, capsys, "-e", f"tps={v}")
    rc, doc = run_json(cfg, capsys, "-e", "tps=150")
    assert rc == 0 and doc["regressions"] == []
    store = Store(cfg.parent / "eagle.db")
    assert [r["kind"] for r in store.regressions(doc["run_id"])] == ["improvement"]


def test_metric_record_dry_run_records_nothing(cfg, capsys):
    rc, doc = run_json(cfg, capsys, "--dry-run")
    assert rc == 0 and doc["metrics"] == []


def test_baseline_set_via_cli(cfg, capsys):
    rc, doc = run_json(cfg, capsys)
    assert main(["baseline", "set", str(doc["run_id"]), "--config", str(cfg)]) == 0
    assert "is now the baseline of measure on local" in capsys.readouterr().out
    store = Store(cfg.parent / "eagle.db")
    assert store.baseline("measure", "local")["run_id"] == doc["run_id"]
    assert main(["baseline", "set", "999", "--config", str(cfg)]) == 2
    rc, dry = run_json(cfg, capsys, "--dry-run")
    assert main(["baseline", "set", str(dry["run_id"]), "--config", str(cfg)]) == 2
    assert "dry run" in capsys.readouterr().err


def test_prune_keeps_baselines_and_running_runs_and_deletes_child_rows(tmp_path):
    from eaglebot.sdk import FileChange

    store = Store(tmp_path / "e.db")
    old = "2020-01-01T00:00:00.000Z"
    base = seed_run(store, "bench", "h", metrics={"output_throughput": 90}, started_at=old)
    doomed = seed_run(store, "bench", "h", metrics={"output_throughput": 91}, started_at=old,
                      change=FileChange("/x", "a", "b", "diff", None))
    store.add_warning(doomed, "h", "w")
    store.add_event(doomed, "k", "m")
    running = store.create_run(NewRun(playbook="bench", hosts=["h"], inputs={}, variables={}, actor="t", origin="cli"))
    store.db.execute("update runs set started_at = $1 where id = $2", [old, running])
    fresh = seed_run(store, "bench", "h", metrics={"output_throughput": 92})
    store.set_baseline(base, "t")
    assert store.prune(timedelta(days=90)) == 1
    ids = {r["id"] for r in store.db.query("select id from runs")}
    assert ids == {base, running, fresh}
    for t in ("steps", "metrics", "changes", "warnings", "events", "run_hosts"):
        assert store.db.execute(f"select count(*) from {t} where run_id = $1", [doomed]).fetchone()[0] == 0, t
    assert store.metrics(base) and store.steps(base)


def test_prune_via_cli_and_ambiguous_unit(cfg, capsys):
    run_json(cfg, capsys)
    assert main(["prune", "--older-than", "90d", "--config", str(cfg)]) == 0
    assert "pruned 0 runs" in capsys.readouterr().out
    assert main(["prune", "--older-than", "3m", "--config", str(cfg)]) == 2
    assert "ambiguous" in capsys.readouterr().err


def test_history_host_filter_uses_run_hosts(cfg, capsys):
    run_json(cfg, capsys)
    capsys.readouterr()
    assert main(["history", "--host", "local", "--json", "--config", str(cfg)]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["hosts"] == ["local"]
    assert main(["history", "--host", "gpu-9", "--json", "--config", str(cfg)]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["history", "--config", str(cfg)]) == 0
    assert "output_throughput=90 tok/s" in capsys.readouterr().out


def test_schema_v1_database_is_migrated_and_backfilled(tmp_path):
    import sqlite3

    store = Store(tmp_path / "old.db")
    rid = seed_run(store, "bench", "gpu-01")
    store.db.execute("drop table run_hosts")
    store.db.execute("PRAGMA user_version = 1")
    store.close()
    store = Store(tmp_path / "old.db")
    from eaglebot.store.db import SCHEMA_VERSION

    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert [r["id"] for r in store.history(host="gpu-01")] == [rid]
    store.close()
    conn = sqlite3.connect(tmp_path / "old.db")
    assert conn.execute("select count(*) from run_hosts").fetchone()[0] == 1
