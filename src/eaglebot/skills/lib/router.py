"""SGLang's router (`sglang-router`, the SGLang Model Gateway) as router.drain and router.add use it.

Its HTTP API, asked from the host (as the bot's other requests: the router and the worker are on
the host's network, not necessarily on the bot's):
- `GET /workers` lists `{"workers": [{"id", "url", "is_healthy", ...}]}`; `POST /workers` with
  `{"url": ...}` queues an addition and `DELETE /workers/{id}` a removal (both 202: done in the
  background, so the list is read back until it shows the change);
- routers before the gateway (sglang-router 0.1) answer 404 there and have `GET /list_workers`
  (`{"urls": [...]}`), `POST /add_worker?url=` and `POST /remove_worker?url=`.
How many requests a worker is still serving is the worker's own word: SGLang's `GET /get_load`
(`[{"dp_rank", "num_reqs", "num_waiting_reqs", ...}]`, one per DP rank), else its Prometheus
`/metrics` (`sglang:num_running_reqs` + `sglang:num_queue_reqs`, with --enable-metrics).
"""
from __future__ import annotations

import json
import re
import shlex
import urllib.parse
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator

from eaglebot.errors import HostUnreachable, StepFailed, TransportError
from eaglebot.facts.host import ports
from eaglebot.sdk import HOST_PATH, SkillContext, SkillParams

# GETs that may fail in a row on a dropped link before the error stands
LINK_RETRIES = 3
_URL = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+$")

_PY = ("import sys,urllib.request as u,urllib.error as e\n"
       "o=u.build_opener(u.ProxyHandler({}))\n"
       "d=sys.argv[3].encode() if len(sys.argv)>3 else None\n"
       "r=u.Request(sys.argv[2],data=d,method=sys.argv[1],headers={'content-type':'application/json'})\n"
       "try:\n x=o.open(r,timeout=float(sys.argv[4]) if len(sys.argv)>4 else 10);b=x.read();c=x.status\n"
       "except e.HTTPError as x:\n b=x.read();c=x.code\n"
       "except Exception:\n b=b'';c=0\n"
       "sys.stdout.write(b.decode('utf-8','replace')+'\\n'+str(c))\n")


def check_url(v: str, what: str) -> str:
    """`http(s)://HOST:PORT` with nothing after it (it goes into command lines, quoted, and paths)."""
    v = v.strip().rstrip("/")
    if not _URL.match(v):
        raise ValueError(f"{what} {v[:80]!r} is not a URL such as http://10.0.0.5:30080 (scheme, host and port only)")
    return v


def worker_url(ctx: SkillContext, given: str | None, bind: str, port: int) -> str:
    """The server as the router knows it: `given`, else http://BIND:PORT, or http://HOST:PORT (the
    inventory name) for a wildcard bind."""
    if given:
        return given
    host = ctx.host_name if bind.strip() in ("0.0.0.0", "::", "[::]") else ports.probe_address(bind)
    return f"http://{host}:{port}"


def same_url(a: str, b: str) -> bool:
    return a.strip().rstrip("/").lower() == b.strip().rstrip("/").lower()


def request_script(python: str, method: str, url: str, body: dict[str, Any] | None = None,
                   timeout: float = 10.0) -> str:
    """Shell that prints the response body, a newline, then the status code (0/000: no answer)."""
    q = shlex.quote
    data = json.dumps(body) if body is not None else None
    send = f"-H 'content-type: application/json' --data-binary {q(data)} " if data is not None else ""
    curl = f"curl -s --noproxy '*' --max-time {timeout:g} -X {method} {send}-w '\\n%{{http_code}}' {q(url)}"
    py = f"{q(python)} -c {q(_PY)} {method} {q(url)} {q(data or '')} {timeout:g}"
    return f"if command -v curl >/dev/null 2>&1; then {curl}; else {py}; fi"


async def call(ctx: SkillContext, python: str, method: str, url: str, body: dict[str, Any] | None = None,
               timeout: float = 10.0) -> tuple[int, str]:
    """One request from the host: (status, body). A GET (a read, safe to repeat) whose SSH link dropped
    is asked again on a new connection (the transport reconnects with the host's connect_retries)."""
    script = request_script(python, method, url, body, timeout)
    for attempt in range(LINK_RETRIES + 1):
        try:
            res = await ctx.host.run(script, timeout=timeout + 20)
            break
        except HostUnreachable:
            raise
        except TransportError as e:
            if method != "GET" or attempt == LINK_RETRIES:
                raise
            ctx.log(f"connection lost during GET {url}: {e}; reconnecting")
    text, _, code = res.stdout.rpartition("\n")
    return (int(code) if code.strip().isdigit() else 0), text


