"""Keyed sealing of the audit chain (store/sealing.py, after journald's Forward Secure
Sealing): `eagle audit init-key`, a sealing key that evolves each epoch, and `eagle audit
verify --key` with the verification key checking every seal."""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from support.helpers import write_yaml
from support.inproc import eagle_here as eagle, eagle_here_json as eagle_json

from eaglebot.store import Store
from eaglebot.store import chain, sealing
from eaglebot.store.rows import NewRun


def _init_key(path: Path) -> tuple[str, sealing.AuditKey]:
    res = eagle("audit", "init-key", str(path))
    assert res.returncode == 0, res.stderr
    line = res.stdout.strip()
    return line, sealing.parse_key(line, "stdout")


def _write_some(store: Store, n: int = 1) -> int:
    rid = store.create_run(NewRun(playbook="p", hosts=["h"], inputs={}, variables={}, actor="a", origin="cli"))
    for i in range(n):
        store.add_event(rid, "note", f"event {i}")
    store.finish_run(rid, "succeeded", exit_code=0)
    return rid


@pytest.fixture
def keyed(tmp_path) -> tuple[Path, Path, Path]:
    """A config with a sealing key, a DB written with it, and the verification key's file."""
    kf = tmp_path / "keys" / "audit.key"
    kf.parent.mkdir()
    line, _ = _init_key(kf)
    vk = tmp_path / "verify.key"
    vk.write_text(line + "\n")
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "audit_key_file": "keys/audit.key"})
    store = Store(tmp_path / "eagle.db", key_file=kf)
    _write_some(store, 2)
    store.close()
    return cfg, kf, vk


def test_init_key_writes_a_private_sealing_key_and_prints_the_verification_key(tmp_path):
    kf = tmp_path / "audit.key"
    res = eagle("audit", "init-key", str(kf))
    assert res.returncode == 0
    assert os.stat(kf).st_mode & 0o777 == 0o600
    [line] = res.stdout.splitlines()
    vk = json.loads(line)
    assert vk["eagle_audit_key"] == "verification" and vk["epoch_s"] == 86400
    assert vk["epoch"] == int(time.time() // 86400) and len(bytes.fromhex(vk["key"])) == 32
    sk = json.loads(kf.read_text())
    assert sk["eagle_audit_key"] == "sealing" and sk["key"] == vk["key"] and sk["epoch"] == vk["epoch"]
    assert res.stderr.count("\n") == 1 and "keep it somewhere" in res.stderr


def test_init_key_never_overwrites_a_key_file(tmp_path):
    kf = tmp_path / "audit.key"
    kf.write_text("precious\n")
    res = eagle("audit", "init-key", str(kf))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "already exists" in res.stderr
    assert res.stdout == "" and kf.read_text() == "precious\n"


def test_a_key_file_readable_by_others_is_refused_with_one_sentence(keyed, tmp_path):
    cfg, kf, _ = keyed
    os.chmod(kf, 0o644)
    for argv in (("history",), ("audit", "verify")):
        res = eagle(*argv, config=cfg)
        assert res.returncode == 2, (argv, res.stderr)
        assert res.stderr.count("\n") == 1 and f"chmod 600 {kf}" in res.stderr


def test_every_entry_is_sealed_and_the_verification_key_checks_them_all(keyed):
    cfg, kf, vk = keyed
    res, doc = eagle_json("audit", "verify", "--key", str(vk), config=cfg)
    assert res.returncode == 0, res.stdout
    seals = doc["seals"]
    assert seals["key"] == "verification" and seals["sealed"] == doc["entries"] == seals["checked"]
    assert seals["unsealed_before_key"] == 0 and doc["ok"] and doc["intact"]
    text = eagle("audit", "verify", "--key", str(vk), config=cfg)
    assert text.returncode == 0 and f"{doc['entries']} seals checked" in text.stdout
    # without --key the configured sealing key checks the seals of its epoch
    res, doc = eagle_json("audit", "verify", config=cfg)
    assert res.returncode == 0 and doc["seals"]["key"] == "sealing" and doc["seals"]["checked"] == doc["entries"]


def test_a_database_sealed_under_another_key_fails(keyed, tmp_path):
    cfg, _, _ = keyed
    other, _ = _init_key(tmp_path / "other.key")
    (tmp_path / "other.verify").write_text(other)
    res, doc = eagle_json("audit", "verify", "--key", str(tmp_path / "other.verify"), config=cfg)
    assert res.returncode == 1
    assert "sealed under another key" in doc["first_broken"]["reason"]


def test_the_key_evolves_each_epoch_and_the_verification_key_checks_every_epoch(tmp_path, monkeypatch):
    monkeypatch.setenv(sealing.EPOCH_ENV, "1")  # tests only: one-second epochs
    kf = tmp_path / "audit.key"
    line, vk = _init_key(kf)
    (tmp_path / "verify.key").write_text(line)
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "audit_key_file": "audit.key"})
    store = Store(tmp_path / "eagle.db", key_file=kf)
    _write_some(store)
    time.sleep(1.1)
    _write_some(store)
    store.close()
    now = sealing.parse_key(kf.read_text(), "key file")
    assert now.epoch > vk.epoch and now.key != vk.key and now.key == vk.at(now.epoch).key  # the old key is gone
    assert os.stat(kf).st_mode & 0o777 == 0o600
    res, doc = eagle_json("audit", "verify", "--key", str(tmp_path / "verify.key"), config=cfg)
    assert res.returncode == 0 and doc["seals"]["checked"] == doc["entries"], doc["problems"]
    assert doc["seals"]["last_epoch"] > vk.epoch
    # the sealing file holds only today's key: it checks what it can and says what it could not
    res, doc = eagle_json("audit", "verify", "--key", str(kf), config=cfg)
    # (exit 4: intact as far as it could check, not verifiable without the verification key)
    assert res.returncode == 4 and doc["seals"]["unchecked"] > 0 and doc["seals"]["checked"] < doc["entries"]
    assert doc["intact"] and not doc["complete"]
    assert any("not checked" in n for n in doc["seals"]["notes"])


