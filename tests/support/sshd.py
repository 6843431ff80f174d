"""A real OpenSSH sshd on 127.0.0.1 for tests and benchmarks.

A generated host key, an authorized client key, and a dedicated test user whose
shell is /bin/sh (root's rc files cost ~140 ms per command on the CI machines).
`PATH` for SSH sessions starts with `bin_dir`, where tests put fake tools
(nvidia-smi, ...).
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
TEST_USER = "eagletest"


def ensure_user(name: str = TEST_USER) -> pwd.struct_passwd:
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        if os.geteuid() != 0:
            raise RuntimeError(f"test user {name!r} is missing and only root can create it")
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
        pw = pwd.getpwnam(name)
    if os.geteuid() == 0 and pw.pw_uid != 0:
        # A locked account ('!' in shadow) cannot log in even with a key. (Never root's: the
        # root sshd of tests/faults/test_leftover_forgery.py leaves the account as it is.)
        subprocess.run(["usermod", "-p", "*", name], check=True)
    return pw


# Ports handed out by free_port, one empty file each, shared by every xdist worker of this machine.
_TAKEN = Path("/tmp/eagle-test-ports")


def free_port() -> int:
    """A loopback port free now and handed to no other test for 10 minutes: the kernel may give a port
    just closed here to another worker's bind(0) before this test's server binds it (the method corpus's
    launch once found another worker's server on its port)."""
    _TAKEN.mkdir(mode=0o1777, exist_ok=True)
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        mark = _TAKEN / str(port)
        try:
            os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return port
        except FileExistsError:
            try:
                if time.time() - mark.stat().st_mtime > 600:
                    mark.unlink()       # an old run's: free again from the next draw on
            except FileNotFoundError:
                pass


@dataclass
class SSHServer:
    root: Path
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    bin_dir: Path
    home: Path
    proc: subprocess.Popen
    host_pub: str

    def host_config(self, **extra) -> dict:
        cfg = {"address": "127.0.0.1", "port": self.port, "user": self.user, "key": str(self.client_key),
               "known_hosts": str(self.known_hosts)}
        cfg.update(extra)
        return cfg

    def ssh_argv(self) -> list[str]:
        return ["ssh", "-p", str(self.port), "-i", str(self.client_key), "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{self.user}@127.0.0.1"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _keygen(path: Path) -> None:
    # A folder left by an earlier session whose pid this one reuses still holds keys: ssh-keygen
    # would ask before overwriting them, and with no terminal, fail.
    for old in (path, path.with_name(path.name + ".pub")):
        old.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def start_sshd(root: Path, user: str = TEST_USER, *, max_startups: str = "64:30:128",
               max_sessions: int = 32) -> SSHServer:
    """An sshd; `max_startups`/`max_sessions` as sshd_config says them (a bastion's defaults
    are 10:30:100 and 10: beyond 10 connections not yet logged in, sshd drops new ones).
    `user="root"`: root may log in, with the generated key only, on 127.0.0.1 only."""
    pw = ensure_user(user)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    host_key, client_key = root / "host_ed25519", root / "client_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    auth = root / "authorized_keys"
    auth.write_text((root / "client_ed25519.pub").read_text())
    os.chmod(auth, 0o644)
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    os.chmod(bin_dir, 0o755)
    host_pub = (root / "host_ed25519.pub").read_text().split()[:2]
    last_err = ""
    for _ in range(10):
        port = free_port()
        cfg = root / "sshd_config"
        cfg.write_text(f"""
Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {root}/sshd.pid
AuthorizedKeysFile {auth}
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
StrictModes no
UsePAM no
AllowUsers {user}
PermitRootLogin {"prohibit-password" if pw.pw_uid == 0 else "no"}
MaxSessions {max_sessions}
MaxStartups {max_startups}
PermitUserEnvironment no
SetEnv PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
Subsystem sftp internal-sftp
LogLevel ERROR
""")
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                last_err = proc.stderr.read().decode(errors="replace")
                break
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    pass
                known = root / "known_hosts"
                known.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
                os.chmod(client_key, 0o600)
                return SSHServer(root, port, user, client_key, known, bin_dir, Path(pw.pw_dir), proc,
                                 " ".join(host_pub))
            except OSError:
                time.sleep(0.05)
        else:
            proc.kill()
            last_err = "sshd did not start listening in 10 s"
        if "Address already in use" not in last_err and "Bind to port" not in last_err:
            break
    raise RuntimeError(f"could not start sshd: {last_err.strip()}")


def chown_to(path: Path, user: str = TEST_USER) -> None:
    """Hand a folder the test user works in over to it."""
    pw = pwd.getpwnam(user)
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, pw.pw_uid, pw.pw_gid)
        for f in filenames:
            os.chown(os.path.join(dirpath, f), pw.pw_uid, pw.pw_gid)
