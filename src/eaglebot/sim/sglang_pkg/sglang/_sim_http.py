"""SIMULATED SGLang server's HTTP endpoints, as the real server answers them (uvicorn's access log
lines included): /health, /server_info, /model_info, /v1/models, /get_load, /flush_cache,
/set_internal_state and /generate. The server's state and its answers are launch_server.Server's."""
from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy checks this package as eaglebot.sim.sglang_pkg.sglang; it runs as `sglang`
    from ._simulated import log
    from .launch_server import Server
else:
    from sglang._simulated import log


def handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"

        def log_message(self, fmt: str, *a: Any) -> None:  # uvicorn's access log format
            pass

        def _send(self, code: int, body: bytes | str = b"", ctype: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else body
            self.send_response(code)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            log(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.command} {self.path} '
                f'HTTP/1.1" {code} {"OK" if code < 400 else "Service Unavailable" if code == 503 else "Error"}')

        def _json(self, code: int, obj: Any) -> None:
            self._send(code, json.dumps(obj))

        def _body(self) -> dict[str, Any]:
            n = int(self.headers.get("content-length") or 0)
            if not n:
                return {}
            try:
                data = json.loads(self.rfile.read(n))
            except ValueError:
                return {}
            return data if isinstance(data, dict) else {}

        def _warm(self) -> bool:
            return server.ready_at is not None and time.monotonic() >= server.ready_at

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate", "/ready"):
                self._send(200 if self._warm() else 503, b"", "text/plain")
            elif path in ("/server_info", "/get_server_info"):
                self._json(200, server.server_info())
            elif path in ("/model_info", "/get_model_info"):
                self._json(200, {"model_path": server.args.model_path, "tokenizer_path": server.args.model_path,
                                 "is_generation": True, "architectures": [server.arch] if server.arch else None})
            elif path == "/v1/models":
                name = server.args.served_model_name or server.args.model_path
                self._json(200, {"object": "list", "data": [{"id": name, "object": "model", "created": int(time.time()),
                                                             "owned_by": "sglang", "root": name,
                                                             "max_model_len": server.args.context_length or 131072}]})
            elif path == "/get_load":   # one entry per DP rank; num_reqs counts running and waiting requests
                self._json(200, [{"dp_rank": 0, "num_reqs": server.batches.in_flight, "num_waiting_reqs": 0,
                                  "num_tokens": 0}])
            elif path == "/flush_cache":
                self._flush()
            elif path == "/generate":
                self._generate({})
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/generate":
                self._generate(self._body())
            elif path == "/flush_cache":
                self._body()
                self._flush()
            elif path == "/set_internal_state":
                asked = self._body().get("server_args")
                self._json(200, server.set_internal_state(asked if isinstance(asked, dict) else {}))
            else:
                self._body()
                self._json(404, {"detail": "Not Found"})

        def _flush(self) -> None:
            server.flush()
            self._send(200, "Cache flushed.\nPlease check backend logs for more details. (When there are running "
                            "or waiting requests, the operation will not be performed.)\n", "text/plain")

        def _generate(self, body: dict[str, Any]) -> None:
            if not self._warm():
                self._json(503, {"error": {"message": "The server is not ready yet (SIMULATED warmup)"}})
                return
            if server.drops_request():
                self._json(500, {"error": {"message": "Request aborted (SIMULATED: EAGLE_SIM_COMPLETE_FRACTION)"}})
                return
            hint = self.headers.get("X-Eagle-Sim-Batch")
            self._json(200, server.generate(body, int(hint) if hint and hint.isdigit() else None))

    return H