def test_entries_made_before_the_key_are_reported_unsealed(tmp_path):
    store = Store(tmp_path / "eagle.db")
    _write_some(store)
    store.close()
    kf = tmp_path / "audit.key"
    line, _ = _init_key(kf)
    (tmp_path / "verify.key").write_text(line)
    store = Store(tmp_path / "eagle.db", key_file=kf)
    _write_some(store)
    store.close()
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    res, doc = eagle_json("audit", "verify", "--key", str(tmp_path / "verify.key"), config=cfg)
    assert res.returncode == 0, doc["problems"]
    assert doc["seals"]["unsealed_before_key"] > 0 and doc["seals"]["sealed"] > 0
    assert any("unsealed (made before an audit key was configured)" in n for n in doc["seals"]["notes"])
    text = eagle("audit", "verify", "--key", str(tmp_path / "verify.key"), config=cfg)
    assert "unsealed" in text.stderr


def test_an_unsealed_entry_after_sealed_ones_is_a_break(keyed, tmp_path):
    cfg, kf, vk = keyed
    store = Store(tmp_path / "eagle.db")  # the key left out of the config: a downgrade
    _write_some(store)
    store.close()
    for argv in (("audit", "verify", "--key", str(vk)), ("audit", "verify")):
        res, doc = eagle_json(*argv, config=cfg)
        assert res.returncode == 1
        assert "unsealed entry after sealed ones" in doc["first_broken"]["reason"]


def test_verify_leaves_the_database_byte_identical(keyed, tmp_path):
    cfg, _, vk = keyed
    db = tmp_path / "eagle.db"
    files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
    # an edited row and dropped triggers: exactly what an opening eagle would "repair"
    import sqlite3

    conn = sqlite3.connect(db)
    conn.execute("drop trigger audit_chain_events_u")
    conn.execute("update events set message = 'nothing'")
    conn.commit()
    conn.close()

    def digest() -> dict[str, str | None]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None for p in files[:2]}

    before = digest()
    for argv in (("audit", "verify", "--key", str(vk)), ("audit", "verify", "--json"), ("audit", "head")):
        assert eagle(*argv, config=cfg).returncode in (0, 1)
    after = digest()
    # SQLite's reader may create an empty WAL (and its shared-memory index) next to the file;
    # not one frame is written, and the database file itself is byte for byte the same.
    if before[files[1].name] is None and after[files[1].name] == hashlib.sha256(b"").hexdigest():
        after[files[1].name] = None
    assert after == before
    assert not eagle("audit", "verify", config=cfg).returncode == 0  # and the edit is still there to see


