"""A step that prints 150 MB through a real OpenSSH sshd (started here, as the tests do):
the bot's peak RSS growth, the audit DB's growth, the time taken, and the whole output
back byte for byte through `eagle show ID --output`. Targets (issue 17): RSS growth <= 64 MiB,
DB growth <= 2 MiB.

`eagle run` runs in a subprocess; its peak RSS is the kernel's (`os.wait4`'s ru_maxrss), the
growth is against the same command printing 1,000 bytes. Run as root (it creates a test user):

    .venv/bin/python tests/bench/bench_output.py [--mb 150]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402

from support.sshd import SSHServer, start_sshd  # noqa: E402

LINE = b"eagle flood line 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,:;!?+-*/=\n"


@dataclass
class Flood:
    nbytes: int
    rss_base_kib: int
    rss_peak_kib: int
    db_growth: int
    run_s: float
    show_s: float
    exact: bool

    @property
    def rss_growth_mib(self) -> float:
        return (self.rss_peak_kib - self.rss_base_kib) / 1024

    def table(self) -> str:
        rows = [("output printed", f"{self.nbytes / 1e6:.1f} MB"),
                ("bot peak RSS (1 KB step)", f"{self.rss_base_kib / 1024:.1f} MiB"),
                ("bot peak RSS (this step)", f"{self.rss_peak_kib / 1024:.1f} MiB"),
                ("bot peak RSS growth", f"{self.rss_growth_mib:.1f} MiB (target <= 64)"),
                ("audit DB growth", f"{self.db_growth / 1024:.0f} KiB (target <= 2048)"),
                ("eagle run", f"{self.run_s:.1f} s ({self.nbytes / 1e6 / self.run_s:.0f} MB/s)"),
                ("eagle show --output", f"{self.show_s:.1f} s"),
                ("byte for byte", "yes" if self.exact else "NO")]
        w = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(w)}  {v}" for k, v in rows)


def expected(nbytes: int) -> tuple[str, int]:
    """SHA-256 and length of what `yes LINE | head -c nbytes` prints."""
    h = hashlib.sha256()
    block = LINE * (1024 * 1024 // len(LINE))
    left = nbytes
    while left:
        piece = block[:left]
        h.update(piece)
        left -= len(piece)
    return h.hexdigest(), nbytes


def _db_size(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())


def _eagle(cfg: Path, *args: str) -> tuple[int, int, float]:
    """Run `eagle ARGS`; (exit status, peak RSS in KiB, seconds)."""
    env = {k: v for k, v in os.environ.items() if k != "EAGLE_CONFIG"}
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "eaglebot", *args, "--config", str(cfg)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    if p.returncode != 0:
        raise RuntimeError(f"eagle {' '.join(args)} exited {p.returncode}: {err.strip()}")
    return p.returncode, usage.ru_maxrss, time.monotonic() - t0


def measure_flood(server: SSHServer, work: Path, nbytes: int) -> Flood:
    """A run whose one step prints `nbytes` through `server`, measured (see the module docstring)."""
    (work / "playbooks").mkdir(parents=True, exist_ok=True)
    line = LINE.decode().rstrip("\n")
    (work / "playbooks" / "flood.yaml").write_text(yaml.safe_dump({
        "name": "flood", "description": "prints a lot",
        "inputs": {"nbytes": {"type": "int"}},
        "steps": [{"name": "flood", "skill": "shell",
                   "with": {"command": f"yes '{line}' | head -c {{{{ nbytes }}}}"}}]}))
    cfg = work / "eagle.yaml"
    cfg.write_text(yaml.safe_dump({
        "audit_db": str(work / "eagle.db"), "playbooks_dir": "playbooks",
        "hosts": {"box": server.host_config()}}))
    _, base_rss, _ = _eagle(cfg, "run", "flood", "-H", "box", "-e", "nbytes=1000")
    db0 = _db_size(work / "eagle.db")
    _, peak_rss, run_s = _eagle(cfg, "run", "flood", "-H", "box", "-e", f"nbytes={nbytes}")
    db1 = _db_size(work / "eagle.db")
    want_sha, want_len = expected(nbytes)
    env = {k: v for k, v in os.environ.items() if k != "EAGLE_CONFIG"}
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "eaglebot", "show", "2", "--output", "--config", str(cfg)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert p.stdout is not None
    h, n = hashlib.sha256(), 0
    while chunk := p.stdout.read(1024 * 1024):
        h.update(chunk)
        n += len(chunk)
    p.wait()
    show_s = time.monotonic() - t0
    return Flood(nbytes, base_rss, peak_rss, db1 - db0, run_s, show_s,
                 p.returncode == 0 and n == want_len and h.hexdigest() == want_sha)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=150.0, help="megabytes (10^6 bytes) the step prints")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="eagle-bench-output-"))
    os.chmod(root, 0o755)
    server = start_sshd(root / "sshd")
    try:
        f = measure_flood(server, root / "work", int(args.mb * 1e6))
    finally:
        server.stop()
        if not os.environ.get("EAGLE_BENCH_KEEP"):
            shutil.rmtree(root, ignore_errors=True)
    print(f"a step printing {args.mb:g} MB through loopback OpenSSH")
    print(f.table())
    ok = f.exact and f.rss_growth_mib <= 64 and f.db_growth <= 2 * 1024 * 1024
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
