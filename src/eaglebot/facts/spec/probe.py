"""What a tuning asks a running SGLang server beyond the benchmark: the acceptance by draft position
(`PROBE_PY`), and whether adaptive steps flap under a phase-changing load (`FLAP_PY`). Both are
programs run with the host's Python (standard library only: the server listens on the host's
loopback); their output is parsed here, purely.

Acceptance: each `/generate` answer's meta_info carries `spec_correct_drafts_histogram` (0.5.17
also names it `spec_accept_histogram`): how many verify passes of that request accepted k draft
tokens, k = 0, 1, ... (tokenizer_manager.py). The probe sends the benchmark's kind of prompt (random
token ids, fixed lengths, `ignore_eos`) so the acceptance is that of the team's benchmark.

Flapping: the load runs each phase's concurrency for its seconds; a poller reads /server_info's
`speculative_num_steps` every `poll_s` (the SIMULATED server reports the tier in use there; a real
0.5.23 reports the launch's value, so the server log's `Adaptive spec params updated` lines between
the byte offsets the program records are counted too, and the larger count is the verdict's).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from eaglebot.facts.sglang import adaptive

# python -c PROBE_PY PORT N INPUT_LEN OUTPUT_LEN CONCURRENCY SEED TIMEOUT -> one JSON object
PROBE_PY = r"""
import json, random, sys, threading, urllib.request
port, n, in_len, out_len, conc, seed, timeout = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                                  int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7]))
rng = random.Random(seed)
prompts = [[rng.randrange(100, 30000) for _ in range(in_len)] for _ in range(n)]
out, errors, gate = [None] * n, [], threading.Semaphore(conc)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def one(i):
    with gate:
        body = json.dumps({"input_ids": prompts[i], "sampling_params": {"max_new_tokens": out_len, "temperature": 0,
                           "ignore_eos": True}, "stream": False}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", body, {"Content-Type": "application/json"})
        try:
            with opener.open(req, timeout=timeout) as r:
                meta = json.loads(r.read()).get("meta_info") or {}
            hist = meta.get("spec_correct_drafts_histogram") or meta.get("spec_accept_histogram")
            out[i] = {"histogram": hist, "accept_length": meta.get("spec_accept_length"),
                      "verify_ct": meta.get("spec_verify_ct"), "completion_tokens": meta.get("completion_tokens")}
        except Exception as e:
            errors.append(f"prompt {i}: {type(e).__name__}: {e}")
ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps({"requests": out, "errors": errors[:5], "failed": len(errors)}))
"""


@dataclass
class Acceptance:
    histogram: list[int]               # summed over the requests
    request_means: list[float]         # accepted drafts per verify, per request
    accept_length: float | None
    answered: int
    asked: int
    errors: list[str] = field(default_factory=list)


def _last_json_line(stdout: str) -> Any:
    """The last line of `stdout` that is JSON (what the probe programs print last), or None."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def parse_probe(stdout: str, asked: int) -> Acceptance:
    """The probe's JSON line (total: no line, or a line that is not the probe's, is no data)."""
    doc = _last_json_line(stdout)
    reqs = doc.get("requests") if isinstance(doc, dict) else None
    if not isinstance(reqs, list):
        return Acceptance([], [], None, 0, asked, ["the probe printed no result"])
    total: list[int] = []
    means: list[float] = []
    lengths: list[float] = []
    answered = 0
    for r in reqs:
        if not isinstance(r, dict):
            continue
        answered += 1
        hist = r.get("histogram")
        if isinstance(hist, list) and hist and all(isinstance(c, int) and c >= 0 for c in hist) and sum(hist) > 0:
            total += [0] * (len(hist) - len(total))
            for k, c in enumerate(hist):
                total[k] += c
            means.append(sum(k * c for k, c in enumerate(hist)) / sum(hist))
        if isinstance(r.get("accept_length"), (int, float)):
            lengths.append(float(r["accept_length"]))
    errs = [str(e) for e in (doc.get("errors") or [])][:5]
    return Acceptance(total, means, sum(lengths) / len(lengths) if lengths else None, answered, asked, errs)


