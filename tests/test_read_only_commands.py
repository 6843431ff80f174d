"""No read-only command creates a store (DESIGN; issue 34 item 6): with no eagle.db, a command
that shows the store shows it empty, one that needs a run, an incident or a sweep refuses in
one sentence (exit 2), and neither leaves a file behind. The default config (no eagle.yaml) in
an empty folder, as a new user has it; and PostgreSQL, where the check runs no DDL."""
from __future__ import annotations

import json

import psycopg
import pytest
from support.helpers import eagle, write_yaml
from support.inproc import eagle_here

NO_DB = "no audit DB at {db}"

SHOWN_EMPTY = [
    (["status"], "no runs are running"),
    (["status", "--json"], '"running": []'),
    (["schedule", "list"], "no schedules configured"),
    (["fleet"], "no host is watched"),
    (["fleet", "--json"], '"hosts": []'),
    (["history"], "no runs yet"),
    (["prune", "--older-than", "90d", "--dry-run"], "would prune 0 runs: no audit DB at"),
    (["prune", "--older-than", "90d"], "pruned 0 runs: no audit DB at"),
    (["chat", "history"], "no runs yet"),
    (["chat", "fleet"], "no host is watched"),
    (["chat", "schedule"], "no schedules configured"),
    (["chat", "hosts"], "local"),
]

NEED_RECORDS = [
    (["show", "3"], "no run #3: "),
    (["show", "last"], "no runs yet: "),
    (["watch", "3"], "no run #3: "),
    (["baseline", "set", "3"], "no run #3: "),
    (["ack", "3", "--reason", "fixed"], "no incident #3: "),
    (["ack", "3", "output_throughput", "--reason", "fixed"], "no run #3: "),
    (["ack", "3", "--all", "--reason", "fixed"], "no run #3: "),
    (["cancel", "3"], "no run #3: "),
    (["rerun", "3"], "no run #3: "),
    (["sweep", "resume", "3"], "no sweep #3: "),
    (["diff", "1", "2"], "no run #1: "),
]


@pytest.mark.parametrize("argv,shown", SHOWN_EMPTY, ids=[" ".join(a) for a, _ in SHOWN_EMPTY])
def test_a_view_of_no_store_shows_it_empty_and_creates_nothing(tmp_path, argv, shown):
    res = eagle_here(*argv, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert shown in res.stdout, res.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv,said", NEED_RECORDS, ids=[" ".join(a) for a, _ in NEED_RECORDS])
def test_a_command_that_needs_records_refuses_in_one_sentence_and_creates_nothing(tmp_path, argv, said):
    res = eagle_here(*argv, cwd=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stderr.startswith(f"eagle: {said}{NO_DB.format(db=tmp_path / 'eagle.db')} ") and \
        res.stderr.count("\n") == 1, res.stderr
    assert list(tmp_path.iterdir()) == []


def test_with_a_config_the_db_it_names_is_not_created_either(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "state/eagle.db"})
    for argv in (["status"], ["fleet"], ["schedule", "list"], ["baseline", "set", "1"]):
        eagle_here(*argv, config=cfg, cwd=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eagle.yaml"]
    # once a run made it, the same commands read it (and `show` finds the run)
    assert eagle_here("run", "hello", config=cfg).returncode == 0
    shown = eagle_here("show", "1", "--json", config=cfg)
    assert shown.returncode == 0 and json.loads(shown.stdout)["run_id"] == 1


def _tables(url: str) -> list[str]:
    with psycopg.connect(url) as c:
        return [r[0] for r in c.execute("select table_name from information_schema.tables "
                                        "where table_schema = 'public'")]


@pytest.mark.e2e  # every view on PostgreSQL
def test_on_an_empty_postgresql_database_views_run_no_ddl(tmp_path, pg_server):
    url = pg_server.fresh_db(template="template0")   # a database with no eaglebot tables yet
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": url})
    status = eagle("status", "--json", config=cfg)
    assert status.returncode == 0 and json.loads(status.stdout)["running"] == [], status.stderr
    show = eagle("show", "1", config=cfg)
    assert show.returncode == 2 and "no run #1: no audit store in" in show.stderr and "(it has no tables)" in show.stderr
    for argv in (["fleet"], ["schedule", "list"], ["history"], ["watch", "1"], ["prune", "--older-than", "1d"]):
        eagle(*argv, config=cfg)
    assert _tables(url) == []
