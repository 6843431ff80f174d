"""`eagle hosts pin HOST`: the key a real sshd on loopback presents (directly and through a jump
host), shown as `ssh-keygen -lf` shows it, and written to known_hosts only when asked for and
only when no other key is pinned there."""
from __future__ import annotations

import os
import pty
import select
import stat
import subprocess
import sys
from pathlib import Path

import yaml

from support.helpers import write_yaml
from support.sshd import free_port

from eaglebot.frontends.cli.main import main
from eaglebot.store import Store

EAGLE = str(Path(sys.executable).parent / "eagle")


def keygen_fingerprint(pub: Path) -> str:
    """What OpenSSH itself says the key's fingerprint is."""
    out = subprocess.run(["ssh-keygen", "-lf", str(pub)], check=True, capture_output=True, text=True).stdout
    return out.split()[1]


def config(tmp_path: Path, sshd, known: Path, **hosts: dict) -> str:
    data = {"audit_db": str(tmp_path / "eagle.db"),
            "hosts": {"gpu": sshd.host_config(known_hosts=str(known)), **hosts}}
    return str(write_yaml(tmp_path / 'eagle.yaml', data))


def test_pin_shows_the_keygen_fingerprint_and_writes_known_hosts_that_a_run_then_trusts(tmp_path, sshd, capsys):
    known = tmp_path / "new-ssh-dir" / "known_hosts"
    cfg = config(tmp_path, sshd, known)
    assert main(["--config", cfg, "run", "hello", "-H", "gpu"]) == 1      # not pinned: refused
    capsys.readouterr()

    assert main(["--config", cfg, "hosts", "pin", "gpu", "--yes"]) == 0
    out = capsys.readouterr().out
    fp = keygen_fingerprint(sshd.root / "host_ed25519.pub")
    assert f"presents ssh-ed25519 key {fp}" in out
    assert stat.S_IMODE(known.stat().st_mode) == 0o600
    assert stat.S_IMODE(known.parent.stat().st_mode) == 0o700
    host_type, host_b64 = sshd.host_pub.split()
    assert known.read_text() == f"[127.0.0.1]:{sshd.port} {host_type} {host_b64}\n"
    # OpenSSH reads the line as we wrote it
    found = subprocess.run(["ssh-keygen", "-F", f"[127.0.0.1]:{sshd.port}", "-f", str(known)],
                           capture_output=True, text=True)
    assert found.returncode == 0 and host_b64 in found.stdout

    assert main(["--config", cfg, "run", "hello", "-H", "gpu"]) == 0
    assert main(["--config", cfg, "hosts", "pin", "gpu", "--yes"]) == 0
    assert "already pinned" in capsys.readouterr().out
    assert known.read_text().count("\n") == 1

    events = Store(tmp_path / "eagle.db", readonly=True).events("host_key_pinned")
    assert len(events) == 1 and fp in events[0]["message"]


def test_pin_refuses_a_host_whose_pinned_key_differs_and_changes_nothing(tmp_path, sshd, capsys):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    before = f"# ops\n[127.0.0.1]:{sshd.port} {' '.join((tmp_path / 'other.pub').read_text().split()[:2])}"
    known.write_text(before)   # no final newline: still not touched
    cfg = config(tmp_path, sshd, known)
    assert main(["--config", cfg, "hosts", "pin", "gpu", "--yes"]) == 1
    captured = capsys.readouterr()
    assert "REFUSED" in captured.err and "DIFFERENT key" in captured.err and "man in the middle" in captured.err
    assert keygen_fingerprint(sshd.root / "host_ed25519.pub") in captured.err
    assert known.read_text() == before


def test_pin_refuses_a_host_that_offers_no_key_of_the_pinned_type(tmp_path, sshd, capsys):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    before = f"[127.0.0.1]:{sshd.port} {' '.join((tmp_path / 'other.pub').read_text().split()[:2])}\n"
    known.write_text(before)
    cfg = config(tmp_path, sshd, known)
    assert main(["--config", cfg, "hosts", "pin", "gpu", "--yes"]) == 1
    err = capsys.readouterr().err
    assert "REFUSED" in err and "DIFFERENT key" in err
    assert keygen_fingerprint(sshd.root / "host_ed25519.pub") in err
    assert known.read_text() == before


def test_pin_through_a_jump_host_and_appends_after_other_hosts_lines(tmp_path, sshd, capsys):
    known = tmp_path / "known_hosts"
    known.write_text("example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDcxT6yQx6rSPb2FpQ6Bq1oZy3s6V1hQnW3t0kq3Xv5c")
    cfg = config(tmp_path, sshd, known, bastion=sshd.host_config())   # the bastion pinned in the sshd's own file
    data_path = Path(cfg)
    data = yaml.safe_load(data_path.read_text())
    data["hosts"]["gpu"]["jump"] = "bastion"
    data_path.write_text(yaml.safe_dump(data))
    assert main(["--config", cfg, "hosts", "pin", "gpu", "--yes"]) == 0
    assert "via bastion" in capsys.readouterr().out
    lines = known.read_text().splitlines()
    assert lines[0].startswith("example.org ") and lines[1] == f"[127.0.0.1]:{sshd.port} {sshd.host_pub}"
    assert main(["--config", cfg, "run", "hello", "-H", "gpu"]) == 0