def test_audit_head_prints_the_head_that_verify_accepts(keyed):
    cfg, _, vk = keyed
    res = eagle("audit", "head", config=cfg)
    assert res.returncode == 0
    head = res.stdout.strip()
    assert len(head) == 64 and f"--head {head}" in res.stderr
    res, doc = eagle_json("audit", "verify", "--head", head, "--key", str(vk), config=cfg)
    assert res.returncode == 0 and doc["anchor_seq"] == doc["head_seq"] and doc["seals"]["checked"] == doc["entries"]


def test_the_environment_names_the_key_file(tmp_path, monkeypatch):
    kf = tmp_path / "audit.key"
    _init_key(kf)
    monkeypatch.setenv("EAGLE_AUDIT_KEY_FILE", str(kf))
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    assert eagle("run", "hello", config=cfg).returncode == 0
    store = Store(tmp_path / "eagle.db", readonly=True)
    assert store.db.execute("select count(*) from audit_chain where seal is null").fetchone()[0] == 0
    store.close()


def test_doctor_warns_that_an_unkeyed_chain_is_not_proof_against_a_forger(tmp_path, keyed):
    cfg = write_yaml(tmp_path / "plain.yaml", {"audit_db": "plain.db", "hosts": {}})
    out = eagle("doctor", config=cfg)
    [line] = [ln for ln in (out.stdout + out.stderr).splitlines() if "audit key" in ln]
    assert line.startswith("WARN") and "unkeyed" in line and "eagle audit init-key" in line
    cfg, _, _ = keyed
    out = eagle("doctor", config=cfg)
    assert not [ln for ln in (out.stdout + out.stderr).splitlines() if "unkeyed" in ln]


_WRITER = """
import sys, time
from eaglebot.store import Store
store = Store(sys.argv[1], key_file=sys.argv[2])
end = time.monotonic() + float(sys.argv[3])
i = 0
while time.monotonic() < end:
    store.add_event(None, "note", f"{sys.argv[4]} {i}")
    i += 1
    time.sleep(0.01)
store.close()
"""


def test_two_processes_sealing_across_epochs_share_the_evolving_key(tmp_path, monkeypatch):
    """The bot and the CLI write the same DB with the same key file: the read-evolve-replace is
    serialised (a lock file), epochs never go backwards, every seal checks with key_0."""
    import subprocess
    import sys

    monkeypatch.setenv(sealing.EPOCH_ENV, "1")
    kf = tmp_path / "audit.key"
    line, vk = _init_key(kf)
    (tmp_path / "verify.key").write_text(line)
    db = tmp_path / "eagle.db"
    Store(db, key_file=kf).close()
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(db), str(kf), "2.5", name])
             for name in ("bot", "cli")]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    res, doc = eagle_json("audit", "verify", "--key", str(tmp_path / "verify.key"), config=cfg)
    assert res.returncode == 0, doc["problems"][:3]
    assert doc["seals"]["checked"] == doc["entries"] and doc["seals"]["last_epoch"] >= vk.epoch + 2
    store = Store(db, readonly=True)
    epochs = [e for (e,) in store.db.execute("select epoch from audit_chain order by seq")]
    store.close()
    assert epochs == sorted(epochs) and len(set(epochs)) >= 3
    assert sealing.parse_key(kf.read_text(), "k").epoch == epochs[-1]


