"""A real PostgreSQL for the tests, from Debian's packages (`.ci/run` installs `postgresql`).

One server per test session: its own data folder, its own port on 127.0.0.1 and its own
unix socket folder (other PostgreSQL servers on the machine are never touched). PostgreSQL
refuses to run as root, so as root (CI) initdb and the server run as the `postgres` user.
The schema is migrated once into a template database; each test gets a fresh clone of it
(`CREATE DATABASE ... TEMPLATE`), which takes milliseconds.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

USER = "eagle"          # the superuser initdb creates (trust auth on loopback and the socket)
TEMPLATE = "eagle_template"


def pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name) or ""]
    if not found[-1]:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (apt-get install postgresql)")
    return found[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_owner(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@dataclass
class PgServer:
    root: Path
    port: int
    _n: int = field(default=0)

    def url(self, db: str, user: str = USER) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{db}"

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.url("postgres"), autocommit=True)

    def fresh_db(self, template: str = TEMPLATE) -> str:
        """A new database cloned from `template` (the migrated schema); its URL."""
        self._n += 1
        name = f"t{os.getpid()}_{self._n}"
        with self.admin() as c:
            c.execute(f'create database "{name}" template "{template}"')
        return self.url(name)

    def stop(self) -> None:
        subprocess.run(_as_owner([pg_bin("pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "stop"]),
                       capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def start_pg() -> PgServer:
    # Not under pytest's tmp folder: it is root's (0700) and the server runs as `postgres`.
    root = Path(tempfile.mkdtemp(prefix="eagle-pg-"))
    (root / "sock").mkdir()
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        for p in (root, root / "sock"):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    data = root / "data"
    subprocess.run(_as_owner([pg_bin("initdb"), "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8",
                              "--locale=C", "--no-sync"]), check=True, capture_output=True, timeout=120)
    port = _free_port()
    opts = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root / 'sock'} "
            f"-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
    subprocess.run(_as_owner([pg_bin("pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w",
                              "-t", "60", "start"]), check=True, capture_output=True, timeout=90)
    server = PgServer(root, port)
    deadline = time.monotonic() + 30
    while True:
        try:
            server.admin().close()
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    return server


def make_template(server: PgServer) -> None:
    """The template every test database is cloned from: migrated once by the store itself."""
    from eaglebot.store import open_store

    with server.admin() as c:
        c.execute(f'create database "{TEMPLATE}"')
    open_store(server.url(TEMPLATE)).close()
