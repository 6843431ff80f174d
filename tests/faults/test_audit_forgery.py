"""An attacker with write access to the audit DB file (and, later, a stolen sealing key)
against the chain: drop the triggers, edit a row, add a column, append correctly hashed
entries, seal them with a later epoch's key. Each is a break `eagle audit verify` names, and
no eagle command re-seals the edit as genuine (issue 17)."""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from support.helpers import eagle, write_yaml
from support.inproc import eagle_here, eagle_here_json

from eaglebot.store import Store
from eaglebot.store import chain, sealing


def _edit(db: Path, *statements: str, drop_triggers: bool = False) -> None:
    """Change the DB as another program would (the sqlite3 shell), triggers dropped first if asked."""
    conn = sqlite3.connect(db)
    if drop_triggers:
        for (name,) in conn.execute("select name from sqlite_master where type = 'trigger'").fetchall():
            conn.execute(f'drop trigger "{name}"')
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


@pytest.fixture
def ran(tmp_path) -> tuple[Path, Path]:
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db"})
    res = eagle("run", "hello", "-H", "local", config=cfg)  # a real `eagle run` process
    assert res.returncode == 0, res.stderr
    return cfg, tmp_path / "eagle.db"


def test_dropped_triggers_an_edit_and_an_added_column_are_named_and_never_resealed(ran):
    """The reproduction of issue 17, through the real CLI: before, the next command re-snapshotted
    the edited row and verify said intact."""
    cfg, db = ran
    head = eagle("audit", "head", config=cfg).stdout.strip()  # posted to Slack before the edit
    _edit(db, "update runs set actor = 'mallory' where id = 1", "alter table runs add column x text",
          drop_triggers=True)
    res = eagle("audit", "verify", config=cfg)
    assert res.returncode == 1
    assert res.stdout.startswith("audit chain broken at table `runs`: schema of `runs` changed outside a migration")
    assert eagle("audit", "verify", "--head", head, config=cfg).returncode == 1
    assert eagle("history", config=cfg).returncode == 0  # a normal command puts the triggers back ...
    res = eagle("audit", "verify", "--json", config=cfg)
    doc = json.loads(res.stdout)
    assert res.returncode == 1 and doc["first_broken"]["table"] == "runs"  # ... and blesses nothing
    reasons = [p["message"] for p in doc["problems"]]
    assert any("runs row 1" in r and "edited without trace" in r for r in reasons)
    assert any("chain triggers of `runs` were dropped" in r for r in reasons)
    assert not sqlite3.connect(db).execute("select 1 from audit_chain where op in ('S', 'C') and seq > 3").fetchone()


def test_a_dropped_trigger_alone_is_a_break(ran):
    cfg, db = ran
    _edit(db, "drop trigger audit_chain_steps_u")
    res, doc = eagle_here_json("audit", "verify", config=cfg)
    assert res.returncode == 1
    assert doc["first_broken"]["table"] == "steps"
    assert "trigger audit_chain_steps_u missing" in doc["first_broken"]["reason"]
    Store(db).close()  # an ordinary open reinstalls it for new rows, and says so in the chain
    res, doc = eagle_here_json("audit", "verify", config=cfg)
    assert res.returncode == 1 and "were dropped or altered" in doc["first_broken"]["reason"]


def test_an_altered_trigger_is_a_break(ran):
    cfg, db = ran
    _edit(db, "drop trigger audit_chain_events_i",
          "create trigger audit_chain_events_i after insert on events begin select 1; end")
    res, doc = eagle_here_json("audit", "verify", config=cfg)
    assert res.returncode == 1 and "trigger audit_chain_events_i altered" in doc["first_broken"]["reason"]


def test_an_added_column_alone_is_a_break(ran):
    cfg, db = ran
    _edit(db, "alter table metrics add column note text")
    for _ in range(2):  # before and after an ordinary command opened the DB
        res = eagle_here("audit", "verify", config=cfg)
        assert res.returncode == 1
        assert "schema of `metrics` changed outside a migration (column(s) added: note)" in res.stdout
        assert eagle_here("history", config=cfg).returncode == 0


# -- forgers ------------------------------------------------------------------------------------