# python -c FLAP_PY PORT TRACE_JSON SETTLE_S POLL_S MAX_NEW_TOKENS LOG_PATH -> one JSON object
FLAP_PY = r"""
import http.client, json, os, sys, threading, time
port, trace, settle, poll, max_new, log = (int(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3]),
                                           float(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
def size():
    try:
        return os.path.getsize(log) if log else None
    except OSError:
        return None
def steps():
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/server_info")
        info = json.loads(c.getresponse().read())
        c.close()
        return info.get("speculative_num_steps")
    except Exception:
        return None
body = json.dumps({"input_ids": list(range(100, 164)), "sampling_params": {"max_new_tokens": max_new,
                   "ignore_eos": True}, "stream": False})
phases = []
for conc, seconds in trace:
    stop, conns, lock, done = threading.Event(), [], threading.Lock(), [0]
    def worker():
        while not stop.is_set():
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            with lock:
                conns.append(c)
            try:
                c.request("POST", "/generate", body, {"Content-Type": "application/json"})
                c.getresponse().read()
                done[0] += 1
            except Exception:
                time.sleep(0.05)
            finally:
                c.close()
    t0 = time.time()
    ws = [threading.Thread(target=worker, daemon=True) for _ in range(int(conc))]
    [w.start() for w in ws]
    samples, start_off, steady_off = [], size(), None
    while time.time() - t0 < seconds:
        t = time.time() - t0
        if steady_off is None and t >= settle:
            steady_off = size()
        samples.append([round(t, 3), steps()])
        time.sleep(poll)
    end_off = size()
    stop.set()
    with lock:
        for c in conns:  # an aborted request leaves the batch: the next phase starts clean
            try:
                c.sock and c.sock.shutdown(2)
            except OSError:
                pass
    [w.join(10) for w in ws]
    phases.append({"concurrency": conc, "seconds": seconds, "samples": samples, "completed": done[0],
                   "log_offsets": [start_off, steady_off, end_off]})
print(json.dumps({"phases": phases}))
"""


@dataclass
class Phase:
    concurrency: int
    steady_s: float
    switches: int
    source: str                      # server_info | log
    tiers: list[int]
    completed: int

    @property
    def allowed(self) -> float:
        """More than once per 10 s flaps; a window shorter than 10 s may hold one switch."""
        return max(1.0, self.steady_s / 10.0)

    @property
    def flaps(self) -> bool:
        return self.switches > self.allowed


def flap_phases(stdout: str, settle_s: float, log_text: str = "") -> list[Phase]:
    """Tier switches in each phase's steady window (after `settle_s`), from the polls and, where the
    log was readable, from its switch lines between the recorded byte offsets."""
    doc = _last_json_line(stdout)
    if not isinstance(doc, dict) or not isinstance(doc.get("phases"), list):
        raise ValueError("the flap test printed no result")
    raw = log_text.encode("utf-8", "surrogateescape")
    out = []
    for ph in doc["phases"]:
        samples = [(float(t), s) for t, s in ph.get("samples") or [] if float(t) >= settle_s and isinstance(s, int)]
        tiers = [s for _, s in samples]
        polled = sum(1 for a, b in zip(tiers, tiers[1:]) if a != b)
        steady = max(0.0, float(ph.get("seconds") or 0) - settle_s)
        logged, source = -1, "server_info"
        offs = ph.get("log_offsets") or []
        if raw and len(offs) == 3 and isinstance(offs[1], int) and isinstance(offs[2], int):
            window = raw[offs[1]:offs[2]].decode("utf-8", "replace")
            logged = len(adaptive.switches(window))
        if logged > polled:
            source = "log"
        out.append(Phase(int(ph.get("concurrency") or 0), steady, max(polled, logged), source,
                         sorted(set(tiers)), int(ph.get("completed") or 0)))
    return out
