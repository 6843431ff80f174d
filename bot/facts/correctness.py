"""Is speculative decoding lossless? Greedy outputs against a reference (pure).

With temperature 0, EAGLE-3 must produce the tokens the target model produces alone: the
draft only proposes, the target verifies. A wrong draft config, a kernel bug or a
numerics change that breaks this shows up as outputs that differ from a reference recorded
on the same model without speculative decoding. vLLM's EAGLE-3 CI test asks for more than
60 of 100 matching outputs; we default to 95% exact matches (small batch-dependent numerics
may flip a late token now and then) and name the first differing token.

`prompts` are fixed by a seed; `reference_key` names a reference by what decides the greedy
output (model, prompts, max tokens); `compare` is the check; `GENERATE_PY` is the program the
skill runs with the host's Python to send the prompts (stdlib only).
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

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


def _token(t: int | None) -> str:
    return "(end)" if t is None else str(t)


@dataclass(frozen=True)
class Match:
    matched: int
    total: int
    first_diff: tuple[int, int, int | None, int | None] | None   # prompt, token index, reference, got

    @property
    def rate(self) -> float:
        return self.matched / self.total if self.total else 0.0

    def first_diff_text(self) -> str:
        if self.first_diff is None:
            return "none"
        p, k, want, got = self.first_diff
        return f"prompt {p} token {k}: {_token(want)} (reference) vs {_token(got)}"


def compare(reference: list[list[int]], outputs: list[list[int] | None]) -> Match:
    """Exact matches of token ids, prompt by prompt; the first difference (an output that is
    missing counts as different at token 0)."""
    matched, first = 0, None
    for i, want in enumerate(reference):
        got = outputs[i] if i < len(outputs) else None
        if got is not None and list(got) == list(want):
            matched += 1
            continue
        if first is None:
            got = got or []
            k = next((j for j in range(max(len(want), len(got)))
                      if j >= len(want) or j >= len(got) or want[j] != got[j]), 0)
            first = (i, k, want[k] if k < len(want) else None, got[k] if k < len(got) else None)
    return Match(matched, len(reference), first)


# Run as `python -c GENERATE_PY PROMPTS_FILE BASE_URL MAX_TOKENS TIMEOUT` (BASE_URL:
# `http://127.0.0.1:30000`): prints one JSON list, the output_ids of each prompt in order (null
# where the request failed).
GENERATE_PY = r"""
import json, sys, urllib.request
path, base, max_tokens, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
out = []
for text in json.load(open(path)):
    body = json.dumps({"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_tokens}}).encode()
    req = urllib.request.Request(f"{base}/generate", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out.append(json.loads(r.read()).get("output_ids"))
    except Exception as e:
        print(f"prompt {len(out)}: {e}", file=sys.stderr)
        out.append(None)
print(json.dumps(out))
"""