def test_audit_backup_copies_the_db_with_its_chain_and_never_overwrites(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    assert eagle("run", "hello", "-H", "local", config=cfg).returncode == 0
    head = eagle("audit", "head", config=cfg).stdout.strip()
    res = eagle("audit", "backup", str(tmp_path / "copy.db"), "--json", config=cfg)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["hash"] == head and doc["file"] == str(tmp_path / "copy.db")
    copy_cfg = write_yaml(tmp_path / "copy.yaml", {"audit_db": "copy.db"})
    res, report = eagle_json("audit", "verify", "--head", head, config=copy_cfg)
    assert res.returncode == 0 and report["ok"]
    again = eagle("audit", "backup", str(tmp_path / "copy.db"), config=cfg)
    assert again.returncode == 2 and again.stderr.strip().endswith("exists; name a new file for the backup")


# -- key rotation (issue 46 item 6) ------------------------------------------------------------

def test_rotate_key_seals_the_handover_and_each_era_verifies_with_its_own_key(keyed, tmp_path):
    cfg, kf, vk1 = keyed
    db = tmp_path / "eagle.db"
    running = Store(db, key_file=kf)   # a process that holds the old key across the rotation (the bot)
    _write_some(running)
    res = eagle("audit", "rotate-key", config=cfg)
    assert res.returncode == 0, res.stderr
    vk2 = tmp_path / "verify-2.key"
    vk2.write_text(res.stdout)
    new = sealing.parse_key(res.stdout.strip(), "stdout")
    assert new.kind == "verification" and new.key != sealing.parse_key(vk1.read_text(), "vk1").key
    now = sealing.parse_key(kf.read_text(), "key file")
    assert now.key == new.at(now.epoch).key and now.started   # the file holds the new key, never a 'K' again
    assert "--key OLD --key NEW" in res.stderr
    _write_some(running)              # its next seal reads the replaced file
    running.close()
    later = Store(db, key_file=kf)
    _write_some(later)
    later.close()
    # both keys: every seal of both eras checked; the 'R' entry is where the key changed
    res, doc = eagle_json("audit", "verify", "--key", str(vk1), "--key", str(vk2), config=cfg)
    assert res.returncode == 0 and doc["complete"], doc["problems"]
    assert doc["seals"]["checked"] == doc["entries"] and len(doc["seals"]["rotations"]) == 1
    # one era's key only, or the sealing file only: intact as far as checked, not verifiable (exit 4)
    for argv in (("--key", str(vk1)), ("--key", str(vk2)), ()):
        res, doc = eagle_json("audit", "verify", *argv, config=cfg)
        assert res.returncode == 4 and doc["intact"] and doc["seals"]["unkeyed"] > 0, (argv, doc["seals"])
    # whoever kept the OLD key cannot seal anything after the handover
    old = sealing.parse_key(vk1.read_text(), "vk1")
    conn = sqlite3.connect(db)
    conn.execute("insert into events (run_id, at, kind, message) values (1, '2026-01-01T00:00:00Z', 'note', 'forged')")
    seq, tbl, row_id, op, at, content = conn.execute(
        "select seq, tbl, row_id, op, at, content from audit_chain order by seq desc limit 1").fetchone()
    prev = conn.execute("select hash from audit_chain where seq < ? order by seq desc limit 1", [seq]).fetchone()[0]
    csha = chain.sha_text(content)
    h = chain.link_hash(prev, seq, tbl, row_id, op, at, csha)
    k = old.at(now.epoch)
    conn.execute("update audit_chain set content = null, content_sha256 = ?, prev_hash = ?, hash = ?, epoch = ?, "
                 "seal = ? where seq = ?", [csha, prev, h, k.epoch, sealing.seal_mac(k.key, k.epoch, h), seq])
    conn.commit()
    conn.close()
    res, doc = eagle_json("audit", "verify", "--key", str(vk1), "--key", str(vk2), config=cfg)
    assert res.returncode == 1 and doc["first_broken"]["seq"] == seq
    assert "the seal does not match" in doc["first_broken"]["reason"]


def test_rotate_key_without_a_key_is_one_sentence(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    Store(tmp_path / "eagle.db").close()
    res = eagle("audit", "rotate-key", config=cfg)
    assert res.returncode == 2 and "no audit key to rotate" in res.stderr