def _forge_event(db: Path, message: str, *, seal_with: sealing.AuditKey | None = None,
                 epoch: int | None = None, dated: str | None = None) -> int:
    """Append an event row and a correctly hashed chain entry for it, as eaglebot would; seal it
    with `seal_with` (claiming `epoch`) when given, and date it `dated` when given. Returns the entry's seq."""
    conn = sqlite3.connect(db)
    conn.execute("insert into events (run_id, at, kind, message) values (1, '2026-01-01T00:00:00Z', 'note', ?)",
                 [message])  # the trigger appends the unsealed entry
    seq, tbl, row_id, op, at, content = conn.execute(
        "select seq, tbl, row_id, op, at, content from audit_chain order by seq desc limit 1").fetchone()
    prev = conn.execute("select hash from audit_chain where seq < ? order by seq desc limit 1", [seq]).fetchone()[0]
    at = dated or at
    csha = chain.sha_text(content)
    h = chain.link_hash(prev, seq, tbl, row_id, op, at, csha)
    seal = None
    if seal_with is not None:
        assert epoch is not None
        seal = sealing.seal_mac(seal_with.key, epoch, h)
    conn.execute("update audit_chain set content = null, content_sha256 = ?, prev_hash = ?, hash = ?, epoch = ?, "
                 "seal = ?, at = ? where seq = ?", [csha, prev, h, epoch, seal, at, seq])
    conn.commit()
    conn.close()
    return seq


@pytest.fixture
def keyed(tmp_path) -> tuple[Path, Path, Path, Path]:
    tmp_path = tmp_path / "keyed"
    tmp_path.mkdir()
    kf = tmp_path / "audit.key"
    vline = eagle_here("audit", "init-key", str(kf)).stdout
    vk = tmp_path / "verify.key"
    vk.write_text(vline)
    cfg = write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "audit_key_file": "audit.key"})
    res = eagle("run", "hello", "-H", "local", config=cfg)
    assert res.returncode == 0, res.stderr
    return cfg, tmp_path / "eagle.db", kf, vk


def test_an_unkeyed_forger_is_intact_without_a_key_and_caught_with_one(ran, keyed):
    # Unkeyed: a correctly hashed forged entry is indistinguishable (the doctor warns of this).
    cfg, db = ran
    _forge_event(db, "forged")
    assert eagle_here("audit", "verify", config=cfg).returncode == 0
    # Keyed: the same forgery has no seal (or a made-up one) and is named.
    cfg, db, kf, vk = keyed
    seq = _forge_event(db, "forged")
    for argv in (("--key", str(vk)), ()):
        res, doc = eagle_here_json("audit", "verify", *argv, config=cfg)
        assert res.returncode == 1 and doc["first_broken"]["seq"] == seq
        assert "unsealed entry after sealed ones" in doc["first_broken"]["reason"]


def test_a_forged_entry_with_a_made_up_seal_is_caught(keyed):
    cfg, db, kf, vk = keyed
    mine = sealing.AuditKey("sealing", 0, 86400, b"\x01" * 32)
    epoch = sealing.parse_key(kf.read_text(), "k").epoch
    seq = _forge_event(db, "forged", seal_with=mine.at(epoch), epoch=epoch)
    res, doc = eagle_here_json("audit", "verify", "--key", str(vk), config=cfg)
    assert res.returncode == 1 and doc["first_broken"]["seq"] == seq
    assert "the seal does not match" in doc["first_broken"]["reason"]


def test_an_entry_forged_with_a_later_epochs_key_for_an_earlier_epoch_is_caught(keyed):
    """Whoever steals the sealing key on day n+1 holds only key_{n+1}: an entry (or a rewrite)
    claiming day n cannot be sealed."""
    cfg, db, kf, vk = keyed
    day_n = sealing.parse_key(kf.read_text(), "k").epoch
    stolen = sealing.Sealer(kf).key_for(min_epoch=day_n + 1)  # the file evolves to day n+1
    assert stolen.epoch == day_n + 1 and sealing.parse_key(kf.read_text(), "k").epoch == day_n + 1
    seq = _forge_event(db, "forged yesterday", seal_with=stolen, epoch=day_n)
    res, doc = eagle_here_json("audit", "verify", "--key", str(vk), config=cfg)
    assert res.returncode == 1 and doc["first_broken"]["seq"] == seq
    assert f"does not match the key of epoch {day_n}" in doc["first_broken"]["reason"]


def test_an_entry_of_an_earlier_day_resealed_under_the_stolen_days_epoch_is_caught(keyed):
    """Labelled honestly with the stolen key's epoch, an entry written (by its time) the day
    before does not fit: rewriting yesterday means claiming it happened today."""
    cfg, db, kf, vk = keyed
    day_n = sealing.parse_key(kf.read_text(), "k").epoch
    stolen = sealing.Sealer(kf).key_for(min_epoch=day_n + 1)
    # Its time is day n, early in the day: written in the last hour of a day, an entry may claim the
    # next day's epoch (the check allows an hour of clock slack), so "now" would make this test
    # depend on when it runs.
    epoch_s = sealing.parse_key(kf.read_text(), "k").epoch_s
    early = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(day_n * epoch_s + 600))
    seq = _forge_event(db, "rewritten", seal_with=stolen, epoch=day_n + 1, dated=early)
    res, doc = eagle_here_json("audit", "verify", "--key", str(vk), config=cfg)
    assert res.returncode == 1 and doc["first_broken"]["seq"] == seq
    assert f"sealed for epoch {day_n + 1} but written at" in doc["first_broken"]["reason"]


