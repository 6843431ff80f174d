"""The audit store failing under a run: a full disk (a real 1 MiB tmpfs), a read-only DB
folder, a corrupt DB file, a DB path that is a folder. Each: one clear line on stderr,
exit 1, no traceback, no earlier row lost, no step left `running`, host locks freed, and
`always` steps still run."""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from support.helpers import eagle, write_playbook, write_yaml
from support.inproc import eagle_here

from eaglebot.store import Store


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                         capture_output=True, text=True)
    return res.returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    """A real, tiny file system (tmpfs, 1 MiB): writing to it really runs out of space."""
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(disk, "1m"):
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN)")
    yield disk
    _umount(disk)


def _setup(tmp_path: Path, db: Path, marker: Path) -> Path:
    books = tmp_path / "books"
    books.mkdir(exist_ok=True)
    write_playbook(books, "fill", f"""
        name: fill
        steps:
          - name: fill the disk
            skill: shell
            with: {{command: "dd if=/dev/zero of={db.parent}/filler bs=64k 2>&1 | tail -1; true"}}
          - name: after
            skill: shell
            with: {{command: "echo after"}}
        always:
          - name: leave a mark
            skill: shell
            with: {{command: "touch {marker}"}}
    """)
    write_playbook(books, "quick", """
        name: quick
        steps:
          - skill: shell
            with: {command: "echo quick"}
    """)
    return write_yaml(tmp_path / "eagle.yaml", {"audit_db": str(db), "playbooks_dir": "books"})


def _one_clear_line(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("eagle: ")]
    assert lines, res.stderr
    assert any(all(n in ln for n in needles) for ln in lines), res.stderr


def _state(db: Path) -> tuple[list[dict], list[dict], list[dict]]:
    store = Store(db)  # opening recovers: a run whose process is gone becomes `interrupted`
    try:
        runs = list(store.db.query("select id, status from runs order by id"))
        steps = list(store.db.query("select run_id, name, status, output from steps order by id"))
        locks = store.locks()
        return runs, steps, locks
    finally:
        store.close()


def test_a_full_disk_mid_run_fails_the_run_cleanly(tmp_path, small_disk):
    db, marker = small_disk / "eagle.db", tmp_path / "always-ran"
    cfg = _setup(tmp_path, db, marker)
    first = eagle("run", "quick", config=cfg)
    assert first.returncode == 0, first.stderr
    res = eagle("run", "fill", config=cfg)
    assert res.returncode == 1
    _one_clear_line(res, "audit store", str(db))
    assert "could not be recorded" in res.stderr or "not recorded" in res.stderr
    assert marker.exists()  # the always-step ran although the store could not take its row
    (small_disk / "filler").unlink()
    runs, steps, locks = _state(db)
    assert runs[0] == {"id": 1, "status": "succeeded"}  # no earlier row lost
    assert [s["name"] for s in steps if s["run_id"] == 1] == ["shell"] and "quick" in steps[0]["output"]
    assert runs[1]["status"] in ("failed", "interrupted")
    assert all(s["status"] != "running" for s in steps)
    # the lock is free, or kept with its reason when the step's row still said `running`
    # (what it started may still run: the next run there stops that first, then frees it)
    assert all(lock["reason"] and lock["pid"] is None for lock in locks)
    again = eagle("run", "quick", config=cfg)  # the host is free and the store works again
    assert again.returncode == 0, again.stderr
    assert _state(db)[2] == []


def test_a_read_only_db_folder_is_one_line_and_changes_nothing(tmp_path, small_disk):
    db = small_disk / "eagle.db"
    cfg = _setup(tmp_path, db, tmp_path / "m")
    assert eagle("run", "quick", config=cfg).returncode == 0
    before = db.read_bytes()
    r = subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    try:
        res = eagle("run", "quick", config=cfg)
        assert res.returncode == 1
        _one_clear_line(res, "audit store", "read-only")
        hist = eagle("history", config=cfg)
        assert "Traceback" not in hist.stderr
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], capture_output=True)
    assert db.read_bytes() == before or _state(db)[0] == [{"id": 1, "status": "succeeded"}]
    runs, steps, locks = _state(db)
    assert runs == [{"id": 1, "status": "succeeded"}] and locks == []
    assert all(s["status"] != "running" for s in steps)


def test_a_read_only_db_folder_without_root_powers(tmp_path):
    if os.geteuid() == 0:
        # root ignores permission bits: drop to nobody for the run itself
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv to drop root")
        unreadable = _unreadable_by_nobody()
        if unreadable:
            pytest.skip(unreadable)
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "eagle.db"
    cfg = _setup(tmp_path, db, tmp_path / "m")
    assert eagle("run", "quick", config=cfg).returncode == 0
    os.chmod(folder, 0o555)
    os.chmod(db, 0o444)
    try:
        if os.geteuid() == 0:
            os.chmod(tmp_path, 0o755)
            for p in tmp_path.parents:   # up to the first folder others may enter (/tmp): one
                if os.stat(p).st_mode & 0o001:   # more level under xdist (pytest-N/popen-gwK)
                    break
                os.chmod(p, os.stat(p).st_mode | 0o005)
            import sys
            res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                  sys.executable, "-m", "eaglebot", "run", "quick", "--config", str(cfg)],
                                 capture_output=True, text=True, cwd=tmp_path, timeout=120)
        else:
            res = eagle("run", "quick", config=cfg)
    finally:
        os.chmod(folder, 0o755)
        os.chmod(db, 0o644)
    assert res.returncode == 1, res.stderr
    _one_clear_line(res, "audit store")
    runs, _, locks = _state(db)
    assert runs == [{"id": 1, "status": "succeeded"}] and locks == []


