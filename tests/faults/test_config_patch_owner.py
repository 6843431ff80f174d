"""config.patch keeps the owner, group and mode of the file it rewrites, or refuses with one
sentence before anything is written (issue 17: root's 0644 config in a folder the SSH user
may write used to be replaced and handed to the SSH user).

Locally the patch runs as the unprivileged test user (`eagletest`, from tests/support/sshd.py) through
the real CLI; over SSH the real sshd logs in as that same user. Tests run as root (CI does), so
they can give a file to root or to a group the test user is not in."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from eaglebot.engine.runner import RunRequest
from support.gpu_helpers import playbook
from support.sshd import TEST_USER, chown_to, ensure_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="giving files to other users needs root")

ORIGINAL = b'{"a": 1}\n'
BOOT = ("import runpy, site, sys; site.addsitedir(sys.argv.pop(1)); sys.argv[0] = 'eagle'; "
        "runpy.run_module('eaglebot', run_name='__main__', alter_sys=True)")


def _python_for(user: str) -> str:
    """An interpreter the test user may execute (a pyenv Python under /root is not one) and that
    can import eaglebot as that user; it reads this environment's site-packages, so it must be
    the same minor version."""
    minor = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for exe in (sys.executable, f"/usr/bin/{minor}", f"/usr/local/bin/{minor}"):
        try:
            if os.path.exists(exe) and subprocess.run([exe, "-c", "pass"], user=user,
                                                      capture_output=True).returncode == 0:
                _importable_by(user, exe)
                return exe
        except PermissionError:
            continue
    pytest.skip(f"no {minor} that {user} may run")


def _importable_by(user: str, exe: str) -> None:
    """Skip, saying why, when the test user cannot import eaglebot from this checkout: an
    editable install points into the source tree, and a clone the user cannot read (a 0700
    home, a 0700 clone) would fail these tests with ImportError instead."""
    boot = ("import site, sys; site.addsitedir(sys.argv[1]); import eaglebot.frontends.cli.main, "
            "eaglebot.transport.local")
    res = subprocess.run([exe, "-c", boot, sysconfig.get_paths()["purelib"]], user=user, group=user, extra_groups=[],
                         cwd="/", capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["exit status " + str(res.returncode)])[-1]
        source = Path(__file__).resolve().parents[2]
        pytest.skip(f"the test user {user} cannot import eaglebot from {source} ({last}); the tests run the "
                    f"CLI as that user, so the checkout must be readable by it (not a 0700 clone)")


@pytest.fixture
def work() -> Iterator[Path]:
    """A folder the test user owns (the config's folder): it may create and rename files in it."""
    ensure_user()
    d = Path("/tmp") / f"eagle-owner-{os.getpid()}-{os.urandom(4).hex()}"
    d.mkdir()
    os.chmod(d, 0o755)
    chown_to(d)
    (d / "books").mkdir()
    (d / "books" / "patch.yaml").write_text(yaml.safe_dump({
        "name": "patch", "inputs": {"path": {"type": "str"}},
        "steps": [{"skill": "config.patch", "with": {"path": "{{ path }}", "set": {"a": 2}}}]}))
    (d / "eagle.yaml").write_text(yaml.safe_dump({"audit_db": "eagle.db", "playbooks_dir": "books"}))
    chown_to(d)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _as_user(work: Path, *args: str) -> subprocess.CompletedProcess:
    exe = _python_for(TEST_USER)
    env = {k: v for k, v in os.environ.items() if k not in ("EAGLE_CONFIG", "HOME")}
    env["HOME"] = str(work)
    return subprocess.run([exe, "-c", BOOT, sysconfig.get_paths()["purelib"], *args, "--config", str(work / "eagle.yaml")],
                          user=TEST_USER, group=TEST_USER, extra_groups=[], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60)


def _file(work: Path, uid: int, gid: int, mode: int = 0o644) -> tuple[Path, os.stat_result]:
    f = work / "config.json"
    f.write_bytes(ORIGINAL)
    os.chown(f, uid, gid)
    os.chmod(f, mode)
    return f, f.stat()


def _untouched(f: Path, before: os.stat_result) -> None:
    now = f.stat()
    assert f.read_bytes() == ORIGINAL
    assert (now.st_ino, now.st_uid, now.st_gid, now.st_mode) == (before.st_ino, before.st_uid, before.st_gid,
                                                                 before.st_mode)
    assert [p.name for p in f.parent.iterdir() if p.name.startswith((".config.json", "config.json."))] == []


def test_local_patch_of_roots_file_by_another_user_is_refused_and_nothing_replaced(work):
    f, before = _file(work, 0, 0)
    res = _as_user(work, "run", "patch", "-e", f"path={f}")
    assert res.returncode == 1, res.stderr
    assert f"cannot patch {f}: it belongs to root and would become {TEST_USER}'s; patch it as its owner" in res.stderr
    assert "Traceback" not in res.stderr
    _untouched(f, before)


def test_local_patch_by_the_owner_outside_the_files_group_is_refused(work):
    f, before = _file(work, pwd.getpwnam(TEST_USER).pw_uid, 0)
    res = _as_user(work, "run", "patch", "-e", f"path={f}")
    assert res.returncode == 1, res.stderr
    assert f"cannot patch {f}: its group is root and would become {TEST_USER}'s" in res.stderr
    _untouched(f, before)


def test_local_patch_by_the_owner_keeps_owner_group_and_mode(work):
    pw = pwd.getpwnam(TEST_USER)
    f, before = _file(work, pw.pw_uid, pw.pw_gid, 0o640)
    res = _as_user(work, "run", "patch", "-e", f"path={f}")
    assert res.returncode == 0, res.stderr
    now = f.stat()
    assert json.loads(f.read_text()) == {"a": 2} and now.st_ino != before.st_ino
    assert (now.st_uid, now.st_gid, now.st_mode & 0o7777) == (pw.pw_uid, pw.pw_gid, 0o640)


def test_the_local_transport_refuses_to_hand_a_file_to_another_user(work):
    """The transport's own guard (config.revert and every other writer go through it)."""
    f, before = _file(work, 0, 0)
    code = ("import sys; from eaglebot.transport.local import atomic_write_local\n"
            "try:\n    atomic_write_local(sys.argv[1], b'{}', None)\nexcept PermissionError as e:\n"
            "    print(e.strerror); sys.exit(3)")
    exe = _python_for(TEST_USER)
    boot = f"import site, sys; site.addsitedir({sysconfig.get_paths()['purelib']!r}); " + "exec(sys.argv.pop(1))"
    res = subprocess.run([exe, "-c", boot, code, str(f)], user=TEST_USER, group=TEST_USER, extra_groups=[],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 3, res.stderr
    assert res.stdout.strip() == f"it belongs to root and would become {TEST_USER}'s; write it as its owner"
    _untouched(f, before)


def test_local_patch_as_root_keeps_another_users_file_theirs(work, tmp_path):
    nobody = pwd.getpwnam("nobody")
    f, before = _file(work, nobody.pw_uid, nobody.pw_gid, 0o604)
    from support.helpers import eagle
    res = eagle("run", "patch", "-e", f"path={f}", config=work / "eagle.yaml", cwd=work)
    assert res.returncode == 0, res.stderr
    now = f.stat()
    assert json.loads(f.read_text()) == {"a": 2}
    assert (now.st_uid, now.st_gid, now.st_mode & 0o7777) == (nobody.pw_uid, nobody.pw_gid, 0o604)


async def _patch_over_ssh(services, sshd, path: Path):
    svc = await services({"gpu": sshd.host_config()})
    book = playbook(json.dumps({"name": "one", "steps": [{"skill": "config.patch",
                                                           "with": {"path": str(path), "set": {"a": 2}}}]}))
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["gpu"]))
    return svc, out.steps[0]


