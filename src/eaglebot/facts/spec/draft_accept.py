"""Does a running EAGLE-3 server accept what its draft proposes as the draft's training predicts?
Greedy prompts through /generate and the server's own per-request speculative stats (pure).

SGLang's meta_info per request (tokenizer_manager.py, 0.5.17 and 0.5.23): `spec_verify_ct`
(verify passes), `completion_tokens`, `spec_accept_length` (completion / verify passes),
`spec_accept_rate` (correct drafts / proposed), and `spec_correct_drafts_histogram` (0.5.17 also
`spec_accept_histogram`): entry k counts the verify passes that accepted k draft tokens. From the
histogram, the acceptance of draft position j given that j-1 was accepted is
`passes with >= j accepted / passes with >= j-1 accepted`: the server's own per-position acceptance.

The training proxy is the draft's accuracy per position (SpecForge's eval/per_position_acc; one
number, `draft_train_accuracy`, stands for every position). Serving on other prompts accepts less
than teacher-forced training predicts, so the bands are wide:
- `as expected`: position 1 accepts >= 70% of the proxy;
- `wrong inputs`: position 1 below 50% of the proxy AND the later positions collapsed: each under
  10%, or below half of position 1's share of its own proxy (a draft fed other hidden states than
  it learned loses at every position, and each position builds on the one before);
- `weak draft`: in between, or low but smooth (later positions hold up relative to the first);
- `unknown`: no proxy, no speculative stats, or dummy weights (`load_format: dummy`: random
  weights accept nothing, whatever the capture list).

What these bands cannot see: a trained EAGLE-3 pair on a real SGLang 0.5.17 (docs/gpu-validation.md)
accepted 3.43 per verify pass with its trained capture list 1,3,5 and 3.10 with 0,2,4 (each one
off): neighbouring layers carry nearly the same information, so position 1 stays far above 70% of
the proxy and a one-off list reads `as expected`. Only the static gate (draft.check) sees the list,
and only this draft's own acceptance under its trained list can measure what it costs. So
`against_own` judges a reading again with that history (`Own`, from the audit trail):
- the capture list differs from training: never `as expected`: `measured drop` (the accept length
  more than OWN_NOISE below its own), `no measured drop` (within it), or `capture mismatch` (no
  history to compare with), each naming the numbers; `wrong inputs` stays what it is;
- the trained list: a drop of more than OWN_DROP from its own history is a `measured drop`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

AS_EXPECTED_RATIO = 0.70
WRONG_RATIO = 0.50
COLLAPSED_ABS = 0.10
OWN_NOISE = 0.03     # accept length of the same server, repeated probes: within ~3%
OWN_DROP = 0.10      # under the trained list, a drop beyond this from its own history is news

PROMPTS = (
    "Explain in three sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List the planets of the solar system in order from the sun.",
    "Summarize the plot of Romeo and Juliet in one paragraph.",
    "What is the difference between a list and a tuple in Python?",
    "Translate 'good morning, how are you today?' into French.",
    "Give three tips for writing clear technical documentation.",
    "Count from one to twenty, separated by commas.",
)

# Run as `python -c GENERATE_PY BASE_URL MAX_TOKENS TIMEOUT N` (BASE_URL: `http://127.0.0.1:30000`):
# prints one JSON object, the meta_info of each of the first N fixed prompts (null where a request
# failed) and the wall time of the whole.
GENERATE_PY = r"""
import json, sys, time, urllib.request
base, max_tokens, timeout, n = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
prompts = json.loads(sys.stdin.read())[:n]
metas, t0 = [], time.monotonic()
for text in prompts:
    body = json.dumps({"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_tokens}}).encode()
    req = urllib.request.Request(f"{base}/generate", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            metas.append(json.loads(r.read()).get("meta_info"))
    except Exception as e:
        print(f"prompt {len(metas)}: {e}", file=sys.stderr)
        metas.append(None)
print(json.dumps({"metas": metas, "wall_s": time.monotonic() - t0}))
"""


@dataclass
class Stats:
    answered: int = 0
    completion_tokens: int = 0
    verify_ct: int = 0
    correct: int | None = None
    proposed: int | None = None
    histogram: list[int] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def accept_length(self) -> float | None:
        return self.completion_tokens / self.verify_ct if self.verify_ct else None

    @property
    def tok_s(self) -> float | None:
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else None

    def positions(self, depth: int) -> list[float]:
        """Per-position acceptance from the histogram: P(position j accepted | j-1 accepted), j = 1..depth
        (the server's histogram ends at the longest acceptance it saw: the rest accepted nothing)."""
        if not self.histogram:
            return []
        h = self.histogram + [0] * max(0, depth + 1 - len(self.histogram))
        out: list[float] = []
        for j in range(1, depth + 1):
            before, now = sum(h[j - 1:]), sum(h[j:])
            if before == 0:
                break
            out.append(now / before)
        return out


def histogram_keys(version: str | None) -> tuple[str, ...]:
    """The meta_info keys of the per-request histogram, by the server's release: 0.5.17 sends
    `spec_correct_drafts_histogram` and its alias `spec_accept_histogram`; 0.5.23 dropped the alias."""
    try:
        old = tuple(int(x) for x in (version or "").split(".")[:3]) < (0, 5, 23)
    except ValueError:
        old = True          # a release it cannot read: either key
    return ("spec_correct_drafts_histogram", "spec_accept_histogram") if old else ("spec_correct_drafts_histogram",)


def parse_generate(stdout: str, version: str | None = None) -> Stats:
    """The GENERATE_PY output (`version`: the server's SGLang release, for the histogram's key);
    ValueError when there is none."""
    try:
        doc = json.loads(stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        raise ValueError("the probe prompts gave no result") from None
    except RecursionError:   # the server's answers, relayed: a hostile one nests them 200,000 deep
        raise ValueError("the probe prompts' answer is nested too deep to read") from None
    if not isinstance(doc, dict):
        raise ValueError("the probe prompts gave no result (not a JSON object)")
    s = Stats(wall_s=float(doc.get("wall_s") or 0))
    for m in doc.get("metas") or []:
        if not isinstance(m, dict):
            continue
        s.answered += 1
        s.completion_tokens += int(m.get("completion_tokens") or 0)
        s.verify_ct += int(m.get("spec_verify_ct") or 0)
        for key, attr in (("spec_num_correct_drafts", "correct"), ("spec_num_proposed_drafts", "proposed")):
            if isinstance(m.get(key), (int, float)):
                setattr(s, attr, (getattr(s, attr) or 0) + int(m[key]))
        hist = next((m[k] for k in histogram_keys(version) if isinstance(m.get(k), list)), None)
        if isinstance(hist, list):
            s.histogram += [0] * (len(hist) - len(s.histogram))
            for k, v in enumerate(hist):
                s.histogram[k] += int(v or 0)
    return s


def expected_length(accuracy: list[float], depth: int) -> float:
    """1 + a1 + a1*a2 + ... over `depth` draft positions (the last known accuracy repeats): what a
    chain accepts when each position is right as often as in training (SpecForge's simulated_acc_len)."""
    total, run = 1.0, 1.0
    for j in range(depth):
        run *= accuracy[min(j, len(accuracy) - 1)]
        total += run
    return total


def _geometric_p(length: float, depth: int) -> float:
    """The constant per-position acceptance that gives this accept length (no histogram: 0.5.x servers
    without one)."""
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if expected_length([mid], depth) < length:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class Reading:
    verdict: str                 # as expected | weak draft | wrong inputs | unknown
    summary: str
    numbers: dict[str, Any] = field(default_factory=dict)


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.0%}"


def classify(s: Stats, accuracy: list[float] | None, steps: int, topk: int, draft_tokens: int,
             load_format: str | None = None) -> Reading:
    depth = max(1, min(steps, draft_tokens - 1)) if topk == 1 else max(1, steps)
    al = s.accept_length
    pos = s.positions(depth)
    rate = s.correct / s.proposed if s.correct is not None and s.proposed else None
    nums: dict[str, Any] = {"accept_length": round(al, 3) if al else None, "positions": [round(p, 3) for p in pos],
                            "accept_rate": round(rate, 3) if rate is not None else None,
                            "answered": s.answered, "verify_ct": s.verify_ct, "tok_s": round(s.tok_s, 1) if s.tok_s
                            else None, "depth": depth, "topk": topk}
    if s.answered == 0:
        return Reading("unknown", "unknown: no probe prompt was answered", nums)
    if not s.verify_ct or al is None:
        return Reading("unknown", "unknown: the server reports no speculative stats (spec_verify_ct) per request",
                       nums)
    first = pos[0] if pos else _geometric_p(al, depth)
    later = pos[1:] if len(pos) > 1 else []
    nums["first"] = round(first, 3)
    rest = f", later {', '.join(_pct(p) for p in later)}" if later else ""
    if load_format == "dummy":
        return Reading("unknown", f"unknown: the server runs dummy weights (load_format=dummy), so acceptance says "
                                  f"nothing about the draft; position 1 accepted {_pct(first)}{rest}; accept length "
                                  f"{al:.2f}", nums)
    if not accuracy:
        return Reading("unknown", f"unknown: position 1 accepted {_pct(first)}{rest}; accept length {al:.2f}; no "
                                  f"training accuracy to compare with (set draft_train_accuracy)", nums)
    expect = expected_length(accuracy, depth)
    nums.update(proxy=[round(a, 3) for a in accuracy], expected_length=round(expect, 3))
    said = (f"position 1 accepted {_pct(first)} (training {_pct(accuracy[0])}){rest}; accept length {al:.2f} "
            f"(~{expect:.2f} expected at steps={steps} topk={topk})")
    if first >= AS_EXPECTED_RATIO * accuracy[0]:
        return Reading("as expected", f"as expected: {said}", nums)
    # Positions the server never reached (nothing accepted before them) count as collapsed.
    r1 = first / accuracy[0]
    collapsed = all(p < max(COLLAPSED_ABS, 0.5 * r1 * accuracy[min(j + 1, len(accuracy) - 1)])
                    for j, p in enumerate(later))
    if first < WRONG_RATIO * accuracy[0] and collapsed:
        return Reading("wrong inputs", f"wrong inputs: {said}", nums)
    return Reading("weak draft", f"weak draft: {said}", nums)


@dataclass(frozen=True)
class Own:
    """This draft's accept length under its trained capture list, as an earlier probe measured it."""
    accept_length: float
    points: list[int]
    run_id: int


def against_own(reading: Reading, own: Own | None, mismatch: bool) -> Reading:
    """The reading judged again with the draft's own history (`mismatch`: the server's capture list is
    not the one training used, per draft.check)."""
    al = reading.numbers.get("accept_length")
    if reading.verdict == "unknown" or al is None or (own is None and not mismatch):
        return reading
    nums = dict(reading.numbers)
    said = reading.summary.split(": ", 1)[1]
    if own is None:
        return Reading("capture mismatch", f"capture mismatch: no accept length of this draft under its trained "
                                           f"list in the audit trail to compare with; {said}", nums)
    change = al / own.accept_length - 1.0
    nums["own"] = {"accept_length": own.accept_length, "points": own.points, "run_id": own.run_id,
                   "change": round(change, 3)}
    versus = f"accept length {al:.2f} vs {own.accept_length:.2f} with {own.points} in run {own.run_id} ({change:+.0%})"
    if reading.verdict == "wrong inputs":
        return Reading(reading.verdict, f"wrong inputs: {said}; {versus}", nums)
    if mismatch:
        verdict = "measured drop" if change < -OWN_NOISE else "no measured drop"
    else:
        verdict = "measured drop" if change < -OWN_DROP else reading.verdict
    return Reading(verdict, f"{verdict}: {versus}; {said}", nums)