def _unreadable_by_nobody() -> str | None:
    """Why user nobody (65534) cannot run this clone's eaglebot, or None. The test drops root
    to nobody; a clone inside a private folder (0700, e.g. a home folder) cannot be imported
    by another user, and the run would fail with `No module named eaglebot`."""
    import sys

    import eaglebot

    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                            "-c", "import eaglebot"], capture_output=True, text=True, timeout=60)
    if probe.returncode == 0:
        return None
    where = Path(eaglebot.__file__).resolve().parent
    private = next((str(p) for p in (where, *where.parents) if not os.stat(p).st_mode & 0o005), str(where))
    return (f"user nobody cannot import eaglebot from {where} ({private} is not readable by other users): "
            "this root-only test runs eagle as nobody; clone into a world-readable folder or "
            f"`chmod o+rx` the folders down to it ({probe.stderr.strip().splitlines()[-1] if probe.stderr else ''})")


@pytest.mark.parametrize("damage", ["random bytes", "garbled pages", "truncated"])
def test_a_corrupt_db_is_one_line(tmp_path, damage):
    db = tmp_path / "eagle.db"
    cfg = _setup(tmp_path, db, tmp_path / "m")
    assert eagle_here("run", "quick", config=cfg).returncode == 0
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(db.read_bytes())
    if damage == "random bytes":
        db.write_bytes(os.urandom(len(data)))
    elif damage == "garbled pages":
        page = 4096
        data[page:] = bytes(len(data) - page)  # keep the header, zero every later page
        for i in range(page, len(data), 7):
            data[i] = 0xA5
        db.write_bytes(bytes(data))
    else:
        db.write_bytes(bytes(data[: len(data) // 3]))
    cmds = [["run", "quick"], ["history"]] + ([["show", "1"], ["audit", "verify"]] if damage == "truncated" else [])
    for cmd in cmds:
        res = eagle_here(*cmd, config=cfg)
        assert res.returncode != 0, (cmd, res.stdout)
        assert "Traceback" not in res.stderr, res.stderr
        assert res.stderr.startswith("eagle: ") and res.stderr.count("\n") <= 2, res.stderr


def test_a_db_path_that_is_a_folder_is_one_line(tmp_path):
    db = tmp_path / "eagle.db"
    db.mkdir()
    cfg = _setup(tmp_path, db, tmp_path / "m")
    res = eagle_here("run", "quick", config=cfg)
    assert res.returncode == 1
    assert res.stderr == f"eagle: audit store {db}: the path is a folder, not a database file\n"
    res = eagle_here("doctor", config=cfg)
    assert res.returncode == 1 and "Traceback" not in res.stderr


async def test_a_long_lived_bot_records_what_the_full_disk_refused_once_space_is_back(small_disk, services):
    """`eagle serve` does not exit after a failed write: the run's end and its host lock are
    written as soon as the store works again (before the next run), no step stays `running`."""
    import json as _json

    from eaglebot.engine.runner import RunRequest
    from support.gpu_helpers import playbook

    svc = await services({"h": {"transport": "local"}}, audit_db=str(small_disk / "eagle.db"))
    fill = playbook(_json.dumps({"name": "fill", "steps": [
        {"name": "fill", "skill": "shell",
         "with": {"command": f"dd if=/dev/zero of={small_disk}/filler bs=64k 2>/dev/null; echo full"}},
        {"name": "after", "skill": "shell", "with": {"command": "echo after"}}],
        "always": [{"name": "note", "skill": "shell", "with": {"command": "echo always"}}]}))
    out = await svc.engine.run(RunRequest(playbook=fill, hosts=["h"]))
    assert out.status == "failed" and out.exit_code == 1 and "audit store" in out.error
    assert [s.name for s in out.steps] == ["fill", "after", "note"]
    assert out.steps[2].summary.endswith("(not recorded: the audit store failed)")
    (small_disk / "filler").unlink()
    quick = playbook(_json.dumps({"name": "quick", "steps": [{"skill": "shell", "with": {"command": "echo ok"}}]}))
    nxt = await svc.engine.run(RunRequest(playbook=quick, hosts=["h"]))  # not refused as busy
    assert nxt.status == "succeeded", nxt.error
    first = await svc.store.call(lambda s: s.get_run(out.run_id))
    assert first["status"] == "failed"
    assert all(s["status"] != "running" for s in await svc.store.call(lambda s: s.steps(out.run_id)))
    assert await svc.store.call(lambda s: s.locks()) == []