@dataclass(frozen=True)
class Worker:
    url: str
    healthy: bool
    id: str | None = None     # the gateway's worker id (None: a router before it, which goes by URL)


async def workers(ctx: SkillContext, python: str, router: str) -> list[Worker]:
    """The router's workers, or StepFailed saying why they could not be read."""
    code, body = await call(ctx, python, "GET", f"{router}/workers")
    try:
        if code == 200:
            return [Worker(str(w["url"]), bool(w.get("is_healthy", True)), str(w["id"]) if w.get("id") else None)
                    for w in json.loads(body)["workers"]]
        if code == 404:
            code, body = await call(ctx, python, "GET", f"{router}/list_workers")
            if code == 200:
                return [Worker(str(u), True) for u in json.loads(body)["urls"]]
    except (ValueError, KeyError, TypeError) as e:
        raise StepFailed(f"router {router} answered its worker list with something unexpected ({e}): "
                         f"{body[:200]!r}") from None
    raise StepFailed(f"router {router} did not list its workers (HTTP {code or 'no answer'} from {ctx.host_name})")


def find(ws: list[Worker], url: str) -> Worker | None:
    return next((w for w in ws if same_url(w.url, url)), None)


async def remove(ctx: SkillContext, python: str, router: str, w: Worker) -> None:
    if w.id is not None:
        code, body = await call(ctx, python, "DELETE", f"{router}/workers/{urllib.parse.quote(w.id, safe='')}")
    else:
        code, body = await call(ctx, python, "POST", f"{router}/remove_worker?url={urllib.parse.quote(w.url, safe='')}")
    if code not in (200, 202, 204):
        raise StepFailed(f"router {router} refused to remove {w.url}: HTTP {code or 'no answer'} {body[:200]}")


async def add(ctx: SkillContext, python: str, router: str, url: str) -> None:
    code, body = await call(ctx, python, "POST", f"{router}/workers", {"url": url})
    if code in (404, 405):
        code, body = await call(ctx, python, "POST", f"{router}/add_worker?url={urllib.parse.quote(url, safe='')}")
    if code not in (200, 201, 202):
        raise StepFailed(f"router {router} refused to add {url}: HTTP {code or 'no answer'} {body[:200]}")


_METRIC = re.compile(r"^sglang:num_(?:running|queue)_reqs(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


async def in_flight(ctx: SkillContext, python: str, base: str) -> int | None:
    """Requests the SGLang server at `base` is running or queueing (its own count); 0 when nothing answers
    there (a crashed server has none in flight); None: it answers but does not say."""
    code, body = await call(ctx, python, "GET", f"{base}/get_load")
    if code == 0:
        return 0
    if code == 200:
        try:
            loads = json.loads(body)
            return sum(int(r.get("num_reqs", 0)) for r in (loads if isinstance(loads, list) else [loads]))
        except (ValueError, TypeError, AttributeError):
            pass
    code, body = await call(ctx, python, "GET", f"{base}/metrics")
    found = _METRIC.findall(body) if code == 200 else []
    return int(sum(float(v) for v in found)) if found else None


class WorkerParams(SkillParams):
    """The parameters router.drain and router.add share: the router, and this host's server in it."""
    router: str = Field(description="the router's URL, e.g. http://10.0.0.5:30080 (host var `router`)")
    worker_url: str | None = Field(None, description="this server as the router knows it (default http://BIND:PORT; "
                                                     "http://HOST:PORT for a wildcard bind)")
    port: int = Field(30000, ge=1, le=65535, description="the server's port")
    bind: str = Field("127.0.0.1", description="the address the server listens on (relaunch's `bind`)")
    python: str = Field("python3", description="the host's Python (an HTTP client where curl is missing)",
                        json_schema_extra=HOST_PATH)

    @field_validator("router")
    @classmethod
    def _router(cls, v: str) -> str:
        return check_url(v, "router")

    @field_validator("worker_url")
    @classmethod
    def _worker(cls, v: str | None) -> str | None:
        return None if v is None else check_url(v, "worker_url")