async def test_ssh_patch_of_roots_file_is_refused_and_nothing_replaced(services, sshd, remote_dir):
    f, before = _file(remote_dir, 0, 0)
    svc, st = await _patch_over_ssh(services, sshd, f)
    assert st.status == "failed"
    assert st.summary == f"cannot patch {f}: it belongs to root and would become {sshd.user}'s; patch it as its owner"
    _untouched(f, before)
    # the transport's own guard, under the skill's check
    with pytest.raises(OSError, match=f"it belongs to root and would become {sshd.user}'s; write it as its owner"):
        await svc.pool.get("gpu").write_file(str(f), b"{}")
    _untouched(f, before)


async def test_ssh_patch_by_the_owner_outside_the_files_group_is_refused(services, sshd, remote_dir):
    f, before = _file(remote_dir, pwd.getpwnam(sshd.user).pw_uid, 0)
    svc, st = await _patch_over_ssh(services, sshd, f)
    assert st.status == "failed" and f"its group is root and would become {sshd.user}'s" in st.summary
    with pytest.raises(OSError, match="its group is root"):
        await svc.pool.get("gpu").write_file(str(f), b"{}")
    _untouched(f, before)


async def test_ssh_patch_by_the_owner_keeps_owner_group_and_mode(services, sshd, remote_dir):
    pw = pwd.getpwnam(sshd.user)
    f, before = _file(remote_dir, pw.pw_uid, pw.pw_gid, 0o600)
    svc, st = await _patch_over_ssh(services, sshd, f)
    assert st.status == "changed", st.summary
    now = f.stat()
    assert json.loads(f.read_text()) == {"a": 2}
    assert (now.st_uid, now.st_gid, now.st_mode & 0o7777) == (pw.pw_uid, pw.pw_gid, 0o600)


async def test_ssh_revert_of_a_file_since_given_to_root_is_refused(services, sshd, remote_dir):
    pw = pwd.getpwnam(sshd.user)
    f, _ = _file(remote_dir, pw.pw_uid, pw.pw_gid)
    svc, st = await _patch_over_ssh(services, sshd, f)
    assert st.status == "changed", st.summary
    os.chown(f, 0, 0)
    patched, before = f.read_bytes(), f.stat()
    book = playbook(json.dumps({"name": "rev", "steps": [{"skill": "config.revert", "with": {"path": str(f)}}]}))
    out = await svc.engine.run(RunRequest(playbook=book, hosts=["gpu"]))
    assert out.steps[0].status == "failed"
    assert out.steps[0].summary == (f"cannot revert {f}: it belongs to root and would become {sshd.user}'s; "
                                    f"revert it as its owner")
    now = f.stat()
    assert f.read_bytes() == patched and (now.st_ino, now.st_uid) == (before.st_ino, 0)
