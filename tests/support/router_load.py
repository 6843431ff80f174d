"""The REAL SGLang router (`sglang-router` from PyPI, its Rust binary) on loopback, and a client that
keeps N requests in flight through it, counting every failed one: for tests/test_router_drain.py and
tests/bench/bench_router_drain.py."""
from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.sshd import free_port


def router_binary() -> str:
    """The `sglang-router` entry point of this environment (the dev extra installs it)."""
    found = shutil.which("sglang-router") or str(Path(sys.executable).parent / "sglang-router")
    if not Path(found).exists():
        raise RuntimeError("sglang-router is not installed: `pip install -e '.[dev]'` installs it")
    return found


@dataclass
class Router:
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def workers(self) -> list[dict]:
        return json.loads(_get(self.port, "/workers"))["workers"]

    def healthy(self) -> list[str]:
        return sorted(w["url"] for w in self.workers() if w.get("is_healthy"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _get(port: int, path: str) -> str:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path)
        return c.getresponse().read().decode()
    finally:
        c.close()


def start_router(workers: list[str], log: Path, *extra: str) -> Router:
    """The router in front of `workers`, round robin, its Prometheus exporter on a port of its own;
    returned once it lists every worker healthy."""
    port, prom = free_port(), free_port()
    proc = subprocess.Popen([router_binary(), "launch", "--host", "127.0.0.1", "--port", str(port),
                             "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom),
                             "--policy", "round_robin", "--log-level", "warn", "--worker-urls", *workers, *extra],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    r = Router(proc, port)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, f"sglang-router exited: {log.read_text()[-2000:]}"
        try:
            if r.healthy() == sorted(workers):
                return r
        except (OSError, ValueError, KeyError):
            pass
        assert time.monotonic() < deadline, f"the router never listed {workers} healthy: {log.read_text()[-2000:]}"
        time.sleep(0.1)


@dataclass
class Load:
    """`concurrency` client threads, each sending /generate through the router back to back."""
    port: int
    concurrency: int = 8
    max_new_tokens: int = 256
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    latencies: list[tuple[float, float]] = field(default_factory=list)   # (start, seconds), ok requests
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> "Load":
        for i in range(self.concurrency):
            t = threading.Thread(target=self._client, args=(i,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _client(self, i: int) -> None:
        body = json.dumps({"text": f"client {i} asks", "sampling_params": {"max_new_tokens": self.max_new_tokens}})
        n = 0
        while not self._stop.is_set():
            n += 1
            t0 = time.monotonic()
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                c.request("POST", "/generate", body.replace("asks", f"asks {n}"),
                          {"content-type": "application/json"})
                r = c.getresponse()
                data = r.read()
                c.close()
                what = None if r.status == 200 else f"HTTP {r.status}: {data[:200]!r}"
            except OSError as e:
                what = f"{type(e).__name__}: {e}"
            with self._lock:
                if what is None:
                    self.ok += 1
                    self.latencies.append((t0, time.monotonic() - t0))
                else:
                    self.failed.append(what)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(90)
