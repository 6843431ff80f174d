"""Is speculative decoding lossless? Greedy outputs against a reference (pure).

With temperature 0, EAGLE-3 must produce the tokens the target model produces alone: the
draft only proposes, the target verifies. A wrong draft config, a kernel bug or a
numerics change that breaks this shows up as outputs that differ from a reference recorded
on the same model without speculative decoding.

An exact match is too strict a bar: the verify pass runs the target on a different batch shape
than a plain decode step, and where the target's own two best tokens are tied in bf16 either may
come out. A trained EAGLE-3 pair on a real SGLang 0.5.17 (docs/gpu-validation.md) gave 13 of 16
identical greedy outputs, and every difference started where the plain server's top-2 logprobs
were 0.0 or 0.0625 nats apart (0.125 with an off-by-one capture list). So the reference records
the plain server's top-2 logprobs at every position, and each differing output is classified
at its first differing token:
- `tie`: the reference's margin there (top-1 minus top-2 logprob) is at most `TIE_MARGIN_NATS`,
  two bf16 steps of a logit between 8 and 16 (2**-4 each): the divergence is explained;
- `lossy`: a clear margin was broken: the speculative server emitted what the target would not;
- `unexplained`: no margin to judge by (a reference recorded without logprobs, a missing answer).
The share of outputs that match or diverge at a tie is the metric; any `lossy` fails the check.

`prompts` are fixed by a seed; `reference_key` names a reference by what decides the greedy
output (model, prompts, max tokens); `compare` is the check; `GENERATE_PY` is the program the
skill runs with the host's Python to send the prompts (stdlib only).
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

_WORDS = ("explain", "the", "difference", "between", "a", "list", "and", "tuple", "in", "python", "write", "short",
          "poem", "about", "GPUs", "summarize", "history", "of", "speculative", "decoding", "why", "is", "sky",
          "blue", "translate", "to", "French", "count", "from", "one", "ten", "name", "three", "prime", "numbers")


def prompts(seed: int, n: int) -> list[str]:
    """n fixed prompts (the same for a seed on every host and every run)."""
    rng = random.Random(seed)
    return [f"Q{i}: " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 16))) for i in range(n)]


def reference_key(model: str, texts: list[str], max_tokens: int) -> str:
    """What decides a greedy output: the target model, the prompts and the token budget."""
    blob = json.dumps({"model": model, "prompts": texts, "max_tokens": max_tokens}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


BF16_STEP_NATS = 0.0625           # one bf16 step of a logit in [8, 16): 8 * 2**-7
TIE_MARGIN_NATS = 2 * BF16_STEP_NATS   # at most this far apart, the target's top-2 are a tie


def _token(t: int | None) -> str:
    return "(end)" if t is None else str(t)


@dataclass(frozen=True)
class Divergence:
    """Where one output first differs from the reference, and why."""
    prompt: int
    token: int
    want: int | None              # the reference's token there (None: it had ended)
    got: int | None               # the speculative server's (None: ended or no answer)
    margin: float | None          # the reference's top-1 minus top-2 logprob there (nats)
    runner_up: int | None         # the reference's second-best token there
    kind: str                     # tie | lossy | unexplained

    def text(self) -> str:
        at = f"prompt {self.prompt} token {self.token}: {_token(self.want)} (reference) vs {_token(self.got)}"
        if self.margin is None:
            return f"{at}, no margin recorded"
        runner = ", the reference's runner-up" if self.got is not None and self.got == self.runner_up else ""
        return f"{at}{runner}, top-2 margin {self.margin:.4g} nats"


@dataclass(frozen=True)
class Match:
    matched: int
    total: int
    diffs: tuple[Divergence, ...] = ()

    def count(self, kind: str) -> int:
        return sum(1 for d in self.diffs if d.kind == kind)

    @property
    def rate(self) -> float:
        """The share of outputs that match the reference or diverge at a tie."""
        return (self.matched + self.count("tie")) / self.total if self.total else 0.0

    @property
    def exact_rate(self) -> float:
        return self.matched / self.total if self.total else 0.0

    def first_diff_text(self) -> str:
        return self.diffs[0].text() if self.diffs else "none"


def top2_rows(top_logprobs: list[Any] | None) -> list[list[float] | None]:
    """SGLang's meta_info `output_top_logprobs` (per output position, [logprob, token id, text] best
    first) as [top-1 id, its logprob, top-2 id, its logprob] rows (None where it has no two)."""
    rows: list[list[float] | None] = []
    for pos in top_logprobs or []:
        try:
            (l1, i1), (l2, i2) = (pos[0][0], pos[0][1]), (pos[1][0], pos[1][1])
            rows.append([int(i1), float(l1), int(i2), float(l2)])
        except (TypeError, IndexError, ValueError):
            rows.append(None)
    return rows


def compare(reference: list[list[int]], outputs: list[list[int] | None],
            top2: list[list[list[float] | None]] | None = None, tie_margin: float = TIE_MARGIN_NATS) -> Match:
    """Exact matches of token ids, prompt by prompt, and each differing output classified at its first
    differing token by the reference's top-2 margin there (`top2`: per prompt, per position, the rows of
    `top2_rows`; an output that is missing differs at token 0, unexplained)."""
    matched, diffs = 0, []
    for i, want in enumerate(reference):
        got = outputs[i] if i < len(outputs) else None
        if got is not None and list(got) == list(want):
            matched += 1
            continue
        seq = got or []
        k = next((j for j in range(max(len(want), len(seq)))
                  if j >= len(want) or j >= len(seq) or want[j] != seq[j]), 0)
        rows = top2[i] if top2 is not None and i < len(top2) and top2[i] else []
        row = rows[k] if got is not None and k < len(rows) else None
        margin = round(row[1] - row[3], 5) if row else None
        kind = "unexplained" if margin is None else "tie" if margin <= tie_margin + 1e-9 else "lossy"
        diffs.append(Divergence(i, k, want[k] if k < len(want) else None, seq[k] if k < len(seq) else None,
                                margin, int(row[2]) if row else None, kind))
    return Match(matched, len(reference), tuple(diffs))


# Run as `python -c GENERATE_PY PROMPTS_FILE BASE_URL MAX_TOKENS TIMEOUT LOGPROBS` (BASE_URL:
# `http://127.0.0.1:30000`; LOGPROBS 1: also ask for the top-2 logprobs of every output position,
# SGLang's `return_logprob` + `top_logprobs_num`): prints one JSON object, `outputs` (the output_ids
# of each prompt in order, null where the request failed) and `top2` (each prompt's
# meta_info.output_top_logprobs, null without LOGPROBS).
GENERATE_PY = r"""
import json, sys, urllib.request
path, base, max_tokens, timeout, logprobs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == "1"
out, top = [], []
for text in json.load(open(path)):
    body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_tokens}}
    if logprobs:
        body.update(return_logprob=True, top_logprobs_num=2)
    req = urllib.request.Request(f"{base}/generate", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            doc = json.loads(r.read())
        out.append(doc.get("output_ids"))
        top.append((doc.get("meta_info") or {}).get("output_top_logprobs") if logprobs else None)
    except Exception as e:
        print(f"prompt {len(out)}: {e}", file=sys.stderr)
        out.append(None)
        top.append(None)
print(json.dumps({"outputs": out, "top2": top}))
"""
