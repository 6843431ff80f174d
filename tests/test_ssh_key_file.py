"""A missing or unreadable SSH key file is the config's mistake, not a dead host (issue 34 item
5): one sentence naming its config path and the file, exit 2 (bad usage, as an unknown host:
the fix is in eagle.yaml), before any connection is tried; it read `host gpu-01 is unreachable
... after 4 tries: No such file or directory` (exit 4, ~4 s of retries). Over the real sshd."""
from __future__ import annotations

import os
import shutil

import pytest
import sqlite_utils
from support.helpers import write_yaml
from support.inproc import eagle_here

from eaglebot.config import load_settings
from eaglebot.errors import TransportError
from eaglebot.transport import TransportPool


def _cfg(tmp_path, sshd, **host):
    return write_yaml(tmp_path / "eagle.yaml", {"audit_db": "eagle.db", "hosts": {
        "gpu-01": sshd.host_config(**host), "gpu-02": sshd.host_config(jump="gpu-01")}})


def test_a_missing_key_file_is_one_sentence_with_its_config_path_and_exit_2(tmp_path, sshd):
    missing = tmp_path / "keys" / "id_ed2551"
    cfg = _cfg(tmp_path, sshd, key=str(missing))
    res = eagle_here("run", "hello", "-H", "gpu-01", config=cfg)
    assert res.returncode == 2
    assert res.stderr == (f"eagle: host gpu-01: the SSH key hosts.gpu-01.key = {missing} does not exist; fix the "
                          f"path in eagle.yaml, or remove it to use the SSH agent\n")
    db = sqlite_utils.Database(tmp_path / "eagle.db")
    assert list(db.query("select count(*) n from runs")) == [{"n": 0}]    # refused before a run row
    assert "does not exist" in next(db.query("select reason from events where kind = 'rejected'"))["reason"]
    # through a jump host whose key is missing: the same, naming the jump host
    via = eagle_here("run", "hello", "-H", "gpu-02", config=cfg)
    assert via.returncode == 2 and via.stderr.startswith(
        f"eagle: host gpu-02: the SSH key of its jump host gpu-01, hosts.gpu-01.key = {missing}, does not exist;")
    doctor = eagle_here("doctor", config=cfg)
    assert (f"FAIL  host gpu-01: the SSH key hosts.gpu-01.key = {missing} does not exist; fix the path in "
            f"eagle.yaml, or remove it to use the SSH agent") in doctor.stdout.splitlines()


def test_a_key_from_host_defaults_is_named_there_and_a_relative_key_is_the_config_folders(tmp_path, sshd):
    own = sshd.host_config()
    key = own.pop("key")
    cfg = write_yaml(tmp_path / "eagle.yaml", {"host_defaults": {"key": "keys/id_ed25519"}, "hosts": {"gpu-01": own}})
    res = eagle_here("run", "hello", "-H", "gpu-01", config=cfg, cwd=tmp_path.parent)
    assert res.returncode == 2 and (f"the SSH key host_defaults.key = {tmp_path / 'keys' / 'id_ed25519'} does "
                                    f"not exist") in res.stderr
    (tmp_path / "keys").mkdir()
    shutil.copy(key, tmp_path / "keys" / "id_ed25519")
    os.chmod(tmp_path / "keys" / "id_ed25519", 0o600)
    # run from another folder: the relative key is found next to eagle.yaml, and the run logs in with it
    ok = eagle_here("run", "hello", "-H", "gpu-01", config=cfg, cwd=tmp_path.parent)
    assert ok.returncode == 0, ok.stderr


def test_a_key_path_that_is_a_folder_is_named_so(tmp_path, sshd):
    folder = tmp_path / "keys"
    folder.mkdir()
    res = eagle_here("run", "hello", "-H", "gpu-01", config=_cfg(tmp_path, sshd, key=str(folder)))
    assert res.returncode == 2 and f"the SSH key hosts.gpu-01.key = {folder} is not a file;" in res.stderr


async def test_the_transport_refuses_a_missing_key_without_a_connect_try(tmp_path, sshd):
    """Whoever connects without the engine's pre-flight (the health watch) gets one sentence at once."""
    settings = load_settings(_cfg(tmp_path, sshd, key=str(tmp_path / "nope"), connect_retries=3))
    pool = TransportPool(settings)
    try:
        t = pool.get("gpu-01")
        with pytest.raises(TransportError, match="the SSH key .*nope does not exist or is not readable"):
            await t.connect()
        assert t.connect_tries == 0
    finally:
        await pool.close()


def test_a_key_file_that_is_not_a_key_and_a_garbage_known_hosts_are_one_sentence(tmp_path, sshd):
    """`key: /etc/passwd` and a known_hosts file that is not one (issue 46, LOW): the host's steps
    fail with a sentence naming the file, never `internal error: UnboundLocalError`."""
    cfg = _cfg(tmp_path, sshd, key="/etc/passwd")
    res = eagle_here("run", "hello", "-H", "gpu-01", config=cfg)
    assert res.returncode == 1 and "internal error" not in res.stderr + res.stdout
    assert "the SSH key /etc/passwd is not a private key asyncssh can read" in res.stderr + res.stdout
    garbage = tmp_path / "known_hosts"
    garbage.write_bytes(b"\xff\xfe not a known_hosts file\n")
    cfg = _cfg(tmp_path, sshd, known_hosts=str(garbage))
    res = eagle_here("run", "hello", "-H", "gpu-01", config=cfg)
    assert res.returncode == 1 and "internal error" not in res.stderr + res.stdout
    assert f"known_hosts file {garbage} cannot be read" in res.stderr + res.stdout
