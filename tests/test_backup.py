"""`eagle audit backup FILE`: SQLite's online backup of the audit DB while another process keeps
writing to it, and the copy's chain verified before the command says it is good."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from support.helpers import write_yaml

from eaglebot.store import Store

EAGLE = str(Path(sys.executable).parent / "eagle")

WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from eaglebot.store import Store
    from eaglebot.store.rows import NewRun
    db, stop = sys.argv[1], Path(sys.argv[2])
    store = Store(db)
    n = 0
    while not stop.exists():
        rid = store.create_run(NewRun(playbook="p", hosts=["h"], inputs={"n": n}, variables={}, actor="writer",
                                      origin="cli"))
        store.add_event(rid, "note", f"write {n}")
        store.finish_run(rid, "succeeded", exit_code=0)
        n += 1
        if n == 1:
            Path(sys.argv[2] + ".started").touch()
    store.close()
    print(n)
""")


def eagle(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EAGLE, "--config", str(config), *args], capture_output=True, text=True, timeout=120)


def runs_in(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("select count(*) from runs").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.e2e  # backups beside a writing process: a soak
def test_backup_while_another_process_writes_gives_copies_that_verify(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    db = tmp_path / "eagle.db"
    Store(db).close()
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db), str(stop)], stdout=subprocess.PIPE, text=True)
    heads, counts = [], []
    try:
        started = Path(str(stop) + ".started")
        while not started.exists():
            assert writer.poll() is None, "the writer died"
            time.sleep(0.01)
        for i in range(3):
            copy = tmp_path / f"copy-{i}.db"
            res = eagle("audit", "backup", str(copy), "--json", config=cfg)
            assert res.returncode == 0, res.stderr
            doc = json.loads(res.stdout)
            assert doc["file"] == str(copy) and doc["verified"] is True and doc["first_broken"] is None
            heads.append(doc["hash"])
            counts.append(runs_in(copy))
            # the head printed is the copy's own
            copy_store = Store(copy, readonly=True)
            assert copy_store.audit_head()["hash"] == doc["hash"]
            copy_store.close()
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0
    assert counts[0] < counts[1] < counts[2] <= int(out)     # the writer kept writing between the copies
    for h in heads:                                          # each copy's head is a link of the live chain
        res = eagle("audit", "verify", "--head", h, config=cfg)
        assert res.returncode == 0, res.stdout + res.stderr
    res = eagle("audit", "backup", str(tmp_path / "plain.db"), config=cfg)
    assert res.returncode == 0 and res.stdout.strip() == str(tmp_path / "plain.db")
    assert "and verified" in res.stderr and "its chain head is " in res.stderr


def test_backup_of_a_tampered_db_exits_1_and_says_the_copy_does_not_verify(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    assert eagle("run", "hello", "-H", "local", config=cfg).returncode == 0
    conn = sqlite3.connect(tmp_path / "eagle.db")
    conn.execute("update runs set actor = 'mallory'")
    conn.commit()
    conn.close()
    res = eagle("audit", "backup", str(tmp_path / "copy.db"), config=cfg)
    assert res.returncode == 1
    assert "does NOT verify" in res.stderr and "runs row 1" in res.stderr