def test_epochs_going_backwards_along_the_chain_are_a_break(keyed):
    cfg, db, kf, vk = keyed
    day_n = sealing.parse_key(kf.read_text(), "k").epoch
    key = sealing.parse_key(vk.read_text(), "vk")
    conn = sqlite3.connect(db)
    last = conn.execute("select max(seq) from audit_chain").fetchone()[0]
    conn.execute("update audit_chain set epoch = ?, seal = null where seq = ?", [day_n + 1, last - 1])
    conn.commit()
    conn.close()
    h = sqlite3.connect(db).execute("select hash from audit_chain where seq = ?", [last - 1]).fetchone()[0]
    conn = sqlite3.connect(db)
    conn.execute("update audit_chain set seal = ? where seq = ?", [sealing.seal_mac(key.at(day_n + 1).key, day_n + 1, h),
                                                                    last - 1])
    conn.commit()
    conn.close()
    res, doc = eagle_here_json("audit", "verify", "--key", str(vk), config=cfg)
    assert res.returncode == 1
    backwards = [p for p in doc["problems"] if "the epoch goes backwards" in p["reason"]]
    assert [p["seq"] for p in backwards] == [last]


@pytest.mark.parametrize("table, edit", [
    ("remote_procs", "update remote_procs set state = 'cleaned' where id = 1"),
    ("schedule_fires", "update schedule_fires set status = 'started' where id = 1"),
    ("run_hosts", "delete from run_hosts where run_id = 1"),
    ("meta", "update meta set value = 'forged' where key = 'db_id'"),
])
def test_tables_that_were_not_chained_before_are_chained_now(ran, table, edit):
    """`remote_procs`, `schedule_fires`, `run_hosts` and `meta` were outside the chain: an
    edit there (by another program, triggers left in place or dropped) is a break now."""
    cfg, db = ran
    store = Store(db)
    try:
        step_id = store.db.execute("select id from steps where run_id = 1 order by id limit 1").fetchone()[0]
        store.procs_record(1, step_id, "local", tag="t-1-1", state="pending", note="left", pgids=[4242])
        store.record_fire("nightly", "2026-12-01T03:00:00Z", "missed")
    finally:
        store.close()
    assert eagle_here("audit", "verify", config=cfg).returncode == 0
    _edit(db, edit, drop_triggers=True)
    res, report = eagle_here_json("audit", "verify", config=cfg)
    assert res.returncode == 1 and not report["ok"]
    assert report["first_broken"]["table"] == table or any(p["table"] == table for p in report["problems"])


def test_a_rewrite_of_a_day_the_sealing_key_has_left_behind_is_not_verifiable_without_the_verification_key(keyed):
    """The K6 rewrite (issue 46 item 6): with only the evolved sealing key on the host, an entry
    of an earlier epoch forged with a made-up seal of its own epoch cannot be checked. `verify`
    says so (exit 4, not 0 "intact"), doctor warns, and the verification key names the forgery."""
    cfg, db, kf, vk = keyed
    day_n = sealing.parse_key(kf.read_text(), "k").epoch
    mine = sealing.AuditKey("sealing", 0, 86400, b"\x02" * 32)
    seq = _forge_event(db, "rewritten", seal_with=mine.at(day_n), epoch=day_n)
    sealing.Sealer(kf).key_for(min_epoch=day_n + 1)   # the key file evolves: day n's key is gone
    res, doc = eagle_here_json("audit", "verify", config=cfg)
    assert res.returncode == 4 and doc["intact"] and not doc["complete"] and doc["seals"]["unchecked"] > 0
    res = eagle_here("audit", "verify", config=cfg)
    assert res.returncode == 4 and "not verifiable without the verification key" in res.stdout
    doctor = eagle_here("doctor", config=cfg)
    line = next(x for x in doctor.stdout.splitlines() if "audit chain:" in x)
    assert line.startswith("WARN") and "not verifiable without the verification key" in line
    res, doc = eagle_here_json("audit", "verify", "--key", str(vk), config=cfg)
    assert res.returncode == 1 and doc["first_broken"]["seq"] == seq