def test_pin_without_a_terminal_needs_yes_and_a_down_host_is_one_line(tmp_path, sshd):
    known = tmp_path / "known_hosts"
    cfg = config(tmp_path, sshd, known,
                 down={"address": "127.0.0.1", "port": free_port(), "known_hosts": str(known), "connect_timeout_s": 2})
    res = subprocess.run([EAGLE, "--config", cfg, "hosts", "pin", "gpu"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    # the fingerprint is shown without a terminal too: that is what the user checks before --yes
    fp = keygen_fingerprint(sshd.root / "host_ed25519.pub")
    assert res.returncode == 2 and f"presents ssh-ed25519 key {fp}" in res.stdout, res
    assert res.stderr.strip().splitlines() == [
        "eagle: no terminal to confirm on: check the fingerprint above, then pass --yes to pin gpu's key"]
    assert not known.exists()
    res = subprocess.run([EAGLE, "--config", cfg, "hosts", "pin", "down", "--yes"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1
    assert "host down:" in res.stderr and "unreachable" in res.stderr
    assert not known.exists()


def _on_a_terminal(argv: list[str], answer: bytes) -> tuple[int, str]:
    """Run `eagle` with a pseudo-terminal as stdin and stdout; type `answer` after the question."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    seen = b""
    answered = False
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:   # the terminal closed: the process exited
            break
        if not chunk:
            break
        seen += chunk
        if not answered and b"[y/N]" in seen:
            os.write(master, answer)
            answered = True
    os.close(master)
    return proc.wait(30), seen.decode(errors="replace")


def test_pin_asks_on_a_terminal_and_writes_only_after_yes(tmp_path, sshd):
    known = tmp_path / "known_hosts"
    cfg = config(tmp_path, sshd, known)
    code, text = _on_a_terminal([EAGLE, "--config", cfg, "hosts", "pin", "gpu"], b"n\n")
    assert code == 1 and "not pinned" in text and not known.exists()
    code, text = _on_a_terminal([EAGLE, "--config", cfg, "hosts", "pin", "gpu"], b"y\n")
    assert code == 0 and keygen_fingerprint(sshd.root / "host_ed25519.pub") in text
    assert known.read_text() == f"[127.0.0.1]:{sshd.port} {sshd.host_pub}\n"


def test_pin_takes_ranges_groups_and_patterns_and_pins_them_in_one_confirmation(tmp_path, sshd, capsys):
    """Three names of the loopback sshd (`gpu-[01:03]`, one address): the keys of a range, a group
    and a pattern are read and shown, pinned once on --yes, each fingerprint in the audit trail."""
    known = tmp_path / "known_hosts"
    data = {"audit_db": str(tmp_path / "eagle.db"),
            "hosts": {"gpu-[01:03]": sshd.host_config(known_hosts=str(known))}, "groups": {"rack": ["gpu-01"]}}
    cfg = str(write_yaml(tmp_path / "eagle.yaml", data))
    Store(tmp_path / "eagle.db").close()      # the audit trail exists (pinning never creates it)
    fp = keygen_fingerprint(sshd.root / "host_ed25519.pub")
    res = subprocess.run([EAGLE, "--config", cfg, "hosts", "pin", "gpu-[02:03]"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and not known.exists(), res
    assert [ln.split(" (")[0] for ln in res.stdout.splitlines() if f"presents ssh-ed25519 key {fp}" in ln] == \
        ["host gpu-02", "host gpu-03"], res.stdout
    assert "pass --yes to pin these 2 hosts' keys" in res.stderr
    assert main(["--config", cfg, "hosts", "pin", "gpu-*", "--yes"]) == 0
    out = capsys.readouterr().out
    assert out.count(f"presents ssh-ed25519 key {fp}") == 3 and out.count("pinned: ") == 1, out
    assert known.read_text() == f"[127.0.0.1]:{sshd.port} {sshd.host_pub}\n"
    assert main(["--config", cfg, "hosts", "pin", "rack"]) == 0    # already pinned: nothing to confirm
    assert "already pinned" in capsys.readouterr().out
    pinned = [e["message"] for e in Store(tmp_path / "eagle.db", readonly=True).events("host_key_pinned")]
    assert len(pinned) == 1 and fp in pinned[0] and "gpu-01" in pinned[0], pinned
